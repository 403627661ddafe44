// Test kernels behind the C ABI, on host (kDLCPU) operands, written apart from the tool's own
// kernels. One source, built as several libraries (tests/CMakeLists.txt):
//   ATTNRES_PLUGIN_OK           the fixed production kernel: refuses rows that are not densely
//                               packed with the exact message, honours every other stride
//   ATTNRES_PLUGIN_ANY_STRIDE   takes every stride and computes it (as vLLM's dispatch and
//                               FlashInfer's API must)
//   ATTNRES_PLUGIN_HARDCODED    the seed bug: takes prefix, delta and output rows as H apart
//   ATTNRES_PLUGIN_DAMAGES_THEN_REFUSES  the seed bug, then the fixed kernel's refusal with its
//                               exact message: the damage is done before the guard
//   ATTNRES_PLUGIN_READS_OUTPUT  writes fmaxf(what the output held, its value): right after a NaN
//                               poison (fmaxf(NaN, x) is x), wrong after anything else
//   ATTNRES_PLUGIN_BIASED       adds 0.07 to every output element: inside the tolerance (8e-2),
//                               and wrong
//   ATTNRES_PLUGIN_IGNORES_EPS  takes eps and output_norm_eps as 0
//   ATTNRES_PLUGIN_SWAPS_EPS    uses eps for the output norm and output_norm_eps for the keys
//   ATTNRES_PLUGIN_FLUSHES_P    writes and uses a denormal p as 0, as flush-to-zero arithmetic does
//   ATTNRES_PLUGIN_SKIPS_FAR_TOKENS  never computes rows from 65535 on (tokens on a grid's y)
//   ATTNRES_PLUGIN_REFUSES_EVERYTHING  refuses every call ("not implemented"), touching nothing
//   ATTNRES_PLUGIN_COPIES_PADDING  takes every stride, and its block write copies the prefix row's
//                               padding into the written block row's padding
//   ATTNRES_PLUGIN_WRITES_CANARY  takes every stride, and writes 0x40a5 (the judged call's canary)
//                               just before the output and after each padded prefix row
//   ATTNRES_PLUGIN_DEPENDS_ON_BATCH  takes every stride, and from 256 tokens on rounds its softmax
//                               weights to bf16 (a large-batch path): within tolerance, and a row's
//                               bits depend on the batch
//   ATTNRES_PLUGIN_LEAKS_GARBAGE  takes every stride, and scales every output by 1 + 0 * a sum over
//                               the whole batch's p (a batch-wide amax for a quantization scale):
//                               a NaN or Inf in any row makes every row NaN
//   ATTNRES_PLUGIN_WRONG_ABI    reports ABI version 999
//   ATTNRES_PLUGIN_ABI_V1       the fixed kernel, built for ABI version 1 (before enable_pdl)
//   ATTNRES_PLUGIN_THROWS       lets a C++ exception out of its C entry
//   ATTNRES_PLUGIN_FAILS        returns ATTNRES_KERNEL_FAILED with a message
//   ATTNRES_PLUGIN_CRASHES      the fixed kernel, but it kills its process on every call with 3
//                               blocks (a segfault in a kernel library)
//   ATTNRES_PLUGIN_HANGS        the fixed kernel, but it never returns from a call with 3 blocks
//   ATTNRES_PLUGIN_HANGS_ON_LOAD  never returns its kernel info
#include <attnres/kernel_abi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "packed_rows.h"

namespace {

float load(const DLTensor* t, std::int64_t offset) {
  std::uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(t->data) + t->byte_offset + offset * 2, 2);
  const std::uint32_t wide = std::uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

std::uint16_t round_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::uint16_t(bits >> 16);
}

void store(const DLTensor* t, std::int64_t offset, std::uint16_t bits) {
  std::memcpy(static_cast<char*>(t->data) + t->byte_offset + offset * 2, &bits, 2);
}

