#include "kernels/registry/layout_guard.h"

#include "kernels/registry/preconditions.h"

namespace attnres {

std::optional<std::string> dense_rows_violation(const AttnResShape& shape, const AttnResStrides& strides) {
  const RefusalRule rule = dense_rows_rule();
  if (!condition_holds(rule, shape, strides)) return std::nullopt;
  return refusal_message(rule, shape, strides);
}

void require_dense_rows(const AttnResShape& shape, const AttnResStrides& strides) {
  if (auto message = dense_rows_violation(shape, strides)) throw LayoutError(*message);
}

}  // namespace attnres
