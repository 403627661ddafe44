// Kernels from outside the tool, as registry entries: a shared library behind the C ABI
// (include/attnres/kernel_abi.h), a torch custom op and a Python function (through the bridge
// libraries in kernels/external/*/, loaded only when asked for).
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/external/kernel_spec.h"
#include "kernels/registry/kernel_entry.h"

namespace attnres {

// A kernel that cannot be used at all: not loadable, a symbol missing, another ABI version, a
// bridge this build lacks.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ExternalKernelOptions {
  std::string torch_library;                // torch-op: the library that registers the op
  std::string signature = "auto";           // python: auto | vllm | flashinfer, then ;CONTRACT=PARAMETER each
  OperandPlace place = OperandPlace::host;  // where the backend keeps its tensors (bridges follow it)
  // What the kernel declares it refuses (--profile); by default nothing: every case must be computed.
  KernelPreconditions preconditions{"no --profile: every case must be computed", {}};
};

// Loads the external kernel `spec` names (spec.external()): a shared library's SYMBOL (default
// attnres_kernel) with its info function SYMBOL_info, or a bridge's target. Throws PluginError.
std::unique_ptr<KernelEntry> load_external_kernel(const KernelSpec& spec, const ExternalKernelOptions& options);

}  // namespace attnres
