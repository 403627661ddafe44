// The native kernel's small-T variant (native::Variant::split). A row is one thread-block
// cluster of `cluster` CTAs; CTA r of the cluster takes the r-th slice of H. Every load of the
// row (prefix, delta, each source block, the weights) is issued up front into registers, so a
// row costs one memory round trip, not one per source. Each warp's partial dot products and sums
// of squares go, transposed, into every cluster CTA's shared memory; one cluster barrier and
// each CTA holds every warp's partials and sums them in the same order, so all CTAs of a row
// compute bit-identical logits. The output RMSNorm's sum of squares |sum_s w_s v_s|^2 is
// sum_s,t w_s w_t <v_s, v_t>: up to kMaxPairwiseSources sources the pairwise products ride in the
// same exchange (one cluster barrier per row); with more, they would cost the registers that keep
// every load in flight, so the sum of squares takes a second exchange.
// A row of one CTA (split/1xV) is launched without a cluster: its exchanges are CTA barriers,
// cheap enough that the output norm takes the second reduction, not the pairwise products (which
// double pass 1's arithmetic). With few sources its registers leave room for two CTAs per SM.
// Rows of prefix, delta and output are taken as exactly H apart, as in the ring variant.
#include <cstdint>
#include <limits>

#include <cooperative_groups.h>
#include <fmt/format.h>

#include "kernels/common/cuda_check.h"
#include "kernels/native/native_device.cuh"
#include "kernels/native/native_limits.h"
#include "kernels/native/native_variants.h"

