// Native AttnRes kernel for Hopper (sm_90a) and Blackwell (sm_100a): launch_native and the
// ring variant, the large-T one (the small-T split variant is in native_split_sm90.cu, and
// native::choose_plan picks between them).
// Rows of prefix, delta and output are taken as exactly H apart (as in the Kimi K3 op), so
// launch_native runs the shared layout guard first. Design (docs/design/native-kernel.md has the
// designs tried and their numbers):
//  - persistent grid, at most one CTA per SM, each CTA walks rows t = blockIdx.x, += gridDim.x;
//  - one producer warp streams every source row (prefix, delta, blocks) into a ring of
//    shared-memory stages completing on mbarriers, running ahead across row boundaries: by one
//    bulk copy (cp.async.bulk) per row (plan ring) or by 16-byte cp.async copies of all 32 lanes
//    (plan ring/cp.async: 1-11 % faster at H=7168 with 1-8 blocks);
//  - H/16 consumer threads each own two 16-byte vectors of the row. Pass 1 takes every source's
//    (dot with norm_weight*qk_weight, sum of squares), one transposed reduction and one named
//    barrier give all logits at once, native_device::softmax_weights the weights, pass 2 mixes.
//    The first kMaxHeldSources blocks of a row are copied to registers in pass 1 and their stages
//    handed back at once; the rest stay resident until pass 2 has read them;
//  - the source count is a template parameter: the per-source loops are straight-line
//    code, so the compiler overlaps one source's shared-memory reads with the previous
//    source's arithmetic;
//  - the output RMSNorm's sum of squares rides on the next row's reduction: the mix
//    waits in shared memory for one row, so each row costs one barrier, not two;
//  - prefix write-back and the block write are fused;
//  - with at most 3 blocks, more rows than SMs and stages to spare, two rows share each
//    reduction (native::ring_layout): half the barriers and softmax set-up per row,
//    twice the independent work between them.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "kernels/common/bf16.h"
#include "kernels/common/cuda_check.h"
#include "kernels/native/launch_native.h"
#include "kernels/native/native_device.cuh"
#include "kernels/native/native_limits.h"
#include "kernels/native/native_support.h"
#include "kernels/native/native_variants.h"
#include "kernels/registry/layout_guard.h"

