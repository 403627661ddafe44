// The native kernel's variants, launched by launch_native (kernels/native/native_sm90.cu) once the
// guard and the shape checks have passed and the plan is chosen.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/common/problem.h"
#include "kernels/native/native_plan.h"

namespace attnres {

// The launch attribute of programmatic dependent launch.
inline cudaLaunchAttribute programmatic_serialization() {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

void launch_native_ring(const AttnResArgs& args, const native::Plan& plan, bool programmatic_dependent_launch,
                        cudaStream_t stream);
void launch_native_split(const AttnResArgs& args, const native::Plan& plan, bool programmatic_dependent_launch,
                         cudaStream_t stream);

}  // namespace attnres
