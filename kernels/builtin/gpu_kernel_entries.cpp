// The built-in GPU kernels as registry entries. Which device and image each needs is the
// dispatcher's knowledge (kernels/builtin/dispatch.cpp), so cannot_implement asks it.
#include "kernels/builtin/builtin_kernels.h"
#include "kernels/builtin/dispatch.h"
#include "kernels/native/launch_native.h"
#include "kernels/portable/launch_portable.h"

namespace attnres {

namespace {

class NativeEntry : public KernelEntry {
 public:
  explicit NativeEntry(NativeImages images) : images_(images) {}
  std::string name() const override { return "native"; }
  OperandPlace operands() const override { return OperandPlace::cuda_device; }
  std::optional<Unsupported> cannot_implement(const AttnResShape& shape, const AttnResStrides& strides,
                                              const DeviceDescription& device) const override {
    if (auto why = native_unavailable_reason(device, images_, shape, strides))
      return Unsupported{Unsupported::Kind::here, *why};
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return native_preconditions(); }
  void launch(const AttnResArgs& args, const LaunchOptions& options, cudaStream_t stream) override {
    NativeLaunchOptions native;
    native.layout_guard = options.layout_guard;
    native.programmatic_dependent_launch = options.programmatic_dependent_launch;
    launch_native(args, native, stream);
  }

 private:
  NativeImages images_;
};

class PortableEntry : public KernelEntry {
 public:
  std::string name() const override { return "portable"; }
  OperandPlace operands() const override { return OperandPlace::cuda_device; }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription& device) const override {
    if (!device.present) return Unsupported{Unsupported::Kind::here, "no CUDA device"};
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return portable_preconditions(); }
  void launch(const AttnResArgs& args, const LaunchOptions& options, cudaStream_t stream) override {
    launch_portable(args, stream, options.hard_coded_row_stride);
  }
};

}  // namespace

std::unique_ptr<KernelEntry> make_native_entry(const NativeImages& images) {
  return std::make_unique<NativeEntry>(images);
}
std::unique_ptr<KernelEntry> make_portable_entry() { return std::make_unique<PortableEntry>(); }

}  // namespace attnres