// Row stride of a [T, H] operand as this kernel reads it.
std::int64_t row_stride(const DLTensor* t) {
#if defined(ATTNRES_PLUGIN_HARDCODED) || defined(ATTNRES_PLUGIN_DAMAGES_THEN_REFUSES)
  return t->shape[1];
#else
  return t->strides[0];
#endif
}

int run(const AttnResKernelCall* c) {
#if defined(ATTNRES_PLUGIN_REFUSES_EVERYTHING)
  std::snprintf(c->error, c->error_capacity, "test plugin: not implemented");
  return ATTNRES_KERNEL_REFUSED;
#endif
#if defined(ATTNRES_PLUGIN_THROWS)
  throw std::runtime_error("test plugin: thrown on purpose");
#elif defined(ATTNRES_PLUGIN_FAILS)
  std::snprintf(c->error, c->error_capacity, "test plugin: failed on purpose");
  return ATTNRES_KERNEL_FAILED;
#endif
  const std::int64_t tokens = c->prefix->shape[0], hidden = c->prefix->shape[1];
#if defined(ATTNRES_PLUGIN_OK) || defined(ATTNRES_PLUGIN_CRASHES) || defined(ATTNRES_PLUGIN_HANGS)
  if (refuse_unless_packed(c)) return ATTNRES_KERNEL_REFUSED;
#endif
#if defined(ATTNRES_PLUGIN_CRASHES)
  if (c->num_blocks == 3) std::raise(SIGSEGV);
#endif
#if defined(ATTNRES_PLUGIN_HANGS)
  if (c->num_blocks == 3)
    for (;;) ::pause();  // as a kernel spinning on a barrier that never completes
#endif
#if defined(ATTNRES_PLUGIN_IGNORES_EPS)
  const float eps = 0, output_norm_eps = 0;
#elif defined(ATTNRES_PLUGIN_SWAPS_EPS)
  const float eps = float(c->output_norm_eps), output_norm_eps = float(c->eps);
#else
  const float eps = float(c->eps), output_norm_eps = float(c->output_norm_eps);
#endif
  const std::int64_t block_token = c->blocks->strides[0], block_row = c->blocks->strides[1];
#if defined(ATTNRES_PLUGIN_LEAKS_GARBAGE)
  float batch_sum = 0;
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < hidden; ++h)
      batch_sum += std::fabs(load(c->prefix, t * row_stride(c->prefix) + h) +
                             (c->delta ? load(c->delta, t * row_stride(c->delta) + h) : 0.0f));
  const float batch_scale = 1 + 0 * batch_sum;
#else
  const float batch_scale = 1;
#endif
  const int sources = int(c->num_blocks) + 1;
  std::vector<float> gate(hidden), mixed(hidden), logits(sources);
  for (std::int64_t h = 0; h < hidden; ++h) gate[h] = load(c->norm_weight, h) * load(c->qk_weight, h);
#if defined(ATTNRES_PLUGIN_SKIPS_FAR_TOKENS)
  const std::int64_t computed = std::min<std::int64_t>(tokens, 65535);
#else
  const std::int64_t computed = tokens;
