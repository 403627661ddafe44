// The dispatcher: a pure function of the device, the native images the build can load on it,
// and the problem; it returns the chosen path and why, so every decision can be reported.
#pragma once
#include <optional>
#include <string>

#include "kernels/problem.h"

namespace attnres {

struct DeviceDescription {
  bool present = false;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
};

// Whether the build holds a native image that loads on each family. For a real device the
// entry for its own family comes from querying the kernel's attributes at run time.
struct NativeImages {
  bool sm90a = false;
  bool sm100a = false;
};

enum class KernelChoice { automatic, native, portable };
enum class KernelPath { none, native, portable };

const char* to_string(KernelChoice choice);
const char* to_string(KernelPath path);

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

DispatchDecision dispatch(const DeviceDescription& device, const NativeImages& images,
                          const DispatchRequest& request);

// Why the native kernel cannot take this problem (shape or alignment), if it cannot.
std::optional<std::string> native_unsupported_reason(const DispatchRequest& request);

// Why the native kernel cannot run this problem on this device at all (device family, image,
// shape, alignment), if it cannot; its stride guard is not consulted.
std::optional<std::string> native_unavailable_reason(const DeviceDescription& device, const NativeImages& images,
                                                     const AttnResShape& shape, const AttnResStrides& strides);

// "sm_90", "sm_100" ...; "none" without a device.
std::string device_arch(const DeviceDescription& device);
// How reports name a device: "NVIDIA H200 (sm_90)", or "none".
std::string describe_device(const DeviceDescription& device);

}  // namespace attnres
