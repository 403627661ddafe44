// The CPU stand-ins as registry entries: they behave as their GPU kernels would on the
// modelled device.
#include "kernels/builtin/builtin_kernels.h"
#include "kernels/builtin/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"

namespace attnres {

namespace {

class CpuNativeEntry : public KernelEntry {
 public:
  explicit CpuNativeEntry(NativeImages images) : images_(images) {}
  std::string name() const override { return "native"; }
  OperandPlace operands() const override { return OperandPlace::host; }
  std::optional<Unsupported> cannot_implement(const AttnResShape& shape, const AttnResStrides& strides,
                                              const DeviceDescription& device) const override {
    if (auto why = native_unavailable_reason(device, images_, shape, strides))
      return Unsupported{Unsupported::Kind::here, *why};
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return native_preconditions(); }
  void launch(const AttnResArgs& args, const LaunchOptions& options, cudaStream_t) override {
    cpu_native_kernel(args, options.layout_guard);
  }

 private:
  NativeImages images_;
};

class CpuPortableEntry : public KernelEntry {
 public:
  std::string name() const override { return "portable"; }
  OperandPlace operands() const override { return OperandPlace::host; }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription& device) const override {
    if (!device.present) return Unsupported{Unsupported::Kind::here, "no CUDA device"};
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return portable_preconditions(); }
  void launch(const AttnResArgs& args, const LaunchOptions& options, cudaStream_t) override {
    if (options.hard_coded_row_stride)
      cpu_native_kernel(args, false);
    else
      cpu_portable_kernel(args);
  }
};

}  // namespace

std::unique_ptr<KernelEntry> make_cpu_native_entry(const NativeImages& images) {
  return std::make_unique<CpuNativeEntry>(images);
}
std::unique_ptr<KernelEntry> make_cpu_portable_entry() { return std::make_unique<CpuPortableEntry>(); }

}  // namespace attnres
