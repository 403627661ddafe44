// Where the kernel under test runs: a CUDA device, or the CPU stand-ins (for GPU-free runs).
// A backend takes host tensors in and leaves the results in them, so every check after a
// run is the same host code whichever backend ran.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/host_tensors.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_entry.h"

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
  // Runs `kernel` over the tensors in place (copying them to the device and back where they
  // live there). Throws KernelRejection when the kernel refuses, KernelFailure or CudaError
  // when it fails.
  virtual void execute(KernelEntry& kernel, const LaunchOptions& options, CaseTensors& tensors) = 0;
  // A case's generated inputs, canaries and poisoned output on the host (the same bits
  // wherever they are generated).
  virtual CaseTensors make_inputs(const CaseSpec& spec) { return make_case_tensors(spec); }
  // The float64 reference computed on the device, where the backend has one.
  virtual std::optional<std::vector<double>> device_reference(const CaseTensors& inputs) = 0;
  // False once a fault has left the device unusable for later cases.
  virtual bool usable() const { return true; }
  // Device memory a case of this layout needs at most (0 for a host backend), with or without
  // the device reference; nothing when the size overflows.
  virtual std::optional<std::int64_t> device_bytes(const AttnResShape& shape, const AttnResStrides& strides,
                                                   bool device_reference) const = 0;
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