namespace attnres {
namespace {

namespace cg = cooperative_groups;
using native_device::pack_by_conversion;
using native_device::unpack;
using native_device::warp_transpose_sum;

constexpr int kVec = native::kElementsPerVector;

// Up to this many sources the pairwise products <v_s, v_t>, s < t, travel in the logit exchange,
// in the slots from kMaxPairwiseSources on (10 pairs, slots 5..14, below the sums of squares).
// More sources spill registers and delay the loads (all 9 sources on the H200: T=1 launches 18 %
// slower, split/Cx2 plans 4-7x).
constexpr int kMaxPairwiseSources = 5;

// Up to this many sources a one-CTA row's kernel is compiled for two CTAs per SM.
constexpr int kOneCtaRowTwoPerSmMaxSources = 2;

__host__ __device__ constexpr int pair_slot(int s, int t) {
  return kMaxPairwiseSources + s * (2 * kMaxPairwiseSources - s - 1) / 2 + (t - s - 1);
}
static_assert(pair_slot(kMaxPairwiseSources - 2, kMaxPairwiseSources - 1) < 16, "pairs stay below the sums of squares");

// Element i of eight packed bf16 values.
__device__ __forceinline__ float element_of(const uint4& raw, int i) {
  const std::uint32_t word = i < 2 ? raw.x : i < 4 ? raw.y : i < 6 ? raw.z : raw.w;
  return bits_float(i % 2 == 0 ? word << 16 : word & 0xffff0000u);
}

// Streaming loads: each source element is read once.
__device__ __forceinline__ uint4 load_once(const bf16_bits* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }

// CTAs per SM a one-CTA-row kernel is compiled for: two where its loads fit 64 registers a thread.
template <int kSources>
constexpr int one_cta_row_min_blocks() {
  return kSources <= kOneCtaRowTwoPerSmMaxSources ? 2 : 1;
}

template <int kSources, int kVecs, bool kClustered>
__global__ void __launch_bounds__(native::kSplitMaxThreads, kClustered ? 1 : one_cta_row_min_blocks<kSources>())
    attnres_split_kernel(const AttnResArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // [slots][32] logit partials (lane l: value l), then [slots] output-norm partials.
  extern __shared__ float partials[];
  int cluster_size = 1, rank = 0;
  if constexpr (kClustered) {
    cluster_size = int(cg::this_cluster().num_blocks());
    rank = int(cg::this_cluster().block_rank());
  }
  const AttnResShape& s = a.shape;
  const std::int64_t hidden = s.hidden;
  const std::int64_t t = blockIdx.x / cluster_size;
  const int slice_vectors = s.hidden / kVec / cluster_size;
  const int owners = slice_vectors / kVecs;
  const int c = threadIdx.x, lane = c % 32, warp = c / 32;
  const int warps = blockDim.x / 32;
  const int slots = cluster_size * warps;
  float* const logit_partials = partials;
  float* const norm_partials = partials + slots * 32;
  const bool owner = c < owners;
  int element[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) element[v] = (rank * slice_vectors + c + v * owners) * kVec;
  const int write_idx = s.block_write_idx;

  // Each row's base address is the same in every thread, computed once from the parameters; a
  // load adds this thread's element offset to it. Every load is unconditional: what the row does not read (the
  // written block, which is p; delta or the output norm weight when absent) is pointed at a row
  // that is read anyway, so it costs no DRAM traffic, and its value is not used.
  bf16_bits* const prefix_row = a.prefix + t * hidden;
  const bf16_bits* const delta_row = s.has_delta ? a.delta + t * hidden : prefix_row;
  const bf16_bits* const output_norm_weight = s.has_output_norm ? a.output_norm_weight : a.norm_weight;
  const bf16_bits* block_row[kSources];
#pragma unroll
  for (int src = 1; src < kSources; ++src)
    block_row[src] = src - 1 == write_idx
                         ? prefix_row
                         : a.blocks + t * a.strides.blocks_token + std::int64_t(src - 1) * a.strides.blocks_row;

  native_device::wait_for_previous_grid();
  // Every load of the row, in flight at once, issued before anything else is computed. Source 0
  // is p; source src >= 1 is block src - 1, the written block set from p below. A thread past the
  // row's vectors loads nothing and adds nothing to the row's sums.
  uint4 raw[kSources][kVecs], delta_raw[kVecs], nw_raw[kVecs], qk_raw[kVecs], ow_raw[kVecs];
  if (owner) {
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      raw[0][v] = load_once(prefix_row + element[v]);
      delta_raw[v] = load_once(delta_row + element[v]);
#pragma unroll
      for (int src = 1; src < kSources; ++src) raw[src][v] = load_once(block_row[src] + element[v]);
      nw_raw[v] = *reinterpret_cast<const uint4*>(a.norm_weight + element[v]);
      qk_raw[v] = *reinterpret_cast<const uint4*>(a.qk_weight + element[v]);
      ow_raw[v] = *reinterpret_cast<const uint4*>(output_norm_weight + element[v]);
    }
  }
  native_device::allow_dependent_launch();
  // A CTA may write a peer's shared memory only once the peer has started: arrive now, wait just
  // before the first remote write, so the wait hides behind the loads.
  if constexpr (kClustered) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  // Steps 1-2: p, written back at once.
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    // Without delta, p is prefix bit for bit (-0.0 + 0.0 would lose the sign).
    if (s.has_delta) {
      float x[kVec], d[kVec];
      unpack(raw[0][v], x);
      unpack(delta_raw[v], d);
#pragma unroll
      for (int i = 0; i < kVec; ++i) x[i] += d[i];
      raw[0][v] = pack_by_conversion(x);
    }
#pragma unroll
    for (int src = 1; src < kSources; ++src)
      if (src - 1 == write_idx) raw[src][v] = raw[0][v];
    if (owner) {
      *reinterpret_cast<uint4*>(prefix_row + element[v]) = raw[0][v];
      if (write_idx >= 0)
        *reinterpret_cast<uint4*>(a.blocks + t * a.strides.blocks_token +
                                  std::int64_t(write_idx) * a.strides.blocks_row + element[v]) = raw[0][v];
    }
  }

