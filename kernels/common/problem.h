// One AttnRes call as every implementation sees it: sizes, strides (in elements) and pointers.
// The same struct describes host buffers (CPU reference, CPU kernels) and device buffers.
#pragma once
#include <cstdint>

#include "kernels/common/bf16.h"

namespace attnres {

// The sizes this tool accepts from a case file, a safetensors file or the command line.
constexpr std::int64_t kMaxTokens = std::int64_t(1) << 31;
constexpr int kMaxHidden = 65536;

struct AttnResShape {
  std::int64_t tokens = 0;
  int hidden = 0;
  int max_blocks = 0;
  int num_blocks = 0;
  int block_write_idx = -1;  // -1: no block write
  bool has_delta = false;
  bool has_output_norm = false;
  float eps = 1e-6f;
  float output_norm_eps = 1e-6f;
};

// The seven operands in the order every list of them takes (CaseTensors::all()).
enum class Operand { prefix = 0, delta, blocks, norm_weight, qk_weight, output_norm_weight, output };
constexpr int kOperandCount = 7;
inline const char* to_string(Operand operand) {
  static const char* const kNames[] = {"prefix", "delta", "blocks", "norm_weight", "qk_weight", "output_norm_weight",
                                       "output"};
  return kNames[int(operand)];
}

// Row strides of every [T, H]-shaped operand plus the blocks' two outer strides (token-major
// [T, MAXB, H] has blocks_token = MAXB * blocks_row; block-major storage has blocks_row =
// T * blocks_token); every operand's stride along H is 1.
struct AttnResStrides {
  std::int64_t prefix = 0;
  std::int64_t delta = 0;  // meaningful only with has_delta
  std::int64_t output = 0;
  std::int64_t blocks_token = 0;  // stride(0) of blocks [T, MAXB, H]
  std::int64_t blocks_row = 0;    // stride(1) of blocks
  // Each operand's storage offset (elements from its allocation's start, by Operand): the
  // pointers in AttnResArgs already point past it. Dispatch reads it for base alignment.
  std::int64_t storage_offset[kOperandCount] = {};
};

struct AttnResArgs {
  AttnResShape shape;
  AttnResStrides strides;
  bf16_bits* prefix = nullptr;       // read, then overwritten with p
  const bf16_bits* delta = nullptr;  // null without delta
  bf16_bits* blocks = nullptr;       // blocks[:, block_write_idx] overwritten with p
  const bf16_bits* norm_weight = nullptr;
  const bf16_bits* qk_weight = nullptr;
  const bf16_bits* output_norm_weight = nullptr;  // null without output norm
  bf16_bits* output = nullptr;
};

// Step 1 for one element: p = bf16(prefix + delta), a float32 sum rounded once (the way the
// framework adds bf16 tensors). Every reference and check takes p from here.
ATTNRES_HD bf16_bits residual_sum(bf16_bits prefix, bf16_bits delta, bool has_delta) {
  float sum = bf16_to_float(prefix);
  if (has_delta) sum += bf16_to_float(delta);
  return float_to_bf16(sum);
}

}  // namespace attnres
