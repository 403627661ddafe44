#include "kernels/cpu/cpu_kernels.h"

#include "kernels/common/parallel.h"
#include "kernels/registry/layout_guard.h"
#include "reference/cpu_reference.h"

namespace attnres {

void cpu_portable_kernel(const AttnResArgs& args) {
  parallel_for(args.shape.tokens, [&](std::int64_t begin, std::int64_t end) {
    attnres_forward<float>(
        args,
        [&](std::int64_t t, std::int64_t h, float v) { args.output[t * args.strides.output + h] = float_to_bf16(v); },
        begin, end);
  });
}

void cpu_native_kernel(const AttnResArgs& args, bool layout_guard) {
  if (layout_guard) require_dense_rows(args.shape, args.strides);
  AttnResArgs hard_coded = args;
  hard_coded.strides.prefix = hard_coded.strides.delta = hard_coded.strides.output = args.shape.hidden;
  cpu_portable_kernel(hard_coded);
}

}  // namespace attnres
