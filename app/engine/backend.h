// Where the kernel under test runs: a CUDA device, or the CPU stand-ins (for GPU-free runs).
// A backend makes a case's tensors where it keeps them (app/engine/case_workspace.h), and the
// reference, the kernel and the checks run there.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/engine/case_workspace.h"
#include "kernels/builtin/dispatch.h"
#include "kernels/registry/kernel_entry.h"

namespace attnres {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual DeviceDescription device() const = 0;
  virtual NativeImages native_images() const = 0;
  // Where this backend keeps a case's tensors while a kernel runs, and the kernels that take
  // their operands there: the built-ins, plus any external kernel added with add_kernel.
  virtual OperandPlace operand_place() const = 0;
  const KernelRegistry& kernels() const { return kernels_; }
  void add_kernel(std::unique_ptr<KernelEntry> entry) { kernels_.add(std::move(entry)); }
  // A case's tensors, made where this backend keeps them: generated from the case's seed (the
  // same bits wherever they are generated), or `inputs` replayed. `keep_artifacts`: the
  // workspace keeps what a repro bundle needs.
  virtual std::unique_ptr<CaseWorkspace> prepare(const CaseSpec& spec, const InputSource* inputs,
                                                 bool keep_artifacts) = 0;
  // What prepare and its workspace allocate at most for a case of this layout.
  virtual CaseFootprint footprint(const AttnResShape& shape, const AttnResStrides& strides, bool keep_artifacts,
                                  bool replayed) const = 0;
  // False once a fault has left the device unusable for later cases.
  virtual bool usable() const { return true; }
  // Free device memory now; nothing for a host backend.
  virtual std::optional<std::int64_t> free_device_bytes() const = 0;

 protected:
  KernelRegistry kernels_;
};

// The build's native images, as compiled (not as loadable on any device).
std::vector<std::string> compiled_native_images();

// Parses "sm_90", "sm_100", "sm_86" ... into a device description (for --device-model).
std::optional<DeviceDescription> parse_device_model(const std::string& model);

// CPU stand-ins; `model` is the device the dispatcher is told about (default sm_90 with the
// build's native images), so dispatch, guard and fallback behave as on that device.
std::unique_ptr<Backend> make_cpu_backend(DeviceDescription model, NativeImages images);

// The CUDA device of this ordinal (as CUDA_VISIBLE_DEVICES numbers them), or nullptr (with
// `why`) when there is none. Throws std::invalid_argument for an ordinal past the last device.
std::unique_ptr<Backend> make_cuda_backend(std::string& why, int ordinal = 0);

// Native images as the dispatcher sees them for a modelled device: the compiled list.
NativeImages native_images_from_build();

}  // namespace attnres
