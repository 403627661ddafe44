#include "kernels/native/native_support.h"

#include <fmt/format.h>

#include "kernels/native/native_limits.h"

namespace attnres {

std::optional<std::string> native_unsupported_reason(const AttnResShape& shape, const AttnResStrides& strides,
                                                     bool operands_16b_aligned) {
  if (shape.hidden % native::kHiddenMultiple != 0 || shape.hidden > native::kMaxHidden)
    return fmt::format("native kernel supports hidden_size multiples of {} up to {}, got {}", native::kHiddenMultiple,
                       native::kMaxHidden, shape.hidden);
  if (shape.num_blocks > native::kMaxBlocks)
    return fmt::format("native kernel supports num_blocks <= {}, got {}", native::kMaxBlocks, shape.num_blocks);
  // The bulk copy engine moves whole 16-byte granules from 16-byte aligned addresses; the tool's
  // allocations are, so an operand's start is iff its storage offset is a multiple of 8.
  for (int i = 0; i < kOperandCount; ++i)
    if (strides.storage_offset[i] % 8 != 0)
      return fmt::format("native kernel needs 16-byte aligned operands; {} starts at storage offset {} (elements)",
                         to_string(Operand(i)), strides.storage_offset[i]);
  const bool strides_aligned = strides.blocks_token % 8 == 0 && strides.blocks_row % 8 == 0;
  if (!operands_16b_aligned || !strides_aligned)
    return std::string(
        "native kernel needs 16-byte aligned operands and blocks strides that are multiples of 8 elements");
  return std::nullopt;
}

}  // namespace attnres
