#include "app/report/report.h"

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/report/csv.h"

namespace attnres {

using nlohmann::json;

std::string results_csv(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors) {
  std::string csv = csv_row(
      {"name",      "disposition",       "meets_expectation", "kernel",           "backend",    "device",  "seed",
       "reference", "max_abs_error",     "worst_t",           "worst_h",          "mismatched", "total",   "nan_count",
       "inf_count", "prefix_mismatches", "blocks_mismatches", "damaged_elements", "checks",     "seconds", "detail"});
  for (const CaseResult& r : results) {
    std::vector<std::string> row{
        r.name,   to_string(r.disposition), meets_expectation(r.disposition) ? "true" : "false", r.kernel, r.backend,
        r.device, std::to_string(r.seed)};
    if (const auto& c = r.comparison) {
      for (const std::string& cell :
           {c->reference, fmt::format("{}", c->max_abs_error), std::to_string(c->worst_token),
            std::to_string(c->worst_column), std::to_string(c->mismatched), std::to_string(c->total),
            std::to_string(c->nan_count), std::to_string(c->inf_count), std::to_string(c->prefix_mismatches),
            std::to_string(c->blocks_mismatches)})
        row.push_back(cell);
    } else {
      row.insert(row.end(), 10, "");
    }
    std::int64_t damaged = 0;
    for (const Violation& v : r.violations) damaged += v.count;
    row.push_back(std::to_string(damaged));
    std::string checks;  // "determinism=passed;garbage=failed"
    for (const PropertyResult& p : r.properties)
      checks += fmt::format("{}{}={}", checks.empty() ? "" : ";", to_string(p.property), to_string(p.disposition));
    row.push_back(checks);
    row.push_back(fmt::format("{:.6f}", r.seconds));
    row.push_back(r.detail);
    csv += csv_row(row);
  }
  // A bad case-file entry is a row too, as in the JSON and JUnit reports: named by where it is.
  for (const CaseLoadError& e : load_errors) {
    std::vector<std::string> row{e.pointer.empty() ? e.file : e.file + "#" + e.pointer, "bad-case", "false"};
    row.insert(row.end(), 17, "");
    row.push_back(e.message);
    csv += csv_row(row);
  }
  return csv;
}

namespace {

std::string csv_report_text(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                            const RunContext&) {
  return results_csv(results, load_errors);
}

}  // namespace

extern const ReportFormat kCsvReport{"--csv", "write one CSV row per case here", false, csv_report_text};

}  // namespace attnres
