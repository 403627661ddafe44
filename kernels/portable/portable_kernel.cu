// Portable AttnRes kernel (any sm_75+ device): one block per token row, every stride honoured.
// Sources are re-read from global memory (L2) on each pass instead of held on chip, so any
// H (multiple of 8) and any num_blocks work. Rows whose strides and bases allow it are read
// 8 elements (16 bytes) at a time, others element by element.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/bf16.h"
#include "kernels/common/cuda_check.h"
#include "kernels/portable/launch_portable.h"

namespace attnres {
namespace {

constexpr int kThreads = 256;
// Up to 64 blocks plus p. Padded to a multiple of 4: the compiler reads the weights four at a
// time, and compute-sanitizer caught those reads running past an exact-size array.
constexpr int kMaxSources = 68;

struct Bf16x8 {
  float v[8];
};

template <int VEC>
__device__ __forceinline__ Bf16x8 load_vec(const bf16_bits* p) {
  Bf16x8 out;
  if constexpr (VEC == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out.v[2 * i] = bits_float(words[i] << 16);
      out.v[2 * i + 1] = bits_float(words[i] & 0xffff0000u);
    }
  } else {
    out.v[0] = bf16_to_float(*p);
  }
  return out;
}

template <int VEC>
__device__ __forceinline__ void store_vec(bf16_bits* p, const Bf16x8& x) {
  if constexpr (VEC == 8) {
    std::uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      words[i] = std::uint32_t(float_to_bf16(x.v[2 * i])) | (std::uint32_t(float_to_bf16(x.v[2 * i + 1])) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
  } else {
    *p = float_to_bf16(x.v[0]);
  }
}

// Sum over the block; every thread gets the result. `scratch` holds kThreads/32 float2.
__device__ float2 block_sum(float2 value, float2* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value.x += __shfl_xor_sync(0xffffffffu, value.x, offset);
    value.y += __shfl_xor_sync(0xffffffffu, value.y, offset);
  }
  __syncthreads();  // the previous reduction's readers are done with scratch
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  float2 total = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) {
    total.x += scratch[w].x;
    total.y += scratch[w].y;
  }
  return total;
}

template <int VEC>
__global__ void __launch_bounds__(kThreads) attnres_portable_kernel(AttnResArgs a) {
  __shared__ float weights[kMaxSources];
  __shared__ float2 scratch[kThreads / 32];
  const AttnResShape& s = a.shape;
  const std::int64_t t = blockIdx.x;
  const int hidden = s.hidden;
  const int sources = s.num_blocks + 1;
  bf16_bits* prefix = a.prefix + t * a.strides.prefix;
  bf16_bits* blocks = a.blocks + t * a.strides.blocks_token;
  auto source_row = [&](int src) -> const bf16_bits* {
    return src == s.num_blocks ? prefix : blocks + std::int64_t(src) * a.strides.blocks_row;
  };

  // Steps 1-2: p = bf16(prefix + delta) into prefix and the written block.
  for (int h = threadIdx.x * VEC; h < hidden; h += kThreads * VEC) {
    Bf16x8 p = load_vec<VEC>(prefix + h);
    if (s.has_delta) {
      const Bf16x8 d = load_vec<VEC>(a.delta + t * a.strides.delta + h);
#pragma unroll
      for (int i = 0; i < VEC; ++i) p.v[i] = bf16_to_float(float_to_bf16(p.v[i] + d.v[i]));
    }
    store_vec<VEC>(prefix + h, p);
    if (s.block_write_idx >= 0) store_vec<VEC>(blocks + std::int64_t(s.block_write_idx) * a.strides.blocks_row + h, p);
  }
  __syncthreads();  // p in global memory is visible to the whole block from here on

  // Step 4: one logit per source.
  for (int src = 0; src < sources; ++src) {
    const bf16_bits* row = source_row(src);
    float2 partial = make_float2(0.f, 0.f);
    for (int h = threadIdx.x * VEC; h < hidden; h += kThreads * VEC) {
      const Bf16x8 v = load_vec<VEC>(row + h);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float gate = bf16_to_float(a.norm_weight[h + i]) * bf16_to_float(a.qk_weight[h + i]);
        partial.x = fmaf(v.v[i], gate, partial.x);
        partial.y = fmaf(v.v[i], v.v[i], partial.y);
      }
    }
    const float2 total = block_sum(partial, scratch);
    if (threadIdx.x == 0) weights[src] = total.x * rsqrtf(total.y / float(hidden) + s.eps);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float max_logit = -INFINITY, sum = 0.f;
    for (int src = 0; src < sources; ++src) max_logit = fmaxf(max_logit, weights[src]);
    for (int src = 0; src < sources; ++src) sum += (weights[src] = __expf(weights[src] - max_logit));
    for (int src = 0; src < sources; ++src) weights[src] /= sum;
  }
  __syncthreads();

  // Step 5: the mix, once for its norm and once more to write it.
  auto mixed_at = [&](int h) {
    Bf16x8 m{};
    for (int src = 0; src < sources; ++src) {
      const Bf16x8 v = load_vec<VEC>(source_row(src) + h);
#pragma unroll
      for (int i = 0; i < VEC; ++i) m.v[i] = fmaf(weights[src], v.v[i], m.v[i]);
    }
    return m;
  };
  float scale = 1.f;
  if (s.has_output_norm) {
    float2 partial = make_float2(0.f, 0.f);
    for (int h = threadIdx.x * VEC; h < hidden; h += kThreads * VEC) {
      const Bf16x8 m = mixed_at(h);
#pragma unroll
      for (int i = 0; i < VEC; ++i) partial.x = fmaf(m.v[i], m.v[i], partial.x);
    }
    scale = rsqrtf(block_sum(partial, scratch).x / float(hidden) + s.output_norm_eps);
  }
  for (int h = threadIdx.x * VEC; h < hidden; h += kThreads * VEC) {
    Bf16x8 m = mixed_at(h);
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      m.v[i] *= s.has_output_norm ? scale * bf16_to_float(a.output_norm_weight[h + i]) : 1.f;
    store_vec<VEC>(a.output + t * a.strides.output + h, m);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void launch_portable(const AttnResArgs& args, cudaStream_t stream, bool hard_coded_row_stride) {
  AttnResArgs a = args;
  if (hard_coded_row_stride) a.strides.prefix = a.strides.delta = a.strides.output = a.shape.hidden;
  if (a.shape.tokens == 0) return;
  const AttnResStrides& st = a.strides;
  const bool vectorizable = st.prefix % 8 == 0 && (!a.shape.has_delta || st.delta % 8 == 0) && st.output % 8 == 0 &&
                            st.blocks_row % 8 == 0 && st.blocks_token % 8 == 0 && aligned16(a.prefix) &&
                            (!a.delta || aligned16(a.delta)) && aligned16(a.blocks) && aligned16(a.output);
  if (a.shape.num_blocks + 1 > kMaxSources)
    throw std::invalid_argument("portable kernel: at most " + std::to_string(kMaxSources - 1) + " blocks");
  const dim3 grid(unsigned(a.shape.tokens));
  if (vectorizable) {
    attnres_portable_kernel<8><<<grid, kThreads, 0, stream>>>(a);
    ATTNRES_CHECK_LAUNCH("attnres_portable_kernel<8>");
  } else {
    attnres_portable_kernel<1><<<grid, kThreads, 0, stream>>>(a);
    ATTNRES_CHECK_LAUNCH("attnres_portable_kernel<1>");
  }
}

}  // namespace attnres
