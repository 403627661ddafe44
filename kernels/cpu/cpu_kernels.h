// CPU stand-ins for the two GPU kernels, float32 like them: they let the whole pipeline
// (dispatch, guard, canaries, reports, repros, shrinking) run and be tested without a GPU.
#pragma once
#include "kernels/common/problem.h"

namespace attnres {

// Honours every row stride, like the portable kernel.
void cpu_portable_kernel(const AttnResArgs& args);

// Like the native kernel: rows of prefix, delta and output are taken as exactly H apart.
// With the guard it refuses other strides (LayoutError); without it, it shows the bug.
void cpu_native_kernel(const AttnResArgs& args, bool layout_guard);

}  // namespace attnres
