// The float64 reference on the GPU, for cases too large for the CPU: p and the blocks are
// gathered from their strided layouts into dense float64 [T, H] and [T, MAXB, H], cuBLAS does
// the dot products (one GEMV over every block row) and the mix (batched GEMV); small kernels
// do the norms and softmax.
#pragma once
#include <optional>

#include <cuda_runtime_api.h>

#include "kernels/common/checked_size.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/problem.h"

namespace attnres {

// `args` holds device pointers to the inputs as they were before the kernel ran; they are
// not modified. Returns out [T*H] in float64, on the device.
DeviceBuffer<double> cublas_reference(const AttnResArgs& args, cudaStream_t stream);

// Device bytes cublas_reference allocates beside the inputs (its float64 copies and
// intermediates), as it sizes them; nothing when that overflows int64.
inline std::optional<std::int64_t> cublas_reference_device_bytes(const AttnResShape& s) {
  const CheckedSize tokens = s.tokens, block_rows = tokens * s.max_blocks;
  const CheckedSize doubles = block_rows * s.hidden + tokens * s.hidden + s.hidden + block_rows * 2 + tokens * 2 +
                              tokens * (s.num_blocks + 1) + tokens * s.hidden;
  return (doubles * CheckedSize(sizeof(double))).get();
}

}  // namespace attnres
