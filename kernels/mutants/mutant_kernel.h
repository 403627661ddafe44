// Deliberately wrong AttnRes kernels for `attnres-check mutants`: each breaks one rule of the
// contract the way a real kernel bug would. A suite that a mutant passes cannot tell that bug
// from a correct kernel. The same per-token code runs on the host (the CPU backend) and on the
// device (one thread per token), so a mutation means the same on both.
#pragma once
#include <math.h>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/common/problem.h"

namespace attnres {

enum class Mutation : int {
  none = 0,                   // the unmutated kernel the others are measured against
  no_key_rms_norm,            // logits without rsqrt(mean(v^2) + eps)
  no_norm_weight,             // logits with qk_weight alone
  no_output_norm_weight,      // output RMS-normalised but not multiplied by output_norm_weight
  softmax_without_max,        // exp(logit) without subtracting the largest logit
  p_not_rounded,              // p kept in float32 as a source, stored by truncating to bf16
  delta_ignored,              // p = prefix
  source_off_by_one,          // the last block source left out
  wrong_write_index,          // p written into the block after block_write_idx (before it at the end)
  prefix_not_written,         // prefix keeps its old value
  hard_coded_row_stride,      // the seed's bug: prefix, delta and output rows taken as H apart
  float16_rounding,           // p and the output rounded through float16 before bf16
  eps_ignored,                // eps and output_norm_eps taken as 0
  eps_swapped,                // eps where output_norm_eps belongs, and the other way round
  p_flushed_to_zero,          // a denormal p written and used as 0 (flush-to-zero arithmetic)
  tokens_past_65535_skipped,  // rows from 65535 on never computed (tokens on grid.y)
  output_biased,              // 0.07 added to every output element: inside the tolerance
};

struct MutationInfo {
  Mutation mutation;
  const char* name;         // "no-key-rms-norm"
  const char* description;  // what the kernel gets wrong
};

// Every mutation but none, in declaration order.
const std::vector<MutationInfo>& mutations();
// "mutant:<name>", or "mutant:none" for the unmutated kernel: the registry's names.
std::string mutant_kernel_name(Mutation mutation);

// float -> float16 (round to nearest even, Inf past 65504, float16 subnormals) -> float.
ATTNRES_HD float round_through_float16(float x) {
  if (!(fabsf(x) < 65520.0f)) return x != x ? x : copysignf(INFINITY, x);
  if (x == 0.0f) return x;
  int exponent;
  frexpf(fabsf(x), &exponent);  // |x| = m * 2^exponent, m in [0.5, 1)
  const int quantum = (exponent - 1 < -14 ? -14 : exponent - 1) - 10;
  return ldexpf(rintf(ldexpf(x, -quantum)), quantum);
}

// Token t of the contract with `mutation` applied, honouring args' strides (but for the
// hard-coded-stride mutant). Reads every source before writing prefix, the block and the output.
ATTNRES_HD void mutant_token(const AttnResArgs& args, Mutation mutation, std::int64_t t) {
  const AttnResShape& s = args.shape;
  const std::int64_t hidden = s.hidden;
  AttnResStrides st = args.strides;
  if (mutation == Mutation::hard_coded_row_stride) st.prefix = st.delta = st.output = hidden;
  bf16_bits* prefix = args.prefix + t * st.prefix;
  const bf16_bits* delta = s.has_delta && mutation != Mutation::delta_ignored ? args.delta + t * st.delta : nullptr;
  bf16_bits* blocks = args.blocks + t * st.blocks_token;
  int written = s.block_write_idx;
  if (mutation == Mutation::wrong_write_index && written >= 0)
    written = written + 1 < s.max_blocks ? written + 1 : written - 1;
  const int block_sources =
      mutation == Mutation::source_off_by_one && s.num_blocks > 0 ? s.num_blocks - 1 : s.num_blocks;
  if (mutation == Mutation::tokens_past_65535_skipped && t >= 65535) return;
  const float eps = mutation == Mutation::eps_ignored   ? 0.0f
                    : mutation == Mutation::eps_swapped ? s.output_norm_eps
                                                        : s.eps;
  const float output_eps = mutation == Mutation::eps_ignored   ? 0.0f
                           : mutation == Mutation::eps_swapped ? s.eps
                                                               : s.output_norm_eps;

  // p as stored (bf16) and as used as a source (float).
  auto p_stored = [&](std::int64_t h, float& as_source) {
    float sum = bf16_to_float(prefix[h]) + (delta ? bf16_to_float(delta[h]) : 0.0f);
    if (mutation == Mutation::p_flushed_to_zero && fabsf(sum) < 1.17549435e-38f) sum = copysignf(0.0f, sum);
    if (mutation == Mutation::p_not_rounded) {
      as_source = sum;
      return bf16_bits(float_bits(sum) >> 16);
    }
    const bf16_bits bits = float_to_bf16(mutation == Mutation::float16_rounding ? round_through_float16(sum) : sum);
    as_source = bf16_to_float(bits);
    return bits;
  };
  // Source src (blocks 0..block_sources-1, then p) at column h, as the kernel sees it once p is written.
  auto source = [&](int src, std::int64_t h) {
    float p;
    if (src == block_sources) {
      p_stored(h, p);
      return p;
    }
    if (src == written) return bf16_to_float(p_stored(h, p));
    return bf16_to_float(blocks[std::int64_t(src) * st.blocks_row + h]);
  };

  // Four partial sums per reduction (H is a multiple of 8): independent additions, as any
  // real kernel's lanes have.
  constexpr int kMaxSources = 65, kLanes = 4;
  const bool with_norm_weight = mutation != Mutation::no_norm_weight;
  float weights[kMaxSources];
  float max_logit = -INFINITY;
  for (int src = 0; src <= block_sources; ++src) {
    float dot[kLanes] = {}, squares[kLanes] = {};
    for (std::int64_t h = 0; h < hidden; h += kLanes)
      for (int k = 0; k < kLanes; ++k) {
        const float v = source(src, h + k);
        const float norm = with_norm_weight ? bf16_to_float(args.norm_weight[h + k]) : 1.0f;
        dot[k] += v * norm * bf16_to_float(args.qk_weight[h + k]);
        squares[k] += v * v;
      }
    const float dot_sum = (dot[0] + dot[1]) + (dot[2] + dot[3]);
    const float square_sum = (squares[0] + squares[1]) + (squares[2] + squares[3]);
    weights[src] = mutation == Mutation::no_key_rms_norm ? dot_sum : dot_sum / sqrtf(square_sum / float(hidden) + eps);
    max_logit = fmaxf(max_logit, weights[src]);
  }
  if (mutation == Mutation::softmax_without_max) max_logit = 0.0f;
  float weight_sum = 0.0f;
  for (int src = 0; src <= block_sources; ++src) weight_sum += (weights[src] = expf(weights[src] - max_logit));
  for (int src = 0; src <= block_sources; ++src) weights[src] /= weight_sum;
  auto mixed = [&](std::int64_t h) {
    float m = 0.0f;
    for (int src = 0; src <= block_sources; ++src) m += weights[src] * source(src, h);
    return m;
  };
  float scale = 1.0f;
  if (s.has_output_norm) {
    float squares[kLanes] = {};
    for (std::int64_t h = 0; h < hidden; h += kLanes)
      for (int k = 0; k < kLanes; ++k) {
        const float m = mixed(h + k);
        squares[k] += m * m;
      }
    scale = 1.0f / sqrtf(((squares[0] + squares[1]) + (squares[2] + squares[3])) / float(hidden) + output_eps);
  }
  for (std::int64_t h = 0; h < hidden; ++h) {
    const bool weighted = s.has_output_norm && mutation != Mutation::no_output_norm_weight;
    float out = mixed(h) * scale * (weighted ? bf16_to_float(args.output_norm_weight[h]) : 1.0f);
    if (mutation == Mutation::float16_rounding) out = round_through_float16(out);
    if (mutation == Mutation::output_biased) out += 0.07f;
    args.output[t * st.output + h] = float_to_bf16(out);
  }
  // Every read is done: now prefix and the written block take p.
  for (std::int64_t h = 0; h < hidden; ++h) {
    float unused;
    const bf16_bits p = p_stored(h, unused);
    if (written >= 0) blocks[std::int64_t(written) * st.blocks_row + h] = p;
    if (mutation != Mutation::prefix_not_written) prefix[h] = p;
  }
}

// The mutant over every token of host tensors (both cores).
void mutant_kernel_host(const AttnResArgs& args, Mutation mutation);
// The mutant over every token of device tensors, one thread per token.
void mutant_kernel_device(const AttnResArgs& args, Mutation mutation, cudaStream_t stream);

}  // namespace attnres
