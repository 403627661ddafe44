#include "kernels/registry/device.h"

#include <fmt/format.h>

namespace attnres {

const char* to_string(KernelChoice choice) {
  switch (choice) {
    case KernelChoice::automatic: return "auto";
    case KernelChoice::native: return "native";
    case KernelChoice::portable: return "portable";
  }
  return "?";
}

const char* to_string(KernelPath path) {
  switch (path) {
    case KernelPath::none: return "none";
    case KernelPath::native: return "native";
    case KernelPath::portable: return "portable";
  }
  return "?";
}

std::string device_arch(const DeviceDescription& device) {
  if (!device.present) return "none";
  return fmt::format("sm_{}{}", device.cc_major, device.cc_minor);
}

std::string describe_device(const DeviceDescription& device) {
  return device.present ? fmt::format("{} ({})", device.name, device_arch(device)) : "none";
}

}  // namespace attnres
