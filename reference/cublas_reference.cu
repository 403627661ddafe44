#include "reference/cublas_reference.h"

#include <cstdint>
#include <stdexcept>

#include <cublas_v2.h>
#include <fmt/format.h>

#include "kernels/common/bf16.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"

namespace attnres {
namespace {

constexpr int kThreads = 256;

// The blocks, in whatever strided layout, as dense [T, MAXB, H] doubles.
__global__ void gather_blocks_kernel(AttnResArgs a, double* blocks) {
  const std::int64_t hidden = a.shape.hidden, max_blocks = a.shape.max_blocks;
  const std::int64_t total = a.shape.tokens * max_blocks * hidden;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / (max_blocks * hidden), b = (i / hidden) % max_blocks, h = i % hidden;
    blocks[i] = bf16_to_float(a.blocks[t * a.strides.blocks_token + b * a.strides.blocks_row + h]);
  }
}

// p (residual_sum) as dense [T, H]; also into the written block of the dense blocks.
__global__ void prefix_sum_kernel(AttnResArgs a, double* p, double* blocks) {
  const std::int64_t total = a.shape.tokens * a.shape.hidden;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / a.shape.hidden, h = i % a.shape.hidden;
    const bf16_bits delta = a.shape.has_delta ? a.delta[t * a.strides.delta + h] : bf16_bits(0);
    const double value = bf16_to_float(residual_sum(a.prefix[t * a.strides.prefix + h], delta, a.shape.has_delta));
    p[i] = value;
    if (a.shape.block_write_idx >= 0)
      blocks[(t * a.shape.max_blocks + a.shape.block_write_idx) * a.shape.hidden + h] = value;
  }
}

__global__ void gate_kernel(AttnResArgs a, double* gate) {
  for (int h = blockIdx.x * blockDim.x + threadIdx.x; h < a.shape.hidden; h += gridDim.x * blockDim.x)
    gate[h] = double(bf16_to_float(a.norm_weight[h])) * double(bf16_to_float(a.qk_weight[h]));
}

