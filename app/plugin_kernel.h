// Out-of-tree kernels behind the C ABI (include/attnres/kernel_abi.h): `so:PATH[:SYMBOL]`.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/kernel_entry.h"

namespace attnres {

// A plugin that cannot be used at all: not loadable, a symbol missing, another ABI version.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loads the library named by `spec` ("so:PATH" or "so:PATH:SYMBOL"; default symbol
// attnres_kernel, its info function SYMBOL_info) and checks its ABI version. Throws PluginError.
std::unique_ptr<KernelEntry> load_shared_library_kernel(const std::string& spec);

}  // namespace attnres
