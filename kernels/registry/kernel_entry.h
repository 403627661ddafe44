// One implementation of the AttnRes contract, as the registry holds it: the built-in kernels,
// their CPU stand-ins and every external kernel (a shared library, a torch op, a Python
// function) are entries of this one interface.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/common/kernel_errors.h"
#include "kernels/common/problem.h"
#include "kernels/registry/device.h"
#include "kernels/registry/preconditions.h"

namespace attnres {

// Where an entry's operands live.
enum class OperandPlace { host, cuda_device };

struct LaunchOptions {
  bool layout_guard = true;            // built-in native kernel: check strides before launching
  bool hard_coded_row_stride = false;  // built-in portable kernel: replay the native kernel's bug
  // Programmatic dependent launch: the kernel may start before the previous one on its stream
  // ends, and waits for it (griddepcontrol.wait) before reading. The native kernel and the C ABI's
  // enable_pdl take it; bench --pdl and run --check pdl set it.
  bool programmatic_dependent_launch = false;
};

// A call recorded into a CUDA graph, replayed with whatever its operands' buffers hold then.
class CapturedCall {
 public:
  virtual ~CapturedCall() = default;
  virtual void replay(cudaStream_t stream) = 0;
};

// Why an entry cannot take a problem: here (no device, an op that is not registered: the case
// is not-run), or anywhere (its signature cannot express the problem: the case is skipped).
struct Unsupported {
  enum class Kind { here, signature };
  Kind kind = Kind::here;
  std::string reason;
};

class KernelEntry {
 public:
  virtual ~KernelEntry() = default;
  // How reports name it: "native", "portable", "so:/path/libk.so:attnres_kernel".
  virtual std::string name() const = 0;
  virtual OperandPlace operands() const = 0;
  // Why it cannot take this problem on this device at all, if it cannot. Refusals the kernel
  // makes itself come from launch as KernelRejection.
  virtual std::optional<Unsupported> cannot_implement(const AttnResShape& shape, const AttnResStrides& strides,
                                                      const DeviceDescription& device) const = 0;
  // What it declares it may or must refuse; a case no rule covers must be computed.
  virtual KernelPreconditions preconditions() const = 0;
  // Runs on `args`, whose pointers are where operands() says. Throws KernelRejection when the
  // kernel refuses, KernelFailure or CudaError when it fails.
  virtual void launch(const AttnResArgs& args, const LaunchOptions& options, cudaStream_t stream) = 0;
  // The calls, in order, captured into one CUDA graph on `stream` (non-blocking, not capturing
  // yet), as the kernel's framework captures: by default, the stream captured (global mode)
  // around the launches. Throws GraphCaptureError when they cannot be captured, KernelRejection
  // when the kernel refuses.
  virtual std::unique_ptr<CapturedCall> capture(const std::vector<AttnResArgs>& calls, const LaunchOptions& options,
                                                cudaStream_t stream);
};

class KernelRegistry {
 public:
  void add(std::unique_ptr<KernelEntry> entry);
  // nullptr when there is no entry of that name.
  KernelEntry* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<KernelEntry>> entries_;
};

// The built-in kernels whose operands live in `place`: the GPU kernels for a CUDA device,
// their CPU stand-ins for the host; `images` are the native images that load on the (real or
// modelled) device. Each entry is one line in registry.cpp.
}  // namespace attnres
