// A case's seven operands as laid out in memory: one TensorLayout each, made from the case's
// shape and strides, which the generator, the kernels' arguments, the checks and the replay
// all read.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/problem.h"
#include "kernels/common/strided_layout.h"

namespace attnres {

// The guard regions of canary before and after every allocation: at least 64 KiB, and as wide as
// the tensor's widest stride (a row, a token's blocks, a block-major view's block), so that a
// kernel indexing one row or one block row past its tensor lands in one; at most 16 MiB a side
// (past that, compute-sanitizer's memcheck is the check). A multiple of 128 elements (256 bytes)
// keeps each tensor's storage as aligned as the allocation itself.
constexpr std::int64_t kMinGuardElements = std::int64_t(1) << 15;
constexpr std::int64_t kMaxGuardElements = std::int64_t(1) << 23;

// A tensor's place in memory: its strided layout (blocks: T * max_blocks rows, row
// t * max_blocks + b), with guard() elements of guard region before and after its storage.
struct TensorLayout : StridedLayout {
  std::string name;

  std::int64_t guard() const {
    const std::int64_t widest = std::max({columns, outer_stride, inner_stride});
    const std::int64_t wanted = std::clamp(widest, kMinGuardElements, kMaxGuardElements);
    return (wanted + 127) / 128 * 128;
  }
  std::int64_t storage_elements() const { return span() + 2 * guard(); }
};

// The storage [0, span()) of `layout` as runs in storage order, the major indices [major_begin,
// major_end) of its nesting (and for major_begin 0 the part before the offset):
// visit(begin, end, row, logical) for each run of one row's logical elements and of its padding
// (row >= 0), and of storage outside every row (row -1), as StridedLayout::locate classifies them.
template <class Visit>
void for_each_storage_run(const StridedLayout& layout, std::int64_t major_begin, std::int64_t major_end,
                          Visit&& visit) {
  const StridedLayout::Nesting n = layout.nesting();
  const std::int64_t span = layout.span();
  auto row_of = [&](std::int64_t major, std::int64_t minor) {
    const std::int64_t outer = n.outer_is_major ? major : minor, inner = n.outer_is_major ? minor : major;
    return outer * layout.inner + inner;
  };
  auto run = [&](std::int64_t begin, std::int64_t end, std::int64_t row, bool logical) {
    end = std::min(end, span);
    if (begin < end) visit(begin, end, row, logical);
  };
  if (major_begin == 0) run(0, layout.offset, -1, false);
  if (layout.empty()) return;
  for (std::int64_t i = major_begin; i < major_end; ++i) {
    const std::int64_t base = layout.offset + i * n.major_stride;
    const std::int64_t region_end = n.major == 1 ? span : base + n.major_stride;
    for (std::int64_t j = 0; j < n.minor; ++j) {
      const std::int64_t start = base + j * n.minor_stride;
      const std::int64_t row_end = n.minor == 1 ? region_end : std::min(start + n.minor_stride, region_end);
      run(start, start + layout.columns, row_of(i, j), true);
      run(start + layout.columns, row_end, row_of(i, j), false);
    }
    if (n.minor > 1) run(base + n.minor * n.minor_stride, region_end, -1, false);
  }
  if (n.major > 1 && major_end == n.major) run(layout.offset + n.major * n.major_stride, span, -1, false);
}

// The seven tensors of a case laid out by `shape` and `strides`, in Operand order (an absent
// delta or output_norm_weight has no rows).
std::vector<TensorLayout> case_layouts(const AttnResShape& shape, const AttnResStrides& strides);

// span() of a layout whose sizes, strides and offset may overflow int64 (they come from files).
std::optional<std::int64_t> checked_span(const StridedLayout& layout);

// Why a case's layout cannot be allocated, or could not be a PyTorch view, if it cannot.
struct LayoutViolation {
  Operand operand;
  bool too_large;       // else: logical elements share storage
  std::string message;  // names the tensor
};
std::optional<LayoutViolation> layout_violation(const AttnResShape& shape, const AttnResStrides& strides,
                                                std::int64_t max_elements);

// "prefix [7175, 1], delta [7175, 1], output [7168, 1], blocks [57344, 7168, 1]", then
// "; storage offsets prefix 1, ..." where any is not 0: how reports and logs name a layout.
std::string describe_strides(const AttnResShape& shape, const AttnResStrides& strides);

// The strides a token-major [T, MAXB, H] blocks tensor with rows `row_stride` apart has.
void set_token_major_blocks(AttnResStrides& strides, int max_blocks, std::int64_t row_stride);

// The strides of `st` for the sizes of `to` instead of `from`, each dimension keeping its
// padding (the elements past what the next smaller dimension reaches), so that a stride bug
// keeps its shape; the blocks keep which of their dimensions is outer.
AttnResStrides resized_strides(AttnResStrides st, const AttnResShape& from, const AttnResShape& to);

}  // namespace attnres
