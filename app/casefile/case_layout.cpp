#include "app/casefile/case_layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/common/checked_size.h"

namespace attnres {

std::vector<TensorLayout> case_layouts(const AttnResShape& s, const AttnResStrides& strides) {
  const std::int64_t tokens = s.tokens, hidden = s.hidden;
  auto layout = [&](Operand operand, std::int64_t outer, std::int64_t outer_stride, std::int64_t inner,
                    std::int64_t inner_stride) {
    TensorLayout l;
    l.name = to_string(operand);
    l.outer = outer;
    l.outer_stride = outer_stride;
    l.inner = inner;
    l.inner_stride = inner_stride;
    l.columns = hidden;
    l.offset = strides.storage_offset[int(operand)];
    return l;
  };
  return {layout(Operand::prefix, tokens, strides.prefix, 1, 0),
          layout(Operand::delta, s.has_delta ? tokens : 0, s.has_delta ? strides.delta : hidden, 1, 0),
          layout(Operand::blocks, tokens, strides.blocks_token, s.max_blocks, strides.blocks_row),
          layout(Operand::norm_weight, 1, hidden, 1, 0),
          layout(Operand::qk_weight, 1, hidden, 1, 0),
          layout(Operand::output_norm_weight, s.has_output_norm ? 1 : 0, hidden, 1, 0),
          layout(Operand::output, tokens, strides.output, 1, 0)};
}

std::optional<std::int64_t> checked_span(const StridedLayout& l) {
  if (l.empty()) return l.offset;
  const std::optional<std::int64_t> outer = (CheckedSize(l.outer) * l.outer_stride).get();
  const std::optional<std::int64_t> inner = (CheckedSize(l.inner) * l.inner_stride).get();
  if (!outer || !inner) return std::nullopt;
  return (CheckedSize(l.offset) + std::max({*outer, *inner, l.columns})).get();
}

std::optional<LayoutViolation> layout_violation(const AttnResShape& shape, const AttnResStrides& strides,
                                                std::int64_t max_elements) {
  const std::vector<TensorLayout> layouts = case_layouts(shape, strides);
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const TensorLayout& l = layouts[i];
    const Operand operand = Operand(i);
    if (l.outer_stride < 0 || l.inner_stride < 0 || l.offset < 0)
      return LayoutViolation{operand, false, fmt::format("{}: strides and storage offset must be >= 0", l.name)};
    const std::optional<std::int64_t> span = checked_span(l);
    if (!span || *span > max_elements)
      return LayoutViolation{
          operand, true,
          fmt::format("{}: its storage (storage offset plus its widest dimension) exceeds {} elements", l.name,
                      max_elements)};
    if (!l.overlap_free())
      return LayoutViolation{operand, false,
                             fmt::format("{}: its strides make logical elements share storage (a dimension of size > 1 "
                                         "must step past all that the smaller strides reach, and a row is {} elements)",
                                         l.name, l.columns)};
  }
  return std::nullopt;
}

std::string describe_strides(const AttnResShape& shape, const AttnResStrides& st) {
  std::string text = fmt::format("prefix [{}, 1], delta {}, output [{}, 1], blocks [{}, {}, 1]", st.prefix,
                                 shape.has_delta ? fmt::format("[{}, 1]", st.delta) : "none", st.output,
                                 st.blocks_token, st.blocks_row);
  std::string offsets;
  for (int i = 0; i < kOperandCount; ++i)
    if (st.storage_offset[i])
      offsets += fmt::format("{}{} {}", offsets.empty() ? "; storage offsets " : ", ", to_string(Operand(i)),
                             st.storage_offset[i]);
  return text + offsets;
}

void set_token_major_blocks(AttnResStrides& strides, int max_blocks, std::int64_t row_stride) {
  strides.blocks_row = row_stride;
  strides.blocks_token = std::int64_t(max_blocks) * row_stride;
}

// The strides of `st` for the sizes of `to` instead of `from`, each dimension keeping its
// padding (the elements past what the next smaller dimension reaches), so that a stride bug
// keeps its shape; the blocks keep which of their dimensions is outer.
AttnResStrides resized_strides(AttnResStrides st, const AttnResShape& from, const AttnResShape& to) {
  auto rows = [&](std::int64_t stride) { return std::max<std::int64_t>(stride - from.hidden, 0) + to.hidden; };
  st.prefix = rows(st.prefix);
  st.delta = rows(st.delta);
  st.output = rows(st.output);
  const bool token_outer = st.blocks_token >= st.blocks_row;
  std::int64_t& minor = token_outer ? st.blocks_row : st.blocks_token;
  std::int64_t& major = token_outer ? st.blocks_token : st.blocks_row;
  const std::int64_t minor_from = token_outer ? from.max_blocks : from.tokens;
  const std::int64_t minor_to = token_outer ? to.max_blocks : to.tokens;
  const std::int64_t major_padding = major - minor_from * minor;
  minor = rows(minor);
  major = std::max(minor_to * minor + major_padding, std::max<std::int64_t>(minor_to - 1, 0) * minor + to.hidden);
  return st;
}

}  // namespace attnres
