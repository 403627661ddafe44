#include "app/engine/memory_budget.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kernels/common/checked_size.h"

namespace attnres {

std::optional<std::int64_t> parse_byte_size(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  const std::int64_t count = std::stoll(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  std::int64_t scale = 1;
  if (!unit.empty() && unit != "B") {
    const std::string prefixes = "KMGT";
    const std::size_t power = prefixes.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (power == std::string::npos || !(rest.empty() || rest == "B" || rest == "iB")) return std::nullopt;
    scale = std::int64_t(1) << (10 * (power + 1));
  }
  return (CheckedSize(count) * scale).get();
}

std::optional<std::int64_t> available_host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string key;
    std::int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return (CheckedSize(kib) * 1024).get();
  }
  return std::nullopt;
}

std::string describe_bytes(std::int64_t bytes) {
  return fmt::format("{} bytes ({:.1f} GiB)", bytes, double(bytes) / double(1ll << 30));
}

}  // namespace attnres