__device__ double block_sum(double value) {
  __shared__ double scratch[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

// One block per row of a dense [rows, columns] matrix: its sum of squares.
__global__ void row_squares_kernel(const double* base, int columns, double* out) {
  const double* row = base + std::int64_t(blockIdx.x) * columns;
  double partial = 0;
  for (int h = threadIdx.x; h < columns; h += blockDim.x) partial += row[h] * row[h];
  const double total = block_sum(partial);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// Softmax over the sources of one token: weights[t][S], S = num_blocks + 1, p last.
__global__ void softmax_kernel(AttnResArgs a, const double* block_dots, const double* block_squares,
                               const double* p_dots, const double* p_squares, double* weights) {
  const std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (t >= a.shape.tokens) return;
  const int sources = a.shape.num_blocks + 1;
  double* w = weights + t * sources;
  double max_logit = -INFINITY;
  for (int s = 0; s < sources; ++s) {
    const bool is_p = s == a.shape.num_blocks;
    const std::int64_t row = t * a.shape.max_blocks + s;
    const double dot = is_p ? p_dots[t] : block_dots[row];
    const double squares = is_p ? p_squares[t] : block_squares[row];
    w[s] = dot / sqrt(squares / a.shape.hidden + double(a.shape.eps));
    max_logit = fmax(max_logit, w[s]);
  }
  double sum = 0;
  for (int s = 0; s < sources; ++s) sum += (w[s] = exp(w[s] - max_logit));
  for (int s = 0; s < sources; ++s) w[s] /= sum;
}

// One block per token: adds p's share to the mixed row, then the output RMSNorm.
__global__ void finish_kernel(AttnResArgs a, const double* p, const double* weights, double* mixed) {
  const std::int64_t t = blockIdx.x;
  const int hidden = a.shape.hidden;
  const double wp = weights[t * (a.shape.num_blocks + 1) + a.shape.num_blocks];
  double* row = mixed + t * hidden;
  double partial = 0;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
    row[h] += wp * p[t * hidden + h];
    partial += row[h] * row[h];
  }
  if (!a.shape.has_output_norm) return;
  const double scale = 1.0 / sqrt(block_sum(partial) / hidden + double(a.shape.output_norm_eps));
  for (int h = threadIdx.x; h < hidden; h += blockDim.x)
    row[h] *= scale * double(bf16_to_float(a.output_norm_weight[h]));
}

class CublasHandle {
 public:
  CublasHandle() { ATTNRES_CUBLAS_CHECK(cublasCreate(&handle_)); }
  ~CublasHandle() { cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

unsigned grid_for(std::int64_t count) {
  return unsigned(std::min<std::int64_t>((count + kThreads - 1) / kThreads, 65535));
}

}  // namespace

DeviceBuffer<double> cublas_reference(const AttnResArgs& a, cudaStream_t stream) {
  const AttnResShape& s = a.shape;
  const std::int64_t tokens = s.tokens, hidden = s.hidden;
  const int sources = s.num_blocks + 1;
  const std::int64_t block_rows = tokens * s.max_blocks;
  if (tokens == 0) return DeviceBuffer<double>{};  // an empty batch: an empty [0, H] output
  // cuBLAS and grid dimensions count in int.
  if (block_rows > INT32_MAX)
    throw std::invalid_argument(
        fmt::format("cublas_reference: T * max_blocks must fit in int32, got {} * {}", tokens, s.max_blocks));
  // Dense [T, MAXB, H] blocks are one matrix of T*MAXB rows, lda = H: a single GEMV gives every
  // block's logit dot product, whatever the blocks' own layout.
  const std::int64_t blocks_elements = block_rows * hidden;
  DeviceBuffer<double> blocks{std::size_t(blocks_elements)}, p{std::size_t(tokens * hidden)}, gate{std::size_t(hidden)};
  DeviceBuffer<double> block_dots{std::size_t(block_rows)}, block_squares{std::size_t(block_rows)};
  DeviceBuffer<double> p_dots{std::size_t(tokens)}, p_squares{std::size_t(tokens)};
  DeviceBuffer<double> weights{std::size_t(tokens * sources)}, mixed{std::size_t(tokens * hidden)};

  if (blocks_elements) {
    gather_blocks_kernel<<<grid_for(blocks_elements), kThreads, 0, stream>>>(a, blocks.get());
    ATTNRES_CHECK_LAUNCH("gather_blocks_kernel");
  }
  prefix_sum_kernel<<<grid_for(tokens * hidden), kThreads, 0, stream>>>(a, p.get(), blocks.get());
  ATTNRES_CHECK_LAUNCH("prefix_sum_kernel");
  gate_kernel<<<grid_for(hidden), kThreads, 0, stream>>>(a, gate.get());
  ATTNRES_CHECK_LAUNCH("gate_kernel");

  CublasHandle handle;
  ATTNRES_CUBLAS_CHECK(cublasSetStream(handle.get(), stream));
  ATTNRES_CUBLAS_CHECK(cublasSetMathMode(handle.get(), CUBLAS_PEDANTIC_MATH));
  const double one = 1.0, zero = 0.0;
  // Row-major rows of length H are column-major H x rows matrices; OP_T dots each row with x.
  if (block_rows) {
    ATTNRES_CUBLAS_CHECK(cublasDgemv(handle.get(), CUBLAS_OP_T, int(hidden), int(block_rows), &one, blocks.get(),
                                     int(hidden), gate.get(), 1, &zero, block_dots.get(), 1));
    row_squares_kernel<<<unsigned(block_rows), kThreads, 0, stream>>>(blocks.get(), int(hidden), block_squares.get());
    ATTNRES_CHECK_LAUNCH("row_squares_kernel");
  }
  ATTNRES_CUBLAS_CHECK(cublasDgemv(handle.get(), CUBLAS_OP_T, int(hidden), int(tokens), &one, p.get(), int(hidden),
                                   gate.get(), 1, &zero, p_dots.get(), 1));
  row_squares_kernel<<<unsigned(tokens), kThreads, 0, stream>>>(p.get(), int(hidden), p_squares.get());
  ATTNRES_CHECK_LAUNCH("row_squares_kernel");
  softmax_kernel<<<grid_for(tokens), kThreads, 0, stream>>>(a, block_dots.get(), block_squares.get(), p_dots.get(),
                                                            p_squares.get(), weights.get());
  ATTNRES_CHECK_LAUNCH("softmax_kernel");
  // mixed[t] = sum_b w[t][b] * blocks[t][b]: one GEMV per token over its block rows.
  if (s.num_blocks > 0) {
    ATTNRES_CUBLAS_CHECK(cublasDgemvStridedBatched(handle.get(), CUBLAS_OP_N, int(hidden), s.num_blocks, &one,
                                                   blocks.get(), int(hidden), s.max_blocks * hidden, weights.get(), 1,
                                                   sources, &zero, mixed.get(), 1, hidden, int(tokens)));
  } else {
    ATTNRES_CUDA_CHECK(cudaMemsetAsync(mixed.get(), 0, mixed.bytes(), stream));
  }
  finish_kernel<<<unsigned(tokens), kThreads, 0, stream>>>(a, p.get(), weights.get(), mixed.get());
  ATTNRES_CHECK_LAUNCH("finish_kernel");

  ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
  return mixed;
}

}  // namespace attnres
