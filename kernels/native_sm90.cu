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
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

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

// MaxThreads only sets the register budget: 512 threads (H <= 7680, Kimi K3's 7168 included)
// leave 128 registers a thread, enough to hold a row slice without spilling.
// Group: sources whose (dot, squares) are reduced under one barrier; PerWarpRelease: one
// mbarrier arrive per consumer warp instead of per thread.
template <int MaxThreads, int Group, bool PerWarpRelease>
__global__ void __launch_bounds__(MaxThreads, 1) attnres_native_kernel(const AttnResArgs a, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kMaxWarps = MaxThreads / 32;
  extern __shared__ __align__(128) unsigned char ring[];  // stages x H bf16
  __shared__ std::uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ Partial scratch[2][Group][kMaxWarps];

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
      mbar_init(&empty[i], PerWarpRelease ? consumer_warps : consumer_threads);
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
  const int lane = c % 32, warp = c / 32;
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
  // Copies this thread's slice of the next ring stage into registers, then hands the stage back.
  auto consume = [&](uint4* packed) {
    mbar_wait(&full[stage], phase);
    const unsigned char* base = ring + std::size_t(stage) * row_bytes;
#pragma unroll
    for (int v = 0; v < kVecsPerThread; ++v) packed[v] = *reinterpret_cast<const uint4*>(base + element[v] * sizeof(bf16_bits));
    if (PerWarpRelease) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[stage]);
    } else {
      mbar_arrive(&empty[stage]);
    }
    if (++stage == stages) {
      stage = 0;
      phase ^= 1u;
    }
  };
  // CTA-wide sums of `count` (dot, squares) pairs under one named barrier; two scratch
  // buffers alternate, so the next group may write while stragglers still read this one.
  auto reduce = [&](Partial* values, int count) {
#pragma unroll
    for (int g = 0; g < Group; ++g) {
      if (g >= count) break;
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        values[g].dot += __shfl_xor_sync(0xffffffffu, values[g].dot, offset);
        values[g].squares += __shfl_xor_sync(0xffffffffu, values[g].squares, offset);
      }
      if (lane == 0) scratch[buffer][g][warp] = values[g];
    }
    consumer_sync(consumer_threads);
#pragma unroll
    for (int g = 0; g < Group; ++g) {
      if (g >= count) break;
      Partial total{0.f, 0.f};
#pragma unroll
      for (int w = 0; w < kMaxWarps; ++w) {
        if (w >= consumer_warps) break;
        const Partial p = scratch[buffer][g][w];
        total.dot += p.dot;
        total.squares += p.squares;
      }
      values[g] = total;
    }
    buffer ^= 1;
  };

  for (std::int64_t t = blockIdx.x; t < s.tokens; t += gridDim.x) {
    uint4 p_packed[kVecsPerThread];
    {
      uint4 prefix_packed[kVecsPerThread], delta_packed[kVecsPerThread];
      consume(prefix_packed);
      if (s.has_delta) consume(delta_packed);
#pragma unroll
      for (int v = 0; v < kVecsPerThread; ++v) {
        float x[kVec];
        unpack(prefix_packed[v], x);
        if (s.has_delta) {
          float d[kVec];
          unpack(delta_packed[v], d);
#pragma unroll
          for (int i = 0; i < kVec; ++i) x[i] += d[i];
        }
        p_packed[v] = pack(x);
        *reinterpret_cast<uint4*>(a.prefix + t * hidden + element[v]) = p_packed[v];
        if (write_block)
          *reinterpret_cast<uint4*>(a.blocks + t * a.strides.blocks_token +
                                    std::int64_t(s.block_write_idx) * a.strides.blocks_row + element[v]) = p_packed[v];
      }
    }
    // Online softmax over sources (p first, then the blocks; blocks[:, block_write_idx] is p),
    // a group of sources at a time: running max, running weight sum, rescaled accumulator.
    float running_max = -INFINITY, weight_sum = 0.f, acc[kElemsPerThread];
#pragma unroll
    for (int i = 0; i < kElemsPerThread; ++i) acc[i] = 0.f;
    const int sources = s.num_blocks + 1;
    for (int first = 0; first < sources; first += Group) {
      const int count = min(Group, sources - first);
      uint4 packed[Group][kVecsPerThread];
      Partial partial[Group];
#pragma unroll
      for (int g = 0; g < Group; ++g) {
        if (g >= count) break;
        const int src = first + g;  // 0 is p; src >= 1 is block src - 1
        if (src == 0 || src - 1 == s.block_write_idx) {
#pragma unroll
          for (int v = 0; v < kVecsPerThread; ++v) packed[g][v] = p_packed[v];
        } else {
          consume(packed[g]);
        }
        partial[g] = Partial{0.f, 0.f};
#pragma unroll
        for (int v = 0; v < kVecsPerThread; ++v) {
          float x[kVec];
          unpack(packed[g][v], x);
#pragma unroll
          for (int i = 0; i < kVec; ++i) {
            partial[g].dot = fmaf(x[i], gate[v * kVec + i], partial[g].dot);
            partial[g].squares = fmaf(x[i], x[i], partial[g].squares);
          }
        }
      }
      reduce(partial, count);
      float logit[Group], new_max = running_max;
#pragma unroll
      for (int g = 0; g < Group; ++g) {
        if (g >= count) break;
        logit[g] = partial[g].dot * rsqrtf(partial[g].squares * inv_hidden + s.eps);
        new_max = fmaxf(new_max, logit[g]);
      }
      const float rescale = __expf(running_max - new_max);  // 0 on the first group
      weight_sum *= rescale;
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) acc[i] *= rescale;
#pragma unroll
      for (int g = 0; g < Group; ++g) {
        if (g >= count) break;
        const float weight = __expf(logit[g] - new_max);
        weight_sum += weight;
#pragma unroll
        for (int v = 0; v < kVecsPerThread; ++v) {
          float x[kVec];
          unpack(packed[g][v], x);
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[v * kVec + i] = fmaf(weight, x[i], acc[v * kVec + i]);
        }
      }
      running_max = new_max;
    }
    const float inv_sum = 1.0f / weight_sum;
    Partial squares[Group];
    squares[0] = Partial{0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kElemsPerThread; ++i) {
      acc[i] *= inv_sum;
      squares[0].squares = fmaf(acc[i], acc[i], squares[0].squares);
    }
    float scale = 1.f;
    if (s.has_output_norm) {
      reduce(squares, 1);
      scale = rsqrtf(squares[0].squares * inv_hidden + s.output_norm_eps);
    }
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

