#include "kernels/builtin/dispatch.h"

#include <fmt/format.h>

#include "kernels/native/native_support.h"
#include "kernels/registry/layout_guard.h"

namespace attnres {

namespace {

// Which native image the device's family runs, if the native kernel targets that family at all.
std::optional<bool> native_image_for_family(const DeviceDescription& device, const NativeImages& images,
                                            std::string& family) {
  if (device.cc_major == 9 && device.cc_minor == 0) {
    family = "sm_90a";
    return images.sm90a;
  }
  if (device.cc_major == 10) {
    family = "sm_100a";
    return images.sm100a;
  }
  return std::nullopt;
}

}  // namespace

DispatchDecision dispatch(const DeviceDescription& device, const NativeImages& images, const DispatchRequest& request) {
  DispatchDecision decision;
  if (!device.present) {
    decision.reason = "no CUDA device";
    return decision;
  }
  const std::string arch = device_arch(device);
  const bool forced_native = request.choice == KernelChoice::native;
  // Where the native kernel is out, a forced-native case is not run; an automatic one falls back.
  auto without_native = [&](const std::string& why) {
    if (forced_native) {
      decision.path = KernelPath::none;
      decision.reason = "case requires the native kernel, but " + why;
    } else {
      decision.path = KernelPath::portable;
      decision.reason = why;
      if (!request.layout_guard) {
        decision.hard_coded_row_stride = true;
        decision.reason +=
            "; layout guard disabled: the portable kernel replays the native kernel's hard-coded row stride H";
      }
    }
    return decision;
  };

  if (request.choice == KernelChoice::portable) {
    decision.path = KernelPath::portable;
    decision.reason = "case requests the portable kernel";
    return decision;
  }
  std::string family;
  const std::optional<bool> image = native_image_for_family(device, images, family);
  if (!image)
    return without_native(
        fmt::format("{} ({}) has no native kernel (native targets sm_90 and sm_100 families)", arch, device.name));
  if (!*image)
    return without_native(
        fmt::format("this build holds no {} image of the native kernel for this {} device", family, arch));
  if (auto unsupported = native_unsupported_reason(request.shape, request.strides, request.operands_16b_aligned))
    return without_native(*unsupported);

  decision.path = KernelPath::native;
  decision.reason = fmt::format("{} device and the build holds its {} native image", arch, family);
  if (!request.layout_guard) {
    decision.reason += "; layout guard disabled (--no-layout-guard): strides are not checked";
    return decision;
  }
  decision.rejection = dense_rows_violation(request.shape, request.strides);
  if (decision.rejection) decision.reason += "; layout guard rejects the strides";
  return decision;
}

std::optional<std::string> native_unavailable_reason(const DeviceDescription& device, const NativeImages& images,
                                                     const AttnResShape& shape, const AttnResStrides& strides) {
  DispatchRequest request;
  request.shape = shape;
  request.strides = strides;
  request.choice = KernelChoice::native;
  const DispatchDecision decision = dispatch(device, images, request);
  if (decision.path == KernelPath::none) return decision.reason;
  return std::nullopt;
}

}  // namespace attnres
