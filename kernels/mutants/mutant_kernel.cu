// The mutants on the device: one thread per token, for `attnres-check mutants` on a GPU (their
// speed does not matter; their arithmetic is the host's, kernels/mutants/mutant_kernel.h).
#include "kernels/common/cuda_check.h"
#include "kernels/mutants/mutant_kernel.h"

namespace attnres {
namespace {

__global__ void mutant_kernel(const AttnResArgs args, Mutation mutation) {
  const std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (t < args.shape.tokens) mutant_token(args, mutation, t);
}

}  // namespace

void mutant_kernel_device(const AttnResArgs& args, Mutation mutation, cudaStream_t stream) {
  if (args.shape.tokens == 0) return;
  constexpr int kThreads = 64;
  const std::int64_t blocks = (args.shape.tokens + kThreads - 1) / kThreads;
  mutant_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(args, mutation);
  ATTNRES_CHECK_LAUNCH("mutant_kernel");
}

}  // namespace attnres