namespace attnres {
namespace {

using native_device::pack;
using native_device::unpack;
using native_device::warp_transpose_sum;

constexpr int kMaxStages = 16;
// Blocks of a one-row iteration whose slices a consumer thread holds in registers from pass 1 to
// pass 2, so their stages go back to the producer a whole reduction earlier (3-8 % faster from 4
// blocks on at H=7168). The most that fit beside the rest of the 9-source kernel in 128
// registers (512 threads); six spilled. Paired rows hold none (one block held cost 1 %).
constexpr int kMaxHeldSources = 5;
constexpr int kVec = native::kElementsPerVector;
constexpr int kVecsPerThread = native::kVectorsPerThread;
constexpr int kElemsPerThread = kVec * kVecsPerThread;
constexpr int kConsumerBarrier = 1;  // named barrier id; 0 is __syncthreads
constexpr int kNativeMaxThreads = native::kMaxHidden / kElemsPerThread + 32;

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

// Every source row is read exactly once: evict-first keeps it from crowding L2.
__device__ __forceinline__ std::uint64_t evict_first_policy() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar,
                                          std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

// One 16-byte copy on the load/store path (cp.async), bypassing L1. No L2 hint: with one, ptxas
// 13.0 emitted copies that faulted (docs/design/native-kernel.md).
__device__ __forceinline__ void copy_vector(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

// The barrier counts one arrival of this thread once all its earlier cp.async copies have landed.
__device__ __forceinline__ void arrive_when_copies_land(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void consumer_sync(int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(kConsumerBarrier), "r"(threads) : "memory");
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

using native::kMaxSources;
constexpr int kMaxConsumerWarps = 16;
// Slots of the 32-value reduction: row r of an iteration puts its dot products in kRowSlots * r + s,
// its sums of squares 16 further, and the norm of the row it stashed the iteration before in
// 15 + 16r. One row may have up to 9 sources (0..8, 16..24); two rows up to kRowSlots - 1.
constexpr int kRowSlots = 8;
// Two rows share a reduction only with few sources, and only where both rows' loads leave the
// producer stages to run ahead into: otherwise one row holding its blocks in registers frees its
// stages sooner and wins (3-18 % at 4-6 blocks and at 3 blocks on H=7168, where
// two rows left one stage free; two rows still won 2-11 % with 1-3 blocks and 3 or more free).
constexpr int kMaxPairedSources = 4;
constexpr int kMinFreeStagesWhenPaired = 3;
static_assert(kMaxPairedSources <= kRowSlots - 1, "two rows' sources fit the reduction's slots");

// The per-thread stash of one row's mix: H floats, a multiple of 128 bytes.
__host__ __device__ constexpr std::size_t native_stash_bytes(int hidden) {
  return (std::size_t(hidden) * sizeof(float) + 127) / 128 * 128;
}

// CTA-wide totals of 32 values (unused ones zero) over the consumer threads: one transpose per
// warp, one named barrier, then lane l of every warp adds up value l over the warps. Callers
// alternate two scratch buffers, so the next reduction may write while stragglers still read.
__device__ __forceinline__ float cta_sum(float (&v)[32], float (*scratch)[32], int warps, int threads) {
  const int lane = threadIdx.x % 32;
  scratch[threadIdx.x / 32][lane] = warp_transpose_sum(v);
  consumer_sync(threads);
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kMaxConsumerWarps; ++w)
    if (w < warps) total += scratch[w][lane];
  return total;  // lane l: the total of value l
}

// kRows rows per iteration (1 or 2) share one CTA-wide reduction; their stages are resident
// together. With vector_copies the producer warp fills a stage by 16-byte cp.async copies of all
// 32 lanes (plan ring/cp.async), else one lane by one bulk copy (plan ring).
template <int kSources, int kRows>
__global__ void __launch_bounds__(kNativeMaxThreads, 1)
    attnres_native_kernel(const AttnResArgs a, int stages, bool vector_copies) {
  static_assert(kRows == 1 || (kRows == 2 && kSources <= kMaxPairedSources), "two rows fit one reduction");
  // Sources 1..kHeld (blocks 0..kHeld-1) are held in registers; see kMaxHeldSources.
  constexpr int kHeld = kRows == 2 ? 0 : kSources - 1 < kMaxHeldSources ? kSources - 1 : kMaxHeldSources;
  constexpr auto is_held = [](int src) { return src >= 1 && src <= kHeld; };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Dynamic shared memory: each consumer thread's unnormalised mix of the previous iteration's
  // rows (float, laid out so a warp's 16-byte accesses are contiguous), then the ring of stages x H bf16.
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ std::uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ float scratch[2][kMaxConsumerWarps][32];

  const AttnResShape& s = a.shape;
  const int hidden = s.hidden;
  const int consumer_threads = hidden / kElemsPerThread;
  const int consumer_warps = consumer_threads / 32;
  const std::uint32_t row_bytes = std::uint32_t(hidden) * sizeof(bf16_bits);
  float4* const mix_stash = reinterpret_cast<float4*>(smem);  // [kRows][kElemsPerThread / 4][C]
  unsigned char* const ring = smem + kRows * native_stash_bytes(hidden);
  const bool write_block = s.block_write_idx >= 0;
  const bool written_block_is_source = write_block && s.block_write_idx < s.num_blocks;
  RowPlan plan;
  plan.first_block_load = s.has_delta ? 2 : 1;
  plan.loads = plan.first_block_load + s.num_blocks - (written_block_is_source ? 1 : 0);

  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(&full[i], vector_copies ? 32 : 1);
      mbar_init(&empty[i], consumer_threads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  native_device::wait_for_previous_grid();
  native_device::allow_dependent_launch();

  if (threadIdx.x >= consumer_threads) {  // producer warp
    const int lane = threadIdx.x - consumer_threads;
    if (!vector_copies && lane != 0) return;
    const int vectors = int(row_bytes / sizeof(uint4));
    int stage = 0;
    std::uint32_t phase = 0;
    const std::uint64_t policy = evict_first_policy();
    for (std::int64_t t = blockIdx.x; t < s.tokens; t += gridDim.x) {
      for (int j = 0; j < plan.loads; ++j) {
        mbar_wait(&empty[stage], phase ^ 1u);  // a fresh barrier counts as released
        unsigned char* const target = ring + std::size_t(stage) * row_bytes;
        if (vector_copies) {
          const uint4* const source = reinterpret_cast<const uint4*>(load_source(a, t, j, plan));
          for (int v = lane; v < vectors; v += 32) copy_vector(reinterpret_cast<uint4*>(target) + v, source + v);
          arrive_when_copies_land(&full[stage]);
        } else {
          // The consumers' reads of this stage are generic-proxy accesses, ordered before this
          // thread by the empty barrier; the bulk copy writes through the async proxy, which only
          // this fence orders after them. Without it the copy overwrote stages still being read.
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          mbar_arrive_expect_tx(&full[stage], row_bytes);
          bulk_load(target, load_source(a, t, j, plan), row_bytes, &full[stage], policy);
        }
        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    if (vector_copies) asm volatile("cp.async.wait_all;" ::: "memory");
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
                                      : native_device::bf16_ones();
  }
  const float inv_hidden = 1.0f / float(hidden);
  int stage = 0;
  std::uint32_t phase = 0;
  int buffer = 0;
  auto advance = [&](int& st, std::uint32_t& ph) {
    if (++st == stages) {
      st = 0;
      ph ^= 1u;
    }
  };
  auto slice = [&](int st, int v) {
    return *reinterpret_cast<const uint4*>(ring + std::size_t(st) * row_bytes + element[v] * sizeof(bf16_bits));
  };
  // This thread's v-th vector of a source that is not held: p itself (no stage) or its stage.
  auto resident_vector = [&](const int(&row_stages)[kSources], const uint4(&row_p)[kVecsPerThread], int src, int v) {
    return row_stages[src] < 0 ? row_p[v] : slice(row_stages[src], v);
  };
  // Hands a stage back: every consumer thread arrives, since an arrive releases only the arriving
  // thread's own reads (one lane's arrive after __syncwarp left racecheck reporting the next copy
  // into the stage against the other lanes' reads).
  auto release = [&](int st) { mbar_arrive(&empty[st]); };
  auto store_output = [&](std::int64_t row, const float(&mixed)[kElemsPerThread], float scale) {
#pragma unroll
    for (int v = 0; v < kVecsPerThread; ++v) {
      float ow[kVec], out[kVec];
      unpack(out_weight[v], ow);
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] = mixed[v * kVec + i] * scale * ow[i];
      *reinterpret_cast<uint4*>(a.output + row * hidden + element[v]) = pack(out);
    }
  };
  // The r-th stashed row, given the CTA-wide sum of its squares.
  auto write_output = [&](int r, std::int64_t row, float squares) {
    float mixed[kElemsPerThread];
#pragma unroll
    for (int q = 0; q < kElemsPerThread / 4; ++q) {
      const float4 m = mix_stash[(r * kElemsPerThread / 4 + q) * consumer_threads + c];
      mixed[4 * q] = m.x;
      mixed[4 * q + 1] = m.y;
      mixed[4 * q + 2] = m.z;
      mixed[4 * q + 3] = m.w;
    }
    store_output(row, mixed, rsqrtf(squares * inv_hidden + s.output_norm_eps));
  };
  auto norm_slot = [](int r) { return 15 + 16 * r; };
  std::int64_t pending_row[kRows];  // the rows whose mixes are stashed, waiting for their norms
  float pending_squares[kRows];     // this thread's part of those rows' sums of squares
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    pending_row[r] = -1;
    pending_squares[r] = 0.f;
  }
  // The stashed rows' sums of squares ride on a reduction; from its totals their outputs follow.
  auto carry_pending_norms = [&](float(&sums)[32]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) sums[norm_slot(r)] = pending_squares[r];
  };
  auto write_pending_rows = [&](float total) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (pending_row[r] >= 0) write_output(r, pending_row[r], __shfl_sync(0xffffffffu, total, norm_slot(r)));
  };
  for (std::int64_t first = blockIdx.x; first < s.tokens; first += std::int64_t(kRows) * gridDim.x) {
    // The rows of this iteration, in the producer's order; past the last token a row is absent.
    std::int64_t row[kRows];
    bool present[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row[r] = first + std::int64_t(r) * gridDim.x;
      present[r] = row[r] < s.tokens;
    }
    uint4 p_packed[kRows][kVecsPerThread];
    // Source src: 0 is p, src >= 1 is block src - 1 (p itself where it is the written block).
    int source_stage[kRows][kSources];
    uint4 held[kRows][kHeld + 1][kVecsPerThread];  // [r][src] where is_held(src)
    float sums[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) sums[k] = 0.f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (!present[r]) continue;
      const std::int64_t t = row[r];
      // Step 1-2: p from the prefix and delta stages, written back at once.
      mbar_wait(&full[stage], phase);
      const int prefix_stage = stage;
      advance(stage, phase);
      int delta_stage = -1;
      if (s.has_delta) {
        mbar_wait(&full[stage], phase);
        delta_stage = stage;
        advance(stage, phase);
      }
#pragma unroll
      for (int v = 0; v < kVecsPerThread; ++v) {
        p_packed[r][v] = slice(prefix_stage, v);
        if (delta_stage < 0) continue;  // p is prefix, bit for bit (a NaN's payload included)
        float x[kVec], d[kVec];
        unpack(p_packed[r][v], x);
        unpack(slice(delta_stage, v), d);
#pragma unroll
        for (int i = 0; i < kVec; ++i) x[i] += d[i];
        p_packed[r][v] = pack(x);
      }
      release(prefix_stage);
      if (delta_stage >= 0) release(delta_stage);
#pragma unroll
      for (int v = 0; v < kVecsPerThread; ++v) {
        *reinterpret_cast<uint4*>(a.prefix + t * hidden + element[v]) = p_packed[r][v];
        if (write_block)
          *reinterpret_cast<uint4*>(a.blocks + t * a.strides.blocks_token +
                                    std::int64_t(s.block_write_idx) * a.strides.blocks_row + element[v]) =
              p_packed[r][v];
      }
      // Pass 1 over the row's stages: partial dot products and sums of squares.
#pragma unroll
      for (int src = 0; src < kSources; ++src) {
        source_stage[r][src] = -1;
        if (src > 0 && src - 1 != s.block_write_idx) {
          mbar_wait(&full[stage], phase);
          source_stage[r][src] = stage;
          advance(stage, phase);
        }
        if (is_held(src)) {
#pragma unroll
          for (int v = 0; v < kVecsPerThread; ++v)
            held[r][src][v] = resident_vector(source_stage[r], p_packed[r], src, v);
          if (source_stage[r][src] >= 0) release(source_stage[r][src]);
        }
#pragma unroll
        for (int v = 0; v < kVecsPerThread; ++v) {
          float x[kVec];
          unpack(is_held(src) ? held[r][src][v] : resident_vector(source_stage[r], p_packed[r], src, v), x);
#pragma unroll
          for (int i = 0; i < kVec; ++i) {
            sums[kRowSlots * r + src] = fmaf(x[i], gate[v * kVec + i], sums[kRowSlots * r + src]);
            sums[16 + kRowSlots * r + src] = fmaf(x[i], x[i], sums[16 + kRowSlots * r + src]);
          }
        }
      }
    }
    // Step 4: one reduction for every source's logit of every row and the stashed rows' norms.
    carry_pending_norms(sums);
    const float total = cta_sum(sums, scratch[buffer], consumer_warps, consumer_threads);
    buffer ^= 1;
    write_pending_rows(total);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      pending_row[r] = -1;
      pending_squares[r] = 0.f;
      if (!present[r]) continue;
      float weight[kSources];
      native_device::softmax_weights(total, kRowSlots * r, inv_hidden, s.eps, weight);
      // Pass 2: the mix, each stage still resident released once read.
      float acc[kElemsPerThread];
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) acc[i] = 0.f;
#pragma unroll
      for (int src = 0; src < kSources; ++src) {
#pragma unroll
        for (int v = 0; v < kVecsPerThread; ++v) {
          float x[kVec];
          unpack(is_held(src) ? held[r][src][v] : resident_vector(source_stage[r], p_packed[r], src, v), x);
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[v * kVec + i] = fmaf(weight[src], x[i], acc[v * kVec + i]);
        }
        if (!is_held(src) && source_stage[r][src] >= 0) release(source_stage[r][src]);
      }
      // Step 5: the output RMSNorm. Its sum of squares rides on the next iteration's reduction,
      // so the row's mix waits in shared memory; the CTA's last rows take a reduction of their own.
      if (!s.has_output_norm) {
        store_output(row[r], acc, 1.f);
        continue;
      }
      float squares = 0.f;
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) squares = fmaf(acc[i], acc[i], squares);
      pending_squares[r] = squares;
#pragma unroll
      for (int q = 0; q < kElemsPerThread / 4; ++q)
        mix_stash[(r * kElemsPerThread / 4 + q) * consumer_threads + c] =
            make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
      pending_row[r] = row[r];
    }
  }
  if (pending_row[0] >= 0) {  // once per CTA: the same reduction, carrying the norm slots alone
    float sums[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) sums[k] = 0.f;
    carry_pending_norms(sums);
    write_pending_rows(cta_sum(sums, scratch[buffer], consumer_warps, consumer_threads));
  }