  // Step 4: this thread's partial dot products (slots 0..8), sums of squares (kSquares..) and, with
  // an output norm and few sources in a cluster, pairwise products (pair_slot). Without pairs and
  // with at most 8 sources the values fit 16 slots, which take half the shuffles to reduce.
  float gate[kVecs * kVec];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    float nw[kVec], qk[kVec];
    unpack(nw_raw[v], nw);
    unpack(qk_raw[v], qk);
#pragma unroll
    for (int i = 0; i < kVec; ++i) gate[v * kVec + i] = nw[i] * qk[i];
  }
  constexpr bool kPairwiseNorm = kClustered && kSources <= kMaxPairwiseSources;
  const bool pairwise_norm = kPairwiseNorm && s.has_output_norm;
  constexpr int kValues = !kPairwiseNorm && 2 * kSources <= 16 ? 16 : 32;
  constexpr int kSquares = kValues / 2;
  float sums[kValues];
#pragma unroll
  for (int k = 0; k < kValues; ++k) sums[k] = 0.f;
  if (owner)
#pragma unroll
    for (int v = 0; v < kVecs; ++v)
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        float x[kSources];
#pragma unroll
        for (int src = 0; src < kSources; ++src) {
          x[src] = element_of(raw[src][v], i);
          sums[src] = fmaf(x[src], gate[v * kVec + i], sums[src]);
          sums[kSquares + src] = fmaf(x[src], x[src], sums[kSquares + src]);
        }
        // Not compiled without pairs: with 16 values some pair slots would fall past the array.
        if constexpr (kPairwiseNorm)
          if (pairwise_norm)
#pragma unroll
            for (int src = 0; src < kSources; ++src)
#pragma unroll
              for (int other = src + 1; other < kSources; ++other)
                sums[pair_slot(src, other)] = fmaf(x[src], x[other], sums[pair_slot(src, other)]);
      }
  const float warp_total = warp_transpose_sum(sums);  // lane l: this warp's total of value l % kValues
  const int my_slot = rank * warps + warp;
  if constexpr (kClustered) {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    const cg::cluster_group cluster = cg::this_cluster();
    for (int r = 0; r < cluster_size; ++r) cluster.map_shared_rank(logit_partials, r)[my_slot * 32 + lane] = warp_total;
    cluster.sync();
  } else {
    logit_partials[my_slot * 32 + lane] = warp_total;
    __syncthreads();
  }
  float total = 0.f;
  for (int slot = 0; slot < slots; ++slot) total += logit_partials[slot * 32 + lane];

  const float inv_hidden = 1.0f / float(s.hidden);
  float weight[kSources];
  native_device::softmax_weights<kSources, kSquares>(total, 0, inv_hidden, s.eps, weight);
  float acc[kVecs * kVec];
#pragma unroll
  for (int i = 0; i < kVecs * kVec; ++i) acc[i] = 0.f;
