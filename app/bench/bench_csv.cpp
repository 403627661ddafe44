#include <fmt/format.h>

#include "app/bench/bench_printers.h"
#include "app/report/csv.h"

namespace attnres {

std::string bench_csv(const BenchResults& results) {
  std::string csv =
      csv_row({"tokens", "num_blocks", "hidden", "bytes", "copy_bandwidth", "same_bytes_copy_us", "native_plan",
               "native_us", "native_bytes_per_s", "native_pdl_us", "portable_us", "portable_bytes_per_s", "kernel",
               "kernel_us", "kernel_bytes_per_s", "cublas_reference_ms"});
  // Median microseconds and bytes per second, empty where the kernel was not timed.
  const auto cells = [](const Measurement* m, double bytes) -> std::vector<std::string> {
    if (!m || !m->median_ms) return {"", ""};
    return {fmt::format("{}", *m->median_ms * 1e3), fmt::format("{}", bytes / (*m->median_ms * 1e-3))};
  };
  for (const BenchPoint& p : results.points) {
    std::vector<std::string> row{std::to_string(p.tokens),
                                 std::to_string(p.num_blocks),
                                 std::to_string(p.hidden),
                                 fmt::format("{}", p.bytes),
                                 fmt::format("{}", results.copy_bandwidth),
                                 fmt::format("{}", p.same_bytes_copy_ms * 1e3),
                                 p.native_plan};
    for (std::string& cell : cells(p.native.measured ? &*p.native.measured : nullptr, p.bytes))
      row.push_back(std::move(cell));
    row.push_back(p.native_pdl ? fmt::format("{}", *p.native_pdl->median_ms * 1e3) : "");
    for (std::string& cell : cells(&p.portable, p.bytes)) row.push_back(std::move(cell));
    row.push_back(p.kernel ? results.kernel : "");
    for (std::string& cell : cells(p.kernel && p.kernel->measured ? &*p.kernel->measured : nullptr, p.bytes))
      row.push_back(std::move(cell));
    row.push_back(fmt::format("{}", p.cublas_reference_ms));
    csv += csv_row(row);
  }
  return csv;
}

}  // namespace attnres
