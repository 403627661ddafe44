// Printers: turn results into the human table, the JSON report and JUnit XML. They only
// format; main decides where the text goes.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/case_spec.h"
#include "app/runner.h"

namespace attnres {

constexpr int kReportSchemaVersion = 1;

struct RunContext {
  std::string backend;
  std::string device;
  std::vector<std::string> native_images;
  std::string command_line;
  std::string kernel;  // the kernel under test (--kernel), or how each case's kernel was chosen
};

struct RunSummary {
  int total = 0;
  int met = 0;
  int load_errors = 0;
  int by_disposition[kDispositionCount] = {};
  bool all_met() const { return load_errors == 0 && met == total; }
};

RunSummary summarize(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors);

// `timings`: a line of phase times under each case (run --timings).
std::string format_table(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                         const RunContext& context, bool color, bool timings = false);
nlohmann::json report_json(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                           const RunContext& context);
std::string junit_xml(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      const RunContext& context);

}  // namespace attnres