#pragma unroll
  for (int src = 0; src < kSources; ++src) {
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      float x[kVec];
      unpack(raw[src][v], x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[v * kVec + i] = fmaf(weight[src], x[i], acc[v * kVec + i]);
    }
  }

  // Step 5: the output RMSNorm over the whole row.
  float scale = 1.f;
  if (pairwise_norm) {
    // sum_s w_s^2 <v_s, v_s> + 2 sum_s<t w_s w_t <v_s, v_t>: each lane adds the terms of the value
    // it holds; the xor butterfly leaves the same sum in every lane of every CTA of the row.
    float squares = 0.f;
#pragma unroll
    for (int src = 0; src < kSources; ++src) {
      if (lane == kSquares + src) squares = weight[src] * weight[src] * total;
#pragma unroll
      for (int other = src + 1; other < kSources; ++other)
        if (lane == pair_slot(src, other)) squares = 2.f * weight[src] * weight[other] * total;
    }
#pragma unroll
    for (int width = 16; width > 0; width /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, width);
    // Rounding can take an exactly cancelling mix a hair below zero.
    scale = rsqrtf(fmaxf(squares, 0.f) * inv_hidden + s.output_norm_eps);
  } else if (s.has_output_norm) {  // a second exchange across the row's CTAs
    float squares = 0.f;
    if (owner)
#pragma unroll
      for (int i = 0; i < kVecs * kVec; ++i) squares = fmaf(acc[i], acc[i], squares);
#pragma unroll
    for (int width = 16; width > 0; width /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, width);
    if constexpr (kClustered) {
      const cg::cluster_group cluster = cg::this_cluster();
      if (lane < cluster_size) cluster.map_shared_rank(norm_partials, lane)[my_slot] = squares;
      cluster.sync();
    } else {
      if (lane == 0) norm_partials[my_slot] = squares;
      __syncthreads();
    }
    float row_squares = lane < slots ? norm_partials[lane] : 0.f;
#pragma unroll
    for (int width = 16; width > 0; width /= 2) row_squares += __shfl_xor_sync(0xffffffffu, row_squares, width);
    scale = rsqrtf(row_squares * inv_hidden + s.output_norm_eps);
  }
  if (!owner) return;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    float out[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = acc[v * kVec + i];
    if (s.has_output_norm) {
      float ow[kVec];
      unpack(ow_raw[v], ow);
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] = out[i] * scale * ow[i];
    }
    *reinterpret_cast<uint4*>(a.output + t * hidden + element[v]) = pack_by_conversion(out);
  }
#endif
}

using SplitKernel = void (*)(AttnResArgs);
using native::kMaxSources;

template <int kVecs, bool kClustered>
constexpr SplitKernel kSplitKernels[kMaxSources] = {
    attnres_split_kernel<1, kVecs, kClustered>, attnres_split_kernel<2, kVecs, kClustered>,
    attnres_split_kernel<3, kVecs, kClustered>, attnres_split_kernel<4, kVecs, kClustered>,
    attnres_split_kernel<5, kVecs, kClustered>, attnres_split_kernel<6, kVecs, kClustered>,
    attnres_split_kernel<7, kVecs, kClustered>, attnres_split_kernel<8, kVecs, kClustered>,
    attnres_split_kernel<9, kVecs, kClustered>};

SplitKernel split_kernel(const native::Plan& plan, int num_blocks) {
  const bool clustered = plan.cluster > 1;
  if (plan.vectors_per_thread == 1)
    return clustered ? kSplitKernels<1, true>[num_blocks] : kSplitKernels<1, false>[num_blocks];
  return clustered ? kSplitKernels<2, true>[num_blocks] : kSplitKernels<2, false>[num_blocks];
}

}  // namespace

void launch_native_split(const AttnResArgs& args, const native::Plan& plan, bool programmatic_dependent_launch,
                         cudaStream_t stream) {
  const int hidden = args.shape.hidden;
  if (args.shape.tokens > std::numeric_limits<int>::max() / plan.cluster)
    throw std::invalid_argument(
        fmt::format("native kernel ({}): {} tokens exceed the grid", native::to_string(plan), args.shape.tokens));
  const int slots = native::split_slots(plan, hidden);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(args.shape.tokens * plan.cluster));
  config.blockDim = dim3(unsigned(native::split_threads(plan, hidden)));
  config.dynamicSmemBytes =
      std::size_t(slots) * (32 + 1) * sizeof(float);  // logit partials, then one norm partial, per slot
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = unsigned(plan.cluster);
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  attributes[1] = programmatic_serialization();
  // A one-CTA row is launched without a cluster (its kernel uses none).
  const int first_attribute = plan.cluster > 1 ? 0 : 1;
  config.attrs = attributes + first_attribute;
  config.numAttrs = (programmatic_dependent_launch ? 2 : 1) - first_attribute;
  const SplitKernel kernel = split_kernel(plan, args.shape.num_blocks);
  ATTNRES_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
  ATTNRES_CHECK_LAUNCH("attnres_split_kernel");
}

}  // namespace attnres
