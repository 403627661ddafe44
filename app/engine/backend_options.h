// Which backend, device and kernel run the cases: the engine's options, set by the command line
// and recorded in reports and repro bundles.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace attnres {

struct BackendOptions {
  std::string backend = "auto";              // auto | cuda | cpu
  std::string device_model = "sm_90";        // what the cpu backend tells the dispatcher
  std::optional<std::string> native_images;  // cpu backend: override the build's list ("none", "sm_90a,sm_100a")
  // Every case on this kernel: "native", "portable", "so:PATH[:SYMBOL]", "torch-op:NS::OP" or
  // "python:MODULE:FUNCTION"; empty: each case's own.
  std::string kernel;
  std::string torch_library;           // torch-op: the library that registers the op (dlopen'ed first)
  std::string signature = "auto";      // python: how the function is called (auto | vllm | flashinfer)
  std::vector<std::string> arguments;  // python, signature auto: CONTRACT=PARAMETER, each --arg
  std::string profile;           // external kernel: a preset or a profile file (kernels/external/kernel_profile.h)
  int device = 0;                // CUDA ordinal
  double timeout_seconds = 900;  // a case in a worker process with no answer by then is an error; 0: no limit
};

// The signature text the Python bridge binds with: "auto;prefix=prefix_sum;..." (bridge_abi.h).
inline std::string bridge_signature(const BackendOptions& options) {
  std::string text = options.signature;
  for (const std::string& argument : options.arguments) text += ";" + argument;
  return text;
}

}  // namespace attnres
