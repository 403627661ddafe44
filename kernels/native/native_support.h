// Which problems the native kernel takes (shape, alignment); the dispatcher sends the rest to the
// portable kernel, and launch_native refuses them.
#pragma once
#include <optional>
#include <string>

#include "kernels/common/problem.h"

namespace attnres {

// Why the native kernel cannot take this problem, if it cannot. `operands_16b_aligned`: every
// operand's base address is; strides and storage offsets are checked here.
std::optional<std::string> native_unsupported_reason(const AttnResShape& shape, const AttnResStrides& strides,
                                                     bool operands_16b_aligned);

}  // namespace attnres
