// How much memory a case may use: every case's host and device bytes are computed before
// anything is allocated, and a case over the budget is not run.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace attnres {

struct MemoryBudget {
  // Unset: the memory available when the case starts (MemAvailable; the device's free memory).
  std::optional<std::int64_t> host_bytes;
  std::optional<std::int64_t> device_bytes;
};

// "1073741824", "512M", "8G", "1T", "64KiB", "8GB" (powers of 1024); nothing when malformed.
std::optional<std::int64_t> parse_byte_size(const std::string& text);

// MemAvailable from /proc/meminfo, or nothing where it cannot be read.
std::optional<std::int64_t> available_host_memory();

// "12884901888 bytes (12.0 GiB)"
std::string describe_bytes(std::int64_t bytes);

}  // namespace attnres
