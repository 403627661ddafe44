// The deliberately wrong kernels of `attnres-check mutants` (kernels/mutants/mutant_kernel.h), named
// "mutant:<mutation>", and the unmutated "mutant:none" they are measured against.
#pragma once
#include <memory>
#include <vector>

#include "kernels/registry/kernel_entry.h"

namespace attnres {

std::vector<std::unique_ptr<KernelEntry>> make_mutant_entries(OperandPlace place);

}  // namespace attnres
