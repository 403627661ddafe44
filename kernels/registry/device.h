// What the registry's entries are asked about: the device a case runs on, the native images the
// build can load on it, and which built-in kernel a case or the command line picks.
#pragma once
#include <string>

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

// "sm_90", "sm_100" ...; "none" without a device.
std::string device_arch(const DeviceDescription& device);
// How reports name a device: "NVIDIA H200 (sm_90)", or "none".
std::string describe_device(const DeviceDescription& device);

}  // namespace attnres
