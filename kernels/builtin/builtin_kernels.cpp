// The built-in kernels as registry entries: the GPU kernels, and their CPU stand-ins, which behave as
// the GPU kernels would on the modelled device. Which device and image each needs is the
// dispatcher's knowledge (kernels/builtin/dispatch.cpp), so cannot_implement asks it.
#include "kernels/builtin/builtin_kernels.h"

#include <functional>

#include "kernels/builtin/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/native/launch_native.h"
#include "kernels/portable/launch_portable.h"

namespace attnres {

namespace {

using Launch = std::function<void(const AttnResArgs&, const LaunchOptions&, cudaStream_t)>;

class NativeEntry : public KernelEntry {
 public:
  NativeEntry(OperandPlace place, NativeImages images, Launch launch)
      : place_(place), images_(images), launch_(std::move(launch)) {}
  std::string name() const override { return "native"; }
  OperandPlace operands() const override { return place_; }
  std::optional<Unsupported> cannot_implement(const AttnResShape& shape, const AttnResStrides& strides,
                                              const DeviceDescription& device) const override {
    if (auto why = native_unavailable_reason(device, images_, shape, strides))
      return Unsupported{Unsupported::Kind::here, *why};
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return native_preconditions(); }
  void launch(const AttnResArgs& args, const LaunchOptions& options, cudaStream_t stream) override {
    launch_(args, options, stream);
  }

 private:
  OperandPlace place_;
  NativeImages images_;
  Launch launch_;
};

class PortableEntry : public KernelEntry {
 public:
  PortableEntry(OperandPlace place, Launch launch) : place_(place), launch_(std::move(launch)) {}
  std::string name() const override { return "portable"; }
  OperandPlace operands() const override { return place_; }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription& device) const override {
    if (!device.present) return Unsupported{Unsupported::Kind::here, "no CUDA device"};
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return portable_preconditions(); }
  void launch(const AttnResArgs& args, const LaunchOptions& options, cudaStream_t stream) override {
    launch_(args, options, stream);
  }

 private:
  OperandPlace place_;
  Launch launch_;
};

}  // namespace

std::unique_ptr<KernelEntry> make_native_entry(const NativeImages& images) {
  return std::make_unique<NativeEntry>(OperandPlace::cuda_device, images,
                                       [](const AttnResArgs& args, const LaunchOptions& options, cudaStream_t stream) {
                                         NativeLaunchOptions native;
                                         native.layout_guard = options.layout_guard;
                                         native.programmatic_dependent_launch = options.programmatic_dependent_launch;
                                         launch_native(args, native, stream);
                                       });
}

std::unique_ptr<KernelEntry> make_portable_entry() {
  return std::make_unique<PortableEntry>(
      OperandPlace::cuda_device, [](const AttnResArgs& args, const LaunchOptions& options, cudaStream_t stream) {
        launch_portable(args, stream, options.hard_coded_row_stride);
      });
}

std::unique_ptr<KernelEntry> make_cpu_native_entry(const NativeImages& images) {
  return std::make_unique<NativeEntry>(OperandPlace::host, images,
                                       [](const AttnResArgs& args, const LaunchOptions& options, cudaStream_t) {
                                         cpu_native_kernel(args, options.layout_guard);
                                       });
}

std::unique_ptr<KernelEntry> make_cpu_portable_entry() {
  return std::make_unique<PortableEntry>(OperandPlace::host,
                                         [](const AttnResArgs& args, const LaunchOptions& options, cudaStream_t) {
                                           if (options.hard_coded_row_stride)
                                             cpu_native_kernel(args, false);
                                           else
                                             cpu_portable_kernel(args);
                                         });
}

void register_builtin_kernels(KernelRegistry& registry, OperandPlace place, const NativeImages& images) {
  if (place == OperandPlace::cuda_device) {
    registry.add(make_native_entry(images));
    registry.add(make_portable_entry());
  } else {
    registry.add(make_cpu_native_entry(images));
    registry.add(make_cpu_portable_entry());
  }
}

}  // namespace attnres
