// The contract (DEVELOPERS.md) as plain loops, in a chosen accumulator precision. With double
// it is the float64 judge; the CPU kernels instantiate it with float.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/problem.h"

namespace attnres {

// Steps 1-2 for token t: prefix <- p = residual_sum(prefix, delta) and blocks[t, block_write_idx] <- p.
inline void apply_residual(const AttnResArgs& args, std::int64_t t) {
  const AttnResShape& s = args.shape;
  bf16_bits* prefix = args.prefix + t * args.strides.prefix;
  bf16_bits* written = s.block_write_idx >= 0
                           ? args.blocks + t * args.strides.blocks_token + s.block_write_idx * args.strides.blocks_row
                           : nullptr;
  const bf16_bits* delta = s.has_delta ? args.delta + t * args.strides.delta : nullptr;
  for (std::int64_t h = 0; h < s.hidden; ++h) {
    prefix[h] = residual_sum(prefix[h], delta ? delta[h] : bf16_bits(0), s.has_delta);
    if (written) written[h] = prefix[h];
  }
}

// Tokens [t_begin, t_end): applies steps 1-2 to args' buffers and calls store(token, h, value)
// with the output of step 5, every stride honoured. Tokens are independent, so disjoint token
// ranges may run concurrently.
template <class Acc, class Store>
void attnres_forward(const AttnResArgs& args, Store&& store, std::int64_t t_begin, std::int64_t t_end) {
  const AttnResShape& s = args.shape;
  const std::int64_t hidden = s.hidden;
  const int sources = s.num_blocks + 1;
  std::vector<Acc> gate(hidden), logits(sources), mixed(hidden);
  std::vector<const bf16_bits*> rows(sources);
  for (std::int64_t h = 0; h < hidden; ++h)
    gate[h] = Acc(bf16_to_float(args.norm_weight[h])) * Acc(bf16_to_float(args.qk_weight[h]));
  for (std::int64_t t = t_begin; t < t_end; ++t) {
    apply_residual(args, t);
    const bf16_bits* prefix = args.prefix + t * args.strides.prefix;
    const bf16_bits* blocks = args.blocks + t * args.strides.blocks_token;
    for (int b = 0; b < s.num_blocks; ++b) rows[b] = blocks + b * args.strides.blocks_row;
    rows[s.num_blocks] = prefix;

    Acc max_logit = -INFINITY;
    for (int src = 0; src < sources; ++src) {
      Acc dot = 0, square_sum = 0;
      for (std::int64_t h = 0; h < hidden; ++h) {
        const Acc v = bf16_to_float(rows[src][h]);
        dot += v * gate[h];
        square_sum += v * v;
      }
      logits[src] = dot / std::sqrt(square_sum / Acc(hidden) + Acc(s.eps));
      max_logit = std::fmax(max_logit, logits[src]);
    }
    Acc weight_sum = 0;
    for (int src = 0; src < sources; ++src) weight_sum += (logits[src] = std::exp(logits[src] - max_logit));
    std::fill(mixed.begin(), mixed.end(), Acc(0));
    for (int src = 0; src < sources; ++src) {
      const Acc w = logits[src] / weight_sum;
      for (std::int64_t h = 0; h < hidden; ++h) mixed[h] += w * Acc(bf16_to_float(rows[src][h]));
    }
    Acc scale = 1;
    if (s.has_output_norm) {
      Acc square_sum = 0;
      for (std::int64_t h = 0; h < hidden; ++h) square_sum += mixed[h] * mixed[h];
      scale = Acc(1) / std::sqrt(square_sum / Acc(hidden) + Acc(s.output_norm_eps));
    }
    for (std::int64_t h = 0; h < hidden; ++h) {
      const Acc weight = s.has_output_norm ? Acc(bf16_to_float(args.output_norm_weight[h])) : Acc(1);
      store(t, h, mixed[h] * scale * weight);
    }
  }
}

// The float64 reference on every core: updates prefix/blocks in args' (host) buffers (steps
// 1-2, so they then hold what a correct kernel leaves there), returns out [T*H].
std::vector<double> cpu_reference(const AttnResArgs& args);

}  // namespace attnres
