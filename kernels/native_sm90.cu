// Native AttnRes kernel for Hopper (sm_90a) and Blackwell (sm_100a).
// Rows of prefix, delta and output are taken as exactly H apart (as in the Kimi K3 op), so
// launch_native runs the shared layout guard first. Design:
//  - persistent grid, one CTA per SM, each CTA walks rows t = blockIdx.x, += gridDim.x;
//  - one producer warp streams every source row (prefix, delta, blocks) into a ring of
//    shared-memory stages with bulk async copies (cp.async.bulk) completing on mbarriers,
//    running ahead across row boundaries;
//  - H/16 consumer threads each own two 16-byte vectors of the row; per source they reduce
//    (dot with norm_weight*qk_weight, sum of squares) across the CTA with one named barrier
//    and fold the source into an online softmax held in registers;
//  - prefix write-back, the block write and the output RMSNorm are fused; nothing but the
//    final output, p and the block row is written to global memory.
#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "kernels/bf16.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/layout_guard.h"
#include "kernels/native_limits.h"

namespace attnres {
namespace {

constexpr int kMaxStages = 16;
constexpr int kVec = native::kElementsPerVector;
constexpr int kVecsPerThread = native::kVectorsPerThread;
constexpr int kElemsPerThread = kVec * kVecsPerThread;
constexpr int kConsumerBarrier = 1;  // named barrier id; 0 is __syncthreads

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred ready;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n"
        " selp.u32 %0, 1, 0, ready;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void consumer_sync(int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(kConsumerBarrier), "r"(threads) : "memory");
}

__device__ __forceinline__ void unpack(const uint4 raw, float* out) {
  const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = bits_float(words[i] << 16);
    out[2 * i + 1] = bits_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack(const float* in) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = std::uint32_t(float_to_bf16(in[2 * i])) | (std::uint32_t(float_to_bf16(in[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Which global row the j-th load of token t reads: 0 prefix, 1 delta (if any), then the blocks
// that are sources, skipping the written one (that source is p itself).
struct RowPlan {
  int loads;
  int first_block_load;
};

__device__ __forceinline__ const bf16_bits* load_source(const AttnResArgs& a, std::int64_t t, int j,
                                                        const RowPlan& plan) {
  const std::int64_t hidden = a.shape.hidden;
  if (j == 0) return a.prefix + t * hidden;
  if (a.shape.has_delta && j == 1) return a.delta + t * hidden;
  int block = j - plan.first_block_load;
  if (a.shape.block_write_idx >= 0 && block >= a.shape.block_write_idx) ++block;
  return a.blocks + t * a.strides.blocks_token + std::int64_t(block) * a.strides.blocks_row;
}

struct alignas(8) Partial {
  float dot, squares;
};

// The CTA-wide sum of one (dot, squares) pair, over consumer threads; every consumer gets it.
// Two scratch buffers alternate, so one barrier per reduction is enough.
__device__ __forceinline__ Partial consumer_sum(Partial value, Partial (*scratch)[32], int& buffer, int warps,
                                                int threads) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value.dot += __shfl_xor_sync(0xffffffffu, value.dot, offset);
    value.squares += __shfl_xor_sync(0xffffffffu, value.squares, offset);
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) scratch[buffer][warp] = value;
  consumer_sync(threads);
  Partial total{0.f, 0.f};
  for (int w = 0; w < warps; ++w) {
    const Partial p = scratch[buffer][w];
    total.dot += p.dot;
    total.squares += p.squares;
  }
  buffer ^= 1;
  return total;
}

// MaxThreads only sets the register budget: 512 threads (H <= 7680, Kimi K3's 7168 included)
// leave 128 registers a thread, enough to hold a row slice without spilling.
template <int MaxThreads>
__global__ void __launch_bounds__(MaxThreads, 1) attnres_native_kernel(const AttnResArgs a, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char ring[];  // stages x H bf16
  __shared__ std::uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ Partial scratch[2][32];

  const AttnResShape& s = a.shape;
  const int hidden = s.hidden;
  const int consumer_threads = hidden / kElemsPerThread;
  const int consumer_warps = consumer_threads / 32;
  const std::uint32_t row_bytes = std::uint32_t(hidden) * sizeof(bf16_bits);
  const bool write_block = s.block_write_idx >= 0;
  const bool written_block_is_source = write_block && s.block_write_idx < s.num_blocks;
  RowPlan plan;
  plan.first_block_load = s.has_delta ? 2 : 1;
  plan.loads = plan.first_block_load + s.num_blocks - (written_block_is_source ? 1 : 0);

  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], consumer_threads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (threadIdx.x >= consumer_threads) {  // producer warp: one lane issues every copy
    if (threadIdx.x != consumer_threads) return;
    int stage = 0;
    std::uint32_t phase = 0;
    for (std::int64_t t = blockIdx.x; t < s.tokens; t += gridDim.x) {
      for (int j = 0; j < plan.loads; ++j) {
        mbar_wait(&empty[stage], phase ^ 1u);  // a fresh barrier counts as released
        mbar_arrive_expect_tx(&full[stage], row_bytes);
        bulk_load(ring + std::size_t(stage) * row_bytes, load_source(a, t, j, plan), row_bytes, &full[stage]);
        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  // Consumers: thread c owns elements [8c, 8c+8) and [8(c+C), 8(c+C)+8), C = consumer threads.
  const int c = threadIdx.x;
  int element[kVecsPerThread];
#pragma unroll
  for (int v = 0; v < kVecsPerThread; ++v) element[v] = (c + v * consumer_threads) * kVec;
  float gate[kElemsPerThread];
  uint4 out_weight[kVecsPerThread];
#pragma unroll
  for (int v = 0; v < kVecsPerThread; ++v) {
    float nw[kVec], qk[kVec];
    unpack(*reinterpret_cast<const uint4*>(a.norm_weight + element[v]), nw);
    unpack(*reinterpret_cast<const uint4*>(a.qk_weight + element[v]), qk);
#pragma unroll
    for (int i = 0; i < kVec; ++i) gate[v * kVec + i] = nw[i] * qk[i];
    out_weight[v] = s.has_output_norm ? *reinterpret_cast<const uint4*>(a.output_norm_weight + element[v])
                                      : make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);  // 1.0
  }
  const float inv_hidden = 1.0f / float(hidden);
  int stage = 0;
  std::uint32_t phase = 0;
  int buffer = 0;
  // Reads this thread's slice of the next ring stage, then hands the stage back.
  auto consume = [&](float* values) {
    mbar_wait(&full[stage], phase);
    const unsigned char* base = ring + std::size_t(stage) * row_bytes;
#pragma unroll
    for (int v = 0; v < kVecsPerThread; ++v)
      unpack(*reinterpret_cast<const uint4*>(base + element[v] * sizeof(bf16_bits)), values + v * kVec);
    mbar_arrive(&empty[stage]);
    if (++stage == stages) {
      stage = 0;
      phase ^= 1u;
    }
  };

  for (std::int64_t t = blockIdx.x; t < s.tokens; t += gridDim.x) {
    float p[kElemsPerThread], v[kElemsPerThread], acc[kElemsPerThread];
    consume(p);
    if (s.has_delta) {
      consume(v);
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) p[i] = bf16_to_float(float_to_bf16(p[i] + v[i]));
    }
#pragma unroll
    for (int w = 0; w < kVecsPerThread; ++w) {
      const uint4 packed = pack(p + w * kVec);
      *reinterpret_cast<uint4*>(a.prefix + t * hidden + element[w]) = packed;
      if (write_block)
        *reinterpret_cast<uint4*>(a.blocks + t * a.strides.blocks_token +
                                  std::int64_t(s.block_write_idx) * a.strides.blocks_row + element[w]) = packed;
    }
    // Online softmax over sources: running max, running weight sum, rescaled accumulator.
    float running_max = -INFINITY, weight_sum = 0.f;
#pragma unroll
    for (int i = 0; i < kElemsPerThread; ++i) acc[i] = 0.f;
    auto fold = [&](const float* x) {
      Partial partial{0.f, 0.f};
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) {
        partial.dot = fmaf(x[i], gate[i], partial.dot);
        partial.squares = fmaf(x[i], x[i], partial.squares);
      }
      const Partial total = consumer_sum(partial, scratch, buffer, consumer_warps, consumer_threads);
      const float logit = total.dot * rsqrtf(total.squares * inv_hidden + s.eps);
      const float new_max = fmaxf(running_max, logit);
      const float rescale = __expf(running_max - new_max);  // 0 on the first source
      const float weight = __expf(logit - new_max);
      weight_sum = fmaf(weight_sum, rescale, weight);
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) acc[i] = fmaf(acc[i], rescale, weight * x[i]);
      running_max = new_max;
    };
    fold(p);
    for (int b = 0; b < s.num_blocks; ++b) {
      if (b == s.block_write_idx) {
        fold(p);  // blocks[:, block_write_idx] was just overwritten with p
      } else {
        consume(v);
        fold(v);
      }
    }
    const float inv_sum = 1.0f / weight_sum;
    Partial squares{0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kElemsPerThread; ++i) {
      acc[i] *= inv_sum;
      squares.squares = fmaf(acc[i], acc[i], squares.squares);
    }
    float scale = 1.f;
    if (s.has_output_norm)
      scale = rsqrtf(consumer_sum(squares, scratch, buffer, consumer_warps, consumer_threads).squares * inv_hidden +
                     s.output_norm_eps);
#pragma unroll
    for (int w = 0; w < kVecsPerThread; ++w) {
      float ow[kVec], out[kVec];
      unpack(out_weight[w], ow);
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] = acc[w * kVec + i] * scale * ow[i];
      *reinterpret_cast<uint4*>(a.output + t * hidden + element[w]) = pack(out);
    }
  }
#endif
}

}  // namespace

