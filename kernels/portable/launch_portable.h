// The portable kernel's host entry point. Every pointer in AttnResArgs is a device pointer.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/common/problem.h"

namespace attnres {

// Any sm_75+ device; honours every stride. `hard_coded_row_stride` replays the original
// bug (prefix, delta and output rows taken as H apart) where no native kernel can run.
void launch_portable(const AttnResArgs& args, cudaStream_t stream, bool hard_coded_row_stride = false);

}  // namespace attnres