using NativeKernel = void (*)(const AttnResArgs, int);

// Tuning experiment (removed once a variant wins): ATTNRES_NATIVE_VARIANT = g<group><t|w>.
template <int MaxThreads>
NativeKernel pick_variant() {
  const char* v = std::getenv("ATTNRES_NATIVE_VARIANT");
  const std::string name = v ? v : "g4w";
  if (name == "g1t") return attnres_native_kernel<MaxThreads, 1, false>;
  if (name == "g1w") return attnres_native_kernel<MaxThreads, 1, true>;
  if (name == "g4t") return attnres_native_kernel<MaxThreads, 4, false>;
  if (name == "g2w") return attnres_native_kernel<MaxThreads, 2, true>;
  return attnres_native_kernel<MaxThreads, 4, true>;
}

NativeImageQuery query_native_image() {
  NativeImageQuery query;
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, pick_variant<512>());
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

namespace {

// Per device: SM count, ring depth, and whether the kernels' shared-memory limit was raised
// (kept so that a launch makes no attribute calls and can be captured into a CUDA graph).
struct LaunchConfig {
  int sms = 0;
  int smem_optin = 0;
  bool raised = false;
};

LaunchConfig& launch_config(int device) {
  static std::mutex mutex;
  static std::map<int, LaunchConfig> configs;
  std::lock_guard<std::mutex> lock(mutex);
  LaunchConfig& config = configs[device];
  if (!config.sms) {
    ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&config.sms, cudaDevAttrMultiProcessorCount, device));
    ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&config.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  }
  if (!config.raised) {
    const int static_bytes = 8192;  // barriers, scratch, slack
    for (NativeKernel kernel : {pick_variant<512>(), pick_variant<1024>()})
      ATTNRES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, config.smem_optin - static_bytes));
    config.raised = true;
  }
  return config;
}

}  // namespace

void launch_native(const AttnResArgs& args, bool layout_guard, cudaStream_t stream) {
  if (layout_guard) require_dense_rows(args.shape, args.strides);
  if (args.shape.tokens == 0) return;
  int device = 0;
  ATTNRES_CUDA_CHECK(cudaGetDevice(&device));
  const LaunchConfig& config = launch_config(device);
  const int row_bytes = args.shape.hidden * int(sizeof(bf16_bits));
  const int stages = std::min(kMaxStages, (config.smem_optin - 8192) / row_bytes);
  if (stages < 2) throw CudaError(fmt::format("native kernel: H={} leaves fewer than 2 ring stages", args.shape.hidden), false);
  const int ring_bytes = stages * row_bytes;
  const int threads = args.shape.hidden / kElemsPerThread + 32;
  const unsigned grid = unsigned(std::min<std::int64_t>(args.shape.tokens, config.sms));
  const NativeKernel kernel = threads <= 512 ? pick_variant<512>() : pick_variant<1024>();
  kernel<<<grid, threads, ring_bytes, stream>>>(args, stages);
  ATTNRES_CHECK_LAUNCH("attnres_native_kernel");
}

}  // namespace attnres
