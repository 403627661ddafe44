// The JSON report (schema attnres-check/report, docs/report.md) and reading it back (merge).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/casefile/case_spec.h"
#include "app/engine/runner.h"
#include "app/report/run_summary.h"

namespace attnres {

constexpr int kReportSchemaVersion = 1;

nlohmann::json report_json(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                           const RunContext& context);
// A report as report_json wrote it, read back (for merge).
struct LoadedReport {
  std::vector<CaseResult> results;
  std::vector<CaseLoadError> load_errors;
  RunContext context;
};
// The inverse of report_json. Throws JsonInputError naming the JSON pointer of what is wrong.
LoadedReport report_from_json(const nlohmann::json& report);

}  // namespace attnres
