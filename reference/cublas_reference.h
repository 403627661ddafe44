// The float64 reference on the GPU, for cases too large for the CPU: inputs are upcast to
// double in their own strided layout and cuBLAS does the dot products (batched GEMV over the
// blocks, lda = the blocks' row stride) and the mix; small kernels do the norms and softmax.
#pragma once
#include <optional>

#include <cuda_runtime_api.h>

#include "kernels/checked_size.h"
#include "kernels/device_buffer.h"
#include "kernels/problem.h"

namespace attnres {

// `args` holds device pointers to the inputs as they were before the kernel ran; they are
// not modified. Returns out [T*H] in float64, on the device.
DeviceBuffer<double> cublas_reference(const AttnResArgs& args, cudaStream_t stream);

// Device bytes cublas_reference allocates beside the inputs (its float64 copies and
// intermediates), as it sizes them; nothing when that overflows int64.
inline std::optional<std::int64_t> cublas_reference_device_bytes(const AttnResShape& s, const AttnResStrides& strides) {
  const CheckedSize tokens = s.tokens, block_rows = tokens * s.max_blocks;
  const CheckedSize doubles = block_rows * strides.blocks_row + tokens * strides.prefix + s.hidden + block_rows * 2 +
                              tokens * 2 + tokens * (s.num_blocks + 1) + tokens * s.hidden;
  return (doubles * CheckedSize(sizeof(double))).get();
}

}  // namespace attnres