#endif
  for (std::int64_t t = 0; t < computed; ++t) {
    const std::int64_t prefix_row = t * row_stride(c->prefix);
    for (std::int64_t h = 0; h < hidden; ++h) {
      float sum = load(c->prefix, prefix_row + h);
      if (c->delta) sum += load(c->delta, t * row_stride(c->delta) + h);
#if defined(ATTNRES_PLUGIN_FLUSHES_P)
      if (std::fabs(sum) < 1.17549435e-38f) sum = 0;
#endif
      store(c->prefix, prefix_row + h, round_bf16(sum));
      if (c->block_write_idx >= 0)
        store(c->blocks, t * block_token + c->block_write_idx * block_row + h, round_bf16(sum));
    }
#if defined(ATTNRES_PLUGIN_COPIES_PADDING)
    if (c->block_write_idx >= 0)
      for (std::int64_t h = hidden; h < std::min(row_stride(c->prefix), block_row); ++h)
        store(c->blocks, t * block_token + c->block_write_idx * block_row + h,
              round_bf16(load(c->prefix, prefix_row + h)));
#elif defined(ATTNRES_PLUGIN_WRITES_CANARY)
    if (row_stride(c->prefix) > hidden) store(c->prefix, prefix_row + hidden, 0x40a5);
    if (t == 0) store(c->output, -1, 0x40a5);
#endif
    auto source = [&](int s, std::int64_t h) {
      return s < c->num_blocks ? load(c->blocks, t * block_token + s * block_row + h) : load(c->prefix, prefix_row + h);
    };
    float max_logit = -INFINITY;
    for (int s = 0; s < sources; ++s) {
      float dot = 0, squares = 0;
      for (std::int64_t h = 0; h < hidden; ++h) {
        const float v = source(s, h);
        dot += v * gate[h];
        squares += v * v;
      }
      logits[s] = dot / std::sqrt(squares / float(hidden) + eps);
      max_logit = std::fmax(max_logit, logits[s]);
    }
    float total = 0;
    for (int s = 0; s < sources; ++s) total += (logits[s] = std::exp(logits[s] - max_logit));
#if defined(ATTNRES_PLUGIN_DEPENDS_ON_BATCH)
    if (tokens >= 256) {
      for (int s = 0; s < sources; ++s) {
        const std::uint32_t wide = std::uint32_t(round_bf16(logits[s] / total)) << 16;
        std::memcpy(&logits[s], &wide, 4);
      }
      total = 1;
    }
#endif
    for (std::int64_t h = 0; h < hidden; ++h) {
      mixed[h] = 0;
      for (int s = 0; s < sources; ++s) mixed[h] += logits[s] / total * source(s, h);
    }
    float scale = 1;
    if (c->output_norm_weight) {
      float squares = 0;
      for (std::int64_t h = 0; h < hidden; ++h) squares += mixed[h] * mixed[h];
      scale = 1.0f / std::sqrt(squares / float(hidden) + output_norm_eps);
    }
    for (std::int64_t h = 0; h < hidden; ++h) {
      const float weight = c->output_norm_weight ? load(c->output_norm_weight, h) : 1.0f;
#if defined(ATTNRES_PLUGIN_READS_OUTPUT)
      const float value = std::fmax(load(c->output, t * row_stride(c->output) + h), mixed[h] * scale * weight);
#elif defined(ATTNRES_PLUGIN_BIASED)
      const float value = mixed[h] * scale * weight + 0.07f;
#else
      const float value = mixed[h] * scale * weight * batch_scale;
#endif
      store(c->output, t * row_stride(c->output) + h, round_bf16(value));
    }
  }
#if defined(ATTNRES_PLUGIN_DAMAGES_THEN_REFUSES)
  if (refuse_unless_packed(c)) return ATTNRES_KERNEL_REFUSED;
#endif
  return ATTNRES_KERNEL_OK;
}

}  // namespace

extern "C" const AttnResKernelInfo* attnres_kernel_info(void) {
#if defined(ATTNRES_PLUGIN_HANGS_ON_LOAD)
  for (;;) ::pause();  // as a library whose set-up waits on something that never comes
#endif
#if defined(ATTNRES_PLUGIN_WRONG_ABI)
  static const AttnResKernelInfo info{999u, kDLCPU, "test plugin built for another ABI"};
#elif defined(ATTNRES_PLUGIN_ABI_V1)
  static const AttnResKernelInfo info{1u, kDLCPU, "test plugin built for ABI version 1"};
#else
  static const AttnResKernelInfo info{ATTNRES_KERNEL_ABI_VERSION, kDLCPU, "attnres-check test plugin (CPU)"};
#endif
  return &info;
}

extern "C" int attnres_kernel(const AttnResKernelCall* call) { return run(call); }