#endif
}

}  // namespace

NativeImageQuery query_native_image() {
  NativeImageQuery query;
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, attnres_native_kernel<kMaxSources, 1>);
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

// Kept out of the dynamic shared memory for the kernel's static part (barriers, scratch) and slack.
constexpr int kStaticSharedBytes = 8192;

using NativeKernel = void (*)(AttnResArgs, int, bool);
// kNativeKernels[num_blocks]: the instantiation for num_blocks + 1 sources, one row per iteration.
constexpr NativeKernel kNativeKernels[kMaxSources] = {
    attnres_native_kernel<1, 1>, attnres_native_kernel<2, 1>, attnres_native_kernel<3, 1>,
    attnres_native_kernel<4, 1>, attnres_native_kernel<5, 1>, attnres_native_kernel<6, 1>,
    attnres_native_kernel<7, 1>, attnres_native_kernel<8, 1>, attnres_native_kernel<9, 1>};
// Two rows per iteration, as far as native::ring_layout ever picks it (sources <= kMaxPairedSources).
constexpr NativeKernel kPairedNativeKernels[kMaxPairedSources] = {
    attnres_native_kernel<1, 2>, attnres_native_kernel<2, 2>, attnres_native_kernel<3, 2>, attnres_native_kernel<4, 2>};

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
    const auto raise = [&](NativeKernel kernel) {
      ATTNRES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              config.smem_optin - kStaticSharedBytes));
    };
    for (const NativeKernel kernel : kNativeKernels) raise(kernel);
    for (const NativeKernel kernel : kPairedNativeKernels) raise(kernel);
    config.raised = true;
  }
  return config;
}

}  // namespace

