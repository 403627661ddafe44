#include "kernels/builtin/builtin_kernels.h"

namespace attnres {

void register_builtin_kernels(KernelRegistry& registry, OperandPlace place, const NativeImages& images) {
  if (place == OperandPlace::cuda_device) {
    registry.add(make_native_entry(images));
    registry.add(make_portable_entry());
  } else {
    registry.add(make_cpu_native_entry(images));
    registry.add(make_cpu_portable_entry());
  }
}

}  // namespace attnres