NativeImageQuery query_native_image() {
  NativeImageQuery query;
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, attnres_native_kernel<512>);
  if (status != cudaSuccess) {
    cudaGetLastError();
    query.detail = fmt::format("cudaFuncGetAttributes: {}", cudaGetErrorName(status));
    return query;
  }
  query.loadable = true;
  query.binary_version = attributes.binaryVersion;
  query.detail = fmt::format("binary version {}, {} registers", attributes.binaryVersion, attributes.numRegs);
  return query;
}

void launch_native(const AttnResArgs& args, bool layout_guard, cudaStream_t stream) {
  if (layout_guard) require_dense_rows(args.shape, args.strides);
  if (args.shape.tokens == 0) return;
  int device = 0, sms = 0, smem_optin = 0;
  ATTNRES_CUDA_CHECK(cudaGetDevice(&device));
  ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int row_bytes = args.shape.hidden * int(sizeof(bf16_bits));
  const int static_bytes = 2 * kMaxStages * 8 + 2 * 32 * 8 + 1024;  // barriers, scratch, slack
  const int stages = std::min(kMaxStages, (smem_optin - static_bytes) / row_bytes);
  if (stages < 2) throw CudaError(fmt::format("native kernel: H={} leaves fewer than 2 ring stages", args.shape.hidden), false);
  const int ring_bytes = stages * row_bytes;
  const int threads = args.shape.hidden / kElemsPerThread + 32;
  const unsigned grid = unsigned(std::min<std::int64_t>(args.shape.tokens, sms));
  if (threads <= 512) {
    ATTNRES_CUDA_CHECK(cudaFuncSetAttribute(attnres_native_kernel<512>, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_bytes));
    attnres_native_kernel<512><<<grid, threads, ring_bytes, stream>>>(args, stages);
    ATTNRES_CHECK_LAUNCH("attnres_native_kernel<512>");
  } else {
    ATTNRES_CUDA_CHECK(cudaFuncSetAttribute(attnres_native_kernel<1024>, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_bytes));
    attnres_native_kernel<1024><<<grid, threads, ring_bytes, stream>>>(args, stages);
    ATTNRES_CHECK_LAUNCH("attnres_native_kernel<1024>");
  }
}

}  // namespace attnres
