#include "reference/cpu_reference.h"

#include "kernels/common/parallel.h"

namespace attnres {

std::vector<double> cpu_reference(const AttnResArgs& args) {
  std::vector<double> out(std::size_t(args.shape.tokens * args.shape.hidden));
  parallel_for(args.shape.tokens, [&](std::int64_t begin, std::int64_t end) {
    attnres_forward<double>(
        args, [&](std::int64_t t, std::int64_t h, double v) { out[t * args.shape.hidden + h] = v; }, begin, end);
  });
  return out;
}

}  // namespace attnres
