#include "kernels/external/kernel_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace attnres {

namespace {

constexpr const char* kSharedLibraryPrefix = "so:";

struct BridgePrefix {
  const char* prefix;
  const char* bridge;
  const char* form;                                // said where the target is malformed
  bool (*well_formed)(const std::string& target);  // the target after the prefix
  const char* build_requirement;                   // what CMake must find to build the bridge
  std::array<const char*, 2> options;              // the command-line options only this bridge takes
};

bool torch_op_target(const std::string& target) {
  const std::size_t separator = target.find("::");
  return separator != std::string::npos && separator > 0 && separator + 2 < target.size();
}

bool python_target(const std::string& target) {
  const std::size_t colon = target.rfind(':');
  return colon != std::string::npos && colon > 0 && colon + 1 < target.size();
}

constexpr BridgePrefix kBridges[] = {
    {"torch-op:",
     "torch",
     "torch-op:NAMESPACE::OP",
     torch_op_target,
     "Torch (-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'))",
     {"--torch-library", nullptr}},
    {"python:",
     "python",
     "python:MODULE:FUNCTION",
     python_target,
     "Python 3 with its development files (python3-dev)",
     {"--signature", "--arg"}},
};

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// The bridge whose prefix `text` starts with, or null.
const BridgePrefix* bridge_with_prefix(const std::string& text) {
  for (const BridgePrefix& bridge : kBridges)
    if (starts_with(text, bridge.prefix)) return &bridge;
  return nullptr;
}

// The bridge of that name, or null.
const BridgePrefix* bridge_named(const std::string& name) {
  for (const BridgePrefix& bridge : kBridges)
    if (name == bridge.bridge) return &bridge;
  return nullptr;
}

}  // namespace

KernelSpec parse_kernel_spec(const std::string& text) {
  KernelSpec spec;
  if (starts_with(text, kSharedLibraryPrefix)) {
    // A last ':' after the last '/' starts the symbol.
    const std::string body = text.substr(std::char_traits<char>::length(kSharedLibraryPrefix));
    const std::size_t colon = body.rfind(':');
    const bool has_symbol =
        colon != std::string::npos && body.find('/', colon) == std::string::npos && colon + 1 < body.size();
    spec.kind = KernelSpec::Kind::shared_library;
    spec.library = has_symbol ? body.substr(0, colon) : body;
    spec.symbol = has_symbol ? body.substr(colon + 1) : "";
    if (spec.library.empty())
      throw KernelSpecError(fmt::format("--kernel {}: expected so:PATH or so:PATH:SYMBOL", text));
    return spec;
  }
  if (const BridgePrefix* bridge = bridge_with_prefix(text)) {
    spec.kind = KernelSpec::Kind::bridge;
    spec.bridge = bridge->bridge;
    spec.target = text.substr(std::char_traits<char>::length(bridge->prefix));
    if (!bridge->well_formed(spec.target))
      throw KernelSpecError(fmt::format("--kernel {}: expected {}", text, bridge->form));
    return spec;
  }
  spec.name = text;
  return spec;
}

std::string KernelSpec::to_string() const {
  switch (kind) {
    case Kind::builtin: return name;
    case Kind::shared_library: return kSharedLibraryPrefix + library + (symbol.empty() ? "" : ":" + symbol);
    case Kind::bridge:
      if (const BridgePrefix* prefix = bridge_named(bridge)) return prefix->prefix + target;
  }
  return name;
}

bool is_external_kernel(const std::string& text) {
  return starts_with(text, kSharedLibraryPrefix) || bridge_with_prefix(text) != nullptr;
}

bool KernelSpec::takes_option(const std::string& option) const {
  const BridgePrefix* prefix = kind == Kind::bridge ? bridge_named(bridge) : nullptr;
  return prefix && std::any_of(prefix->options.begin(), prefix->options.end(),
                               [&](const char* own) { return own && option == own; });
}

std::string kernel_form_taking(const std::string& option) {
  for (const BridgePrefix& bridge : kBridges)
    for (const char* own : bridge.options)
      if (own && option == own) return bridge.form;
  return "";
}

std::string bridge_build_requirement(const std::string& bridge) {
  const BridgePrefix* prefix = bridge_named(bridge);
  return prefix ? prefix->build_requirement : "its dependency";
}

}  // namespace attnres
