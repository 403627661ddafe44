// The native split variant's bf16 conversion run over every float on the device (tests only).
#pragma once
#include <cstdint>

namespace attnres::testing {

struct PackProbeResult {
  std::uint64_t mismatches = 0;   // inputs whose packed bf16 differs from float_to_bf16 (a non-NaN for a NaN)
  std::uint32_t first_input = 0;  // the smallest such input's bits, where there is one
};

// Converts all 2^32 float bit patterns with native_device::convert_pair, each once in the low and once
// in the high half, and compares them with the host's float_to_bf16.
PackProbeResult probe_native_pack();

}  // namespace attnres::testing
