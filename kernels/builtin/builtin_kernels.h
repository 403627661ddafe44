// The built-in kernels as registry entries: native and portable on a CUDA device, their CPU
// stand-ins on the host, each chosen per case by the dispatcher (kernels/builtin/dispatch.h).
#pragma once
#include <memory>

#include "kernels/registry/kernel_entry.h"

namespace attnres {

void register_builtin_kernels(KernelRegistry& registry, OperandPlace place, const NativeImages& images);

// The entries of each built-in kernel (each in its own file).
std::unique_ptr<KernelEntry> make_native_entry(const NativeImages& images);
std::unique_ptr<KernelEntry> make_portable_entry();
std::unique_ptr<KernelEntry> make_cpu_native_entry(const NativeImages& images);
std::unique_ptr<KernelEntry> make_cpu_portable_entry();

}  // namespace attnres
