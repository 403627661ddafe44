#include "kernels/layout_guard.h"

#include <fmt/format.h>

namespace attnres {

std::optional<std::string> dense_rows_violation(const AttnResShape& shape, const AttnResStrides& strides) {
  const std::int64_t hidden = shape.hidden;
  const bool delta_dense = !shape.has_delta || strides.delta == hidden;
  if (strides.prefix == hidden && delta_dense && strides.output == hidden) return std::nullopt;
  const std::string delta = shape.has_delta ? std::to_string(strides.delta) : std::string("none");
  return fmt::format("Kimi K3 AttnRes requires densely packed rows; got strides {}, {}, {} for hidden_size {}",
                     strides.prefix, delta, strides.output, hidden);
}

void require_dense_rows(const AttnResShape& shape, const AttnResStrides& strides) {
  if (auto message = dense_rows_violation(shape, strides)) throw LayoutError(*message);
}

}  // namespace attnres
