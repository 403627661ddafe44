// The dispatcher: a pure function of the device, the native images the build can load on it,
// and the problem; it returns the chosen path and why, so every decision can be reported.
#pragma once
#include <optional>
#include <string>

#include "kernels/common/problem.h"
#include "kernels/registry/device.h"

namespace attnres {

struct DispatchRequest {
  AttnResShape shape;
  AttnResStrides strides;
  bool operands_16b_aligned = true;  // base addresses; strides are checked here
  KernelChoice choice = KernelChoice::automatic;
  bool layout_guard = true;
};

struct DispatchDecision {
  KernelPath path = KernelPath::none;
  std::string reason;
  std::optional<std::string> rejection;  // set: the native entry refuses with this message
  // Unguarded run where no native kernel can: the portable kernel replays the native
  // kernel's hard-coded row stride H, so the bug still shows.
  bool hard_coded_row_stride = false;
};

DispatchDecision dispatch(const DeviceDescription& device, const NativeImages& images, const DispatchRequest& request);

// Why the native kernel cannot run this problem on this device at all (device family, image,
// shape, alignment), if it cannot; its stride guard is not consulted.
std::optional<std::string> native_unavailable_reason(const DeviceDescription& device, const NativeImages& images,
                                                     const AttnResShape& shape, const AttnResStrides& strides);

}  // namespace attnres
