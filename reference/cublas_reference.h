// The float64 reference on the GPU, for cases too large for the CPU: inputs are upcast to
// double in their own strided layout and cuBLAS does the dot products (batched GEMV over the
// blocks, lda = the blocks' row stride) and the mix; small kernels do the norms and softmax.
#pragma once
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/problem.h"

namespace attnres {

// `args` holds device pointers to the inputs as they were before the kernel ran; they are
// not modified. Returns out [T*H] in float64.
std::vector<double> cublas_reference(const AttnResArgs& args, cudaStream_t stream);

}  // namespace attnres
