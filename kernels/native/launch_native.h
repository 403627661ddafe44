// The native kernel's host entry points. Every pointer in AttnResArgs is a device pointer.
#pragma once
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "kernels/common/problem.h"
#include "kernels/native/native_plan.h"

namespace attnres {

struct NativeLaunchOptions {
  // Refuse (LayoutError) any prefix, delta or output whose row stride is not H, before
  // launching; without, the kernel runs and corrupts.
  bool layout_guard = true;
  // Launch with programmatic stream serialization: the kernel's prologue overlaps the previous
  // kernel's tail (it reads nothing before that kernel has finished).
  bool programmatic_dependent_launch = false;
  std::optional<native::Plan> plan;  // default: native::choose_plan
};

// The native SM90/SM100 kernel. Shapes it does not support and illegal plans are refused
// (std::invalid_argument) before any CUDA call.
void launch_native(const AttnResArgs& args, const NativeLaunchOptions& options, cudaStream_t stream);

// Whether this build holds a native image that loads on the current device, read from the
// kernel's attributes at run time (binary_version: 90, 100, ... or 0).
struct NativeImageQuery {
  bool loadable = false;
  int binary_version = 0;
  std::string detail;
};
NativeImageQuery query_native_image();

}  // namespace attnres
