// The input generator on the device (kernels/common/host_generator.h is its host twin).
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/common/philox.h"
#include "kernels/common/strided_layout.h"

namespace attnres {

// Fills the logical elements of a strided device tensor (`data`: its first one) with
// generate_bf16: the same bits the host generator produces.
void generate_on_device(bf16_bits* data, const StridedLayout& layout, GeneratorKey key, ResolvedDistribution dist,
                        cudaStream_t stream);

}  // namespace attnres
