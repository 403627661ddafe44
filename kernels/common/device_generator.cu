// Device twin of the host input generator (kernels/common/philox.h): same function, same bits.
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_generator.h"

namespace attnres {
namespace {

__global__ void generate_kernel(bf16_bits* data, StridedLayout layout, GeneratorKey key, ResolvedDistribution dist) {
  const std::int64_t columns = layout.columns, total = layout.rows() * columns;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / columns, col = i % columns;
    data[layout.row_start(row) + col] = generate_bf16(key, dist, std::uint64_t(i));
  }
}

}  // namespace

void generate_on_device(bf16_bits* data, const StridedLayout& layout, GeneratorKey key, ResolvedDistribution dist,
                        cudaStream_t stream) {
  if (layout.empty()) return;
  generate_kernel<<<4096, 256, 0, stream>>>(data, layout, key, dist);
  ATTNRES_CHECK_LAUNCH("generate_kernel");
}

}  // namespace attnres
