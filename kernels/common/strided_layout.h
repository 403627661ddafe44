// Where a tensor's logical elements lie in its storage, as PyTorch describes a view: sizes,
// strides (elements) and a storage offset. Every operand is at most [outer, inner, columns]
// with unit stride along columns (H): [T, H] tensors have inner = 1, blocks [T, MAXB, H] have
// inner = MAXB, a weight [H] is one row. Host code and device reductions share it.
#pragma once
#include <cstdint>

#include "kernels/common/bf16.h"

namespace attnres {

struct StridedLayout {
  std::int64_t outer = 0, outer_stride = 0;
  std::int64_t inner = 1, inner_stride = 0;
  std::int64_t columns = 0;
  std::int64_t offset = 0;  // storage elements before the first logical element

  // A [rows, columns] matrix whose rows lie row_stride apart.
  ATTNRES_HD static StridedLayout matrix(std::int64_t rows, std::int64_t columns, std::int64_t row_stride) {
    StridedLayout l;
    l.outer = rows;
    l.outer_stride = row_stride;
    l.columns = columns;
    return l;
  }

  ATTNRES_HD std::int64_t rows() const { return outer * inner; }
  ATTNRES_HD bool empty() const { return rows() == 0 || columns == 0; }
  // Row r is (r / inner, r % inner); its first element, counted from the first logical element.
  ATTNRES_HD std::int64_t row_start(std::int64_t row) const {
    return inner == 1 ? row * outer_stride : (row / inner) * outer_stride + (row % inner) * inner_stride;
  }
  // Storage elements: the offset, then as far as the widest dimension reaches (the base tensor a
  // view is cut from: its last row's padding included). Covers every logical element of a
  // non-overlapping layout (overlap_free).
  ATTNRES_HD std::int64_t span() const {
    if (empty()) return offset;
    std::int64_t widest = columns;
    if (outer * outer_stride > widest) widest = outer * outer_stride;
    if (inner * inner_stride > widest) widest = inner * inner_stride;
    return offset + widest;
  }

  // The dimensions with more than one index, larger stride first: storage is nested in that
  // order, so one division per dimension finds an element's indices.
  struct Nesting {
    std::int64_t major = 1, major_stride = 1, minor = 1, minor_stride = 1;
    bool outer_is_major = true;
  };
  ATTNRES_HD Nesting nesting() const {
    const bool outer_major = outer > 1 && (inner <= 1 || outer_stride >= inner_stride);
    Nesting n;
    n.outer_is_major = outer_major;
    const std::int64_t major = outer_major ? outer : inner, major_stride = outer_major ? outer_stride : inner_stride;
    const std::int64_t minor = outer_major ? inner : outer, minor_stride = outer_major ? inner_stride : outer_stride;
    if (major > 1) {
      n.major = major;
      n.major_stride = major_stride;
    }
    if (minor > 1) {
      n.minor = minor;
      n.minor_stride = minor_stride;
    }
    return n;
  }

  // No two logical elements share storage: each dimension with more than one index steps past
  // everything the smaller-stride dimensions reach (the condition under which locate is exact).
  ATTNRES_HD bool overlap_free() const {
    if (empty()) return true;
    const Nesting n = nesting();
    const std::int64_t minor_reach = (n.minor - 1) * n.minor_stride + columns;
    return (n.minor == 1 || n.minor_stride >= columns) && (n.major == 1 || n.major_stride >= minor_reach);
  }

  // The storage element `element` (counted from the storage's start): whether it is logical,
  // and its row and column. Outside any row's extent (before the offset, between the rows of
  // one dimension), row is -1; inside a row's extent past its columns (row padding), col >= columns.
  struct Location {
    bool logical = false;
    std::int64_t row = -1, col = -1;
  };
  ATTNRES_HD Location locate(std::int64_t element) const {
    Location at;
    std::int64_t rest = element - offset;
    if (rest < 0 || empty()) return at;
    const Nesting n = nesting();
    // A dimension of one index holds everything: its index is 0 whatever its stride.
    const std::int64_t major_index = n.major == 1 ? 0 : rest / n.major_stride;
    if (major_index >= n.major) return at;
    rest -= major_index * n.major_stride;
    const std::int64_t minor_index = n.minor == 1 ? 0 : rest / n.minor_stride;
    if (minor_index >= n.minor) return at;
    rest -= minor_index * n.minor_stride;
    const std::int64_t outer_index = n.outer_is_major ? major_index : minor_index;
    const std::int64_t inner_index = n.outer_is_major ? minor_index : major_index;
    at.row = outer_index * inner + inner_index;
    at.col = rest;
    at.logical = rest < columns;
    return at;
  }
};

}  // namespace attnres
