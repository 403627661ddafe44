// What --kernel names, parsed once: a built-in kernel by name, a shared library behind the C ABI
// (so:PATH[:SYMBOL]), or a kernel reached through a bridge library (torch-op:NAMESPACE::OP,
// python:MODULE:FUNCTION). Adding a bridge is its folder (kernels/external/<bridge>/) and one row
// of the bridge table in kernel_spec.cpp.
#pragma once
#include <stdexcept>
#include <string>

namespace attnres {

// A --kernel text that names an external kernel but does not say which ("so:", "python:x").
class KernelSpecError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct KernelSpec {
  enum class Kind { builtin, shared_library, bridge };
  Kind kind = Kind::builtin;
  std::string name;     // builtin: the registry name
  std::string library;  // shared_library: the path
  std::string symbol;   // shared_library: the entry's symbol, "" for attnres_kernel
  std::string bridge;   // bridge: its name ("torch", "python"): the library libattnres_<bridge>_bridge.so
  std::string target;   // bridge: what it calls ("NS::OP[.OVERLOAD]", "MODULE:FUNCTION")

  bool external() const { return kind != Kind::builtin; }
  // Whether `option` ("--torch-library", "--signature", "--arg") is an option of this kernel's bridge.
  bool takes_option(const std::string& option) const;
  std::string to_string() const;  // the --kernel text; parse_kernel_spec(s.to_string()) gives s
};

// Throws KernelSpecError, saying the expected form, for a malformed external kernel.
KernelSpec parse_kernel_spec(const std::string& text);

// Whether `text` starts with an external kernel's prefix (so:, torch-op:, python:).
bool is_external_kernel(const std::string& text);

// The --kernel form of the bridge whose own option is `option` ("torch-op:NAMESPACE::OP" for
// --torch-library), for the error that says where the option goes.
std::string kernel_form_taking(const std::string& option);

// What a build needs for `bridge` to exist, for the error that says this build has none.
std::string bridge_build_requirement(const std::string& bridge);

}  // namespace attnres
