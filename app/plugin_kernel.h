// Kernels from outside the tool, as registry entries: a shared library behind the C ABI
// (include/attnres/kernel_abi.h), a torch custom op and a Python function (through the bridge
// libraries in kernels/bridges/, loaded only when asked for).
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/kernel_entry.h"

namespace attnres {

// A kernel that cannot be used at all: not loadable, a symbol missing, another ABI version, a
// bridge this build lacks.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "so:...", "torch-op:..." or "python:...": a kernel from outside the tool.
bool is_external_kernel(const std::string& spec);

struct ExternalKernelOptions {
  std::string torch_library;      // torch-op: the library that registers the op
  std::string signature = "vllm";  // python: vllm | flashinfer
  OperandPlace place = OperandPlace::host;  // where the backend keeps its tensors (bridges follow it)
  // What the kernel declares it refuses (--profile); by default nothing: every case must be computed.
  KernelPreconditions preconditions{"no --profile: every case must be computed", {}};
};

// "so:PATH[:SYMBOL]" taken apart (a last ':' after the last '/' starts the symbol).
struct SharedLibrarySpec {
  std::string path;
  std::string symbol;  // empty where the spec names none (attnres_kernel)
};
SharedLibrarySpec split_shared_library_spec(const std::string& spec);

// Loads the kernel `spec` names: "so:PATH[:SYMBOL]" (default symbol attnres_kernel, its info
// function SYMBOL_info), "torch-op:NAMESPACE::OP[.OVERLOAD]" or "python:MODULE:FUNCTION".
// Throws PluginError.
std::unique_ptr<KernelEntry> load_external_kernel(const std::string& spec, const ExternalKernelOptions& options);

}  // namespace attnres
