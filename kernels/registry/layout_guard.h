// The native kernel's entry precondition, shared by the dispatcher (to predict and report a
// rejection) and the native launcher (to refuse before launching).
#pragma once
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/common/kernel_errors.h"
#include "kernels/common/problem.h"

namespace attnres {

// The native kernel's refusal of a layout it cannot take.
class LayoutError : public KernelRejection {
 public:
  using KernelRejection::KernelRejection;
};

// The exact message of the Kimi K3 op when prefix, delta or output has stride(0) != H
// (dense_rows_rule, kernels/registry/preconditions.h); empty when every row is densely packed.
std::optional<std::string> dense_rows_violation(const AttnResShape& shape, const AttnResStrides& strides);

// Throws LayoutError with that message.
void require_dense_rows(const AttnResShape& shape, const AttnResStrides& strides);

}  // namespace attnres