namespace native {

std::optional<RingLayout> ring_layout(std::int64_t tokens, int num_blocks, bool has_delta, int hidden, int sms,
                                      int shared_optin_bytes) {
  const int shared_bytes = shared_optin_bytes - kStaticSharedBytes;
  const int row_bytes = hidden * int(sizeof(bf16_bits));
  const int stash_bytes = int(native_stash_bytes(hidden));
  // All of an iteration's loads must fit at once: paired rows, and the blocks a row does not hold
  // in registers, keep their stages through both passes.
  const int loads = 1 + int(has_delta) + num_blocks;
  const auto stages = [&](int rows) { return std::min(kMaxStages, (shared_bytes - rows * stash_bytes) / row_bytes); };
  if (tokens > sms && num_blocks + 1 <= kMaxPairedSources && stages(2) >= 2 * loads + kMinFreeStagesWhenPaired)
    return RingLayout{2, stages(2)};
  if (stages(1) < loads) return std::nullopt;
  return RingLayout{1, stages(1)};
}

}  // namespace native

void launch_native_ring(const AttnResArgs& args, const native::Plan& plan, bool programmatic_dependent_launch,
                        cudaStream_t stream) {
  int device = 0;
  ATTNRES_CUDA_CHECK(cudaGetDevice(&device));
  const LaunchConfig& config = launch_config(device);
  const AttnResShape& shape = args.shape;
  const bool vector_copies = plan.variant == native::Variant::ring_cp_async;
  const std::optional<native::RingLayout> layout =
      native::ring_layout(shape.tokens, shape.num_blocks, shape.has_delta, shape.hidden, config.sms, config.smem_optin);
  if (!layout)  // a refusal of the device, not a CUDA error: sm_90a and sm_100a parts all fit every supported shape
    throw std::invalid_argument(
        fmt::format("native kernel: {} bytes of shared memory per block hold too few ring stages for "
                    "a row of H={} with {} blocks{}",
                    config.smem_optin, shape.hidden, shape.num_blocks, shape.has_delta ? " and delta" : ""));
  cudaLaunchConfig_t launch{};
  launch.gridDim = dim3(unsigned(native::ring_grid(shape.tokens, config.sms)));
  launch.blockDim = dim3(unsigned(shape.hidden / kElemsPerThread + 32));
  const std::size_t stash_bytes = std::size_t(layout->rows_per_iteration) * native_stash_bytes(shape.hidden);
  launch.dynamicSmemBytes = stash_bytes + std::size_t(layout->stages) * shape.hidden * sizeof(bf16_bits);
  launch.stream = stream;
  cudaLaunchAttribute pdl = programmatic_serialization();
  launch.attrs = &pdl;
  launch.numAttrs = programmatic_dependent_launch ? 1 : 0;
  const NativeKernel kernel =
      layout->rows_per_iteration == 2 ? kPairedNativeKernels[shape.num_blocks] : kNativeKernels[shape.num_blocks];
  ATTNRES_CUDA_CHECK(cudaLaunchKernelEx(&launch, kernel, args, layout->stages, vector_copies));
  ATTNRES_CHECK_LAUNCH("attnres_native_kernel");
}

void launch_native(const AttnResArgs& args, const NativeLaunchOptions& options, cudaStream_t stream) {
  if (options.layout_guard) require_dense_rows(args.shape, args.strides);
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool operands_16b_aligned = aligned(args.prefix) && aligned(args.delta) && aligned(args.blocks) &&
                                    aligned(args.output) && aligned(args.norm_weight) && aligned(args.qk_weight) &&
                                    aligned(args.output_norm_weight);
  if (const std::optional<std::string> why = native_unsupported_reason(args.shape, args.strides, operands_16b_aligned))
    throw std::invalid_argument(*why);
  const native::Plan plan =
      options.plan.value_or(native::choose_plan(args.shape.tokens, args.shape.num_blocks, args.shape.hidden));
  if (const std::optional<std::string> why = native::plan_unsupported_reason(plan, args.shape.hidden))
    throw std::invalid_argument(*why);
  if (args.shape.tokens == 0) return;
  if (plan.variant == native::Variant::split)
    launch_native_split(args, plan, options.programmatic_dependent_launch, stream);
  else
    launch_native_ring(args, plan, options.programmatic_dependent_launch, stream);
}

}  // namespace attnres
