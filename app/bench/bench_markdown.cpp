#include <fmt/format.h>

#include "app/bench/bench_printers.h"

namespace attnres {

std::string bench_markdown(const BenchResults& results) {
  const double copy = results.copy_bandwidth;
  std::string table = fmt::format(
      "Device {} ({}), H={}, delta and output norm on, no block write; copy bandwidth {:.2f} TB/s "
      "(2 GiB device-to-device, read+written bytes). Each time is the median over CUDA-graph replays of 20 launches "
      "on rotating input sets (together > 4x L2), each replay queued behind a sleeping kernel so that the host's "
      "cost of starting it is left out. Same-bytes copy: a device-to-device copy reading "
      "half of the point's bytes and writing the other half, timed the same way (the floor for "
      "those bytes at that size).\n\n",
      results.device, results.arch, results.hidden, copy / 1e12);
  if (results.pdl)
    table +=
        "Native PDL: the same launches with programmatic dependent launch, so each one's prologue overlaps the "
        "previous one's tail.\n\n";
  const bool with_kernel = !results.kernel.empty();
  if (with_kernel)
    table += fmt::format(
        "Kernel under test (`{}`): timed the same way, its 20 launches captured as its framework captures (a "
        "Python kernel under torch.cuda.graph), where they can be captured; otherwise with CUDA events around each "
        "launch on the default stream (host overhead included); the `timed` column says which.\n\n",
        results.kernel);
  table += "| T | blocks | MB moved | same-bytes copy µs | native plan | native µs | native TB/s | native % copy |";
  table += results.pdl ? " native PDL µs |" : "";
  table += " portable µs | portable TB/s | native / portable |";
  table += with_kernel ? " kernel µs | kernel TB/s | kernel % copy | timed |" : "";
  table += " cuBLAS fp64 ref ms (end to end) | check |\n";
  table += "|---:|---:|---:|---:|---|---:|---:|---:|";
  table += results.pdl ? "---:|" : "";
  table += "---:|---:|---:|";
  table += with_kernel ? "---:|---:|---:|---|" : "";
  table += "---:|---|\n";
  std::string plan_rows;
  for (const BenchPoint& p : results.points) {
    const double portable_ms = *p.portable.median_ms;
    std::string native_cells = "n/a | n/a | n/a | n/a", pdl_cell = results.pdl ? " n/a |" : "", ratio = "n/a",
                check = "portable " + p.portable.check;
    if (const auto& native = p.native.measured) {
      const double bw = p.bytes / (*native->median_ms * 1e-3);
      native_cells = fmt::format("{} | {:.1f} | {:.2f} | {:.1f}%", p.native_plan, *native->median_ms * 1e3, bw / 1e12,
                                 100.0 * bw / copy);
      ratio = fmt::format("{:.2f}x", portable_ms / *native->median_ms);
      check = "native " + native->check + ", " + check;
      if (p.native_pdl) {
        pdl_cell = fmt::format(" {:.1f} |", *p.native_pdl->median_ms * 1e3);
        if (p.native_pdl->check != native->check) check += ", native with PDL " + p.native_pdl->check;
      }
    }
    std::string kernel_cells;
    if (p.kernel) {
      kernel_cells = " n/a | n/a | n/a | n/a |";
      if (!p.kernel->measured) {
        check += ", kernel not run: " + p.kernel->not_run;
      } else {
        const Measurement& m = *p.kernel->measured;
        check += ", kernel " + m.check;
        if (m.median_ms) {
          const double bw = p.bytes / (*m.median_ms * 1e-3);
          kernel_cells = fmt::format(" {:.1f} | {:.2f} | {:.1f}% | {} |", *m.median_ms * 1e3, bw / 1e12,
                                     100.0 * bw / copy, m.timed);
        }
      }
    }
    table +=
        fmt::format("| {} | {} | {:.1f} | {:.1f} | {} |{} {:.1f} | {:.2f} | {} |{} {:.1f} | {} |\n", p.tokens,
                    p.num_blocks, p.bytes / 1e6, p.same_bytes_copy_ms * 1e3, native_cells, pdl_cell, portable_ms * 1e3,
                    p.bytes / (portable_ms * 1e-3) / 1e12, ratio, kernel_cells, p.cublas_reference_ms, check);
    if (p.native_plans.empty()) continue;
    const auto time_cell = [](const Measurement& m) {
      return fmt::format("{:.1f}{}", *m.median_ms * 1e3, m.ok() ? "" : " INCORRECT");
    };
    std::string cells;
    for (const PlanMeasurement& timed : p.native_plans)
      cells += fmt::format(" {}{}{} |", time_cell(timed.plain), timed.plan == p.native_plan ? "*" : "",
                           timed.with_pdl ? " / " + time_cell(*timed.with_pdl) : "");
    plan_rows += fmt::format("| {} | {} |{}\n", p.tokens, p.num_blocks, cells);
  }
  if (!results.plans.empty()) {
    table += fmt::format("\nEvery plan of the native kernel, median µs{} (`*`: the plan it picks):\n\n| T | blocks |",
                         results.pdl ? ", without / with PDL" : "");
    std::string rule = "|---:|---:|";
    for (const std::string& plan : results.plans) {
      table += " " + plan + " |";
      rule += "---:|";
    }
    table += "\n" + rule + "\n" + plan_rows;
  }
  return table;
}

}  // namespace attnres
