// Device helpers shared by the native kernel's variants (kernels/native/native_sm90.cu,
// kernels/native/native_split_sm90.cu).
#pragma once
#include <cstdint>

#include "kernels/common/bf16.h"

namespace attnres::native_device {

__device__ __forceinline__ void unpack(const uint4 raw, float* out) {
  const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = bits_float(words[i] << 16);
    out[2 * i + 1] = bits_float(words[i] & 0xffff0000u);
  }
}

// Eight floats to bf16 by the integer rounding of float_to_bf16 (about seven integer
// instructions per element).
__device__ __forceinline__ uint4 pack(const float* in) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = std::uint32_t(float_to_bf16(in[2 * i])) | (std::uint32_t(float_to_bf16(in[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Two floats to bf16 in one conversion instruction, rounded to nearest even: the same bits as
// float_to_bf16 for every non-NaN input (Gpu.HardwareBf16PackMatchesTheSoftwareRounding checks
// all 2^32), a NaN for a NaN. Faster in the split variant; in the ring it measured slower at one
// block (docs/design/native-kernel.md), so each variant uses the one that measured faster there.
__device__ __forceinline__ std::uint32_t convert_pair(float low, float high) {
  std::uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(high), "f"(low));
  return packed;
}

__device__ __forceinline__ uint4 pack_by_conversion(const float* in) {
  return make_uint4(convert_pair(in[0], in[1]), convert_pair(in[2], in[3]), convert_pair(in[4], in[5]),
                    convert_pair(in[6], in[7]));
}

// Eight bf16 ones: the output norm weight where there is none.
__device__ __forceinline__ uint4 bf16_ones() { return make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u); }

// One halving step of a transposed warp sum: lanes with bit Width set keep the upper half.
template <int Width, int N>
__device__ __forceinline__ void transpose_step(float (&v)[N], int lane) {
  static_assert(2 * Width <= N, "a step halves the values still held");
  const bool upper = (lane & Width) != 0;
#pragma unroll
  for (int i = 0; i < Width; ++i) {
    const float send = upper ? v[i] : v[i + Width];
    const float keep = upper ? v[i + Width] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, Width);
  }
}

// Sum over the warp of N (32 or 16) values per lane, transposed: lane l returns the warp's total
// of v[l % N]. 31 shuffles for 32 values, 16 for 16 (each half-warp transposes, one xor adds the
// halves), against 5 per value done one at a time.
template <int N>
__device__ __forceinline__ float warp_transpose_sum(float (&v)[N]) {
  static_assert(N == 16 || N == 32, "a transposed sum over the warp or over each half of it");
  const int lane = threadIdx.x % 32;
  if constexpr (N == 32) transpose_step<16>(v, lane);
  transpose_step<8>(v, lane);
  transpose_step<4>(v, lane);
  transpose_step<2>(v, lane);
  transpose_step<1>(v, lane);
  if constexpr (N == 16)
    return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 16);
  else
    return v[0];
}

// Step 4's softmax from a row's reduced totals (lane l holds value l: source s's dot product with
// norm_weight * qk_weight in l = base + s, its sum of squares in l = kSquares + base + s): logit_s =
// dot_s * rsqrt(mean(v_s^2) + eps), computed once, in lane s. Then, measured on the H200 and the
// H100 (docs/design/native-kernel.md):
//  - up to 5 sources every lane takes all logits by shuffle and finishes alone: a max and a sum
//    over a few registers, one exp per source and one reciprocal. Its chain is short and it takes
//    kSources + 2 special-function instructions a lane, where a running max and sum in every lane
//    (one rsqrt and two exps per source) took three per source;
//  - from kLaneSoftmaxMinSources on, lane s keeps source s: one exp and one reciprocal a lane, xor
//    butterflies for the max and the sum, the weights broadcast back.
// Either way every lane of every warp and CTA of a row ends with the same bits (each does the same
// operations on the same values; a butterfly's pairwise max and sum are the same in every lane).
constexpr int kLaneSoftmaxMinSources = 6;

template <int kSources, int kSquares = 16>
__device__ __forceinline__ void softmax_weights(float total, int base, float inv_hidden, float eps,
                                                float (&weight)[kSources]) {
  static_assert(kSources <= kSquares, "the dot products come before the sums of squares");
  const int lane = threadIdx.x % 32;
  const float dot = __shfl_sync(0xffffffffu, total, (base + lane) % 32);
  const float squares = __shfl_sync(0xffffffffu, total, (kSquares + base + lane) % 32);
  const bool is_source = lane < kSources;
  const float own_logit = is_source ? dot * rsqrtf(squares * inv_hidden + eps) : -INFINITY;
  if constexpr (kSources >= kLaneSoftmaxMinSources) {
    float max_logit = own_logit;
#pragma unroll
    for (int width = 16; width > 0; width /= 2)
      max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, width));
    // fmaxf skips a NaN logit, but its exp, hence the sum and every weight, is NaN.
    const float unnormalised = is_source ? __expf(own_logit - max_logit) : 0.f;
    float sum = unnormalised;
#pragma unroll
    for (int width = 16; width > 0; width /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, width);
    const float own_weight = unnormalised * (1.0f / sum);
#pragma unroll
    for (int src = 0; src < kSources; ++src) weight[src] = __shfl_sync(0xffffffffu, own_weight, src);
  } else {
    float logit[kSources];
#pragma unroll
    for (int src = 0; src < kSources; ++src) logit[src] = __shfl_sync(0xffffffffu, own_logit, src);
    float max_logit = logit[0];
#pragma unroll
    for (int src = 1; src < kSources; ++src) max_logit = fmaxf(max_logit, logit[src]);
    float sum = 0.f;
#pragma unroll
    for (int src = 0; src < kSources; ++src) {
      weight[src] = __expf(logit[src] - max_logit);  // a NaN logit makes every weight NaN, as above
      sum += weight[src];
    }
    const float inv_sum = 1.0f / sum;
#pragma unroll
    for (int src = 0; src < kSources; ++src) weight[src] *= inv_sum;
  }
}

// Programmatic dependent launch. wait: nothing the previous kernel in the stream wrote is read
// before it (a no-op when the launch did not ask for PDL). launch_dependents: the next kernel
// may start its prologue; its own wait still holds until this grid has finished.
__device__ __forceinline__ void wait_for_previous_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;"); }

}  // namespace attnres::native_device
