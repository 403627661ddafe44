// One report format: the option naming its file, its help, and its printer (report.h lists them).
#pragma once
#include <string>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/engine/runner.h"
#include "app/report/run_summary.h"

namespace attnres {

struct ReportFormat {
  const char* option;     // the command-line option naming its file, "--junit"
  const char* help;       // what that option's help says
  bool needs_error_maps;  // the run keeps each result's error map where this format is written
  std::string (*print)(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                       const RunContext& context);
};

}  // namespace attnres
