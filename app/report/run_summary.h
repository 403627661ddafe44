// What a run was and how it ended, as the printers (app/report/report.h) take it: where and how it ran,
// and the count of each disposition.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/engine/runner.h"

namespace attnres {

struct RunContext {
  std::string backend;
  std::string device;
  std::vector<std::string> native_images;
  std::string command_line;
  std::string kernel;                   // the kernel under test (--kernel), or how each case's kernel was chosen
  std::vector<std::string> case_roots;  // the paths given on the command line (JUnit class names are relative to them)
  std::string timestamp;                // when the run started, ISO 8601 UTC
  std::string hostname;
  std::string shard;  // "k/n" of run --shard; empty: every selected case
};

// Shard k of n, from the "k/n" of run --shard (or a report's "shard"): both numbers whole, 1 <= k <= n.
struct Shard {
  int k = 0, n = 0;
};
std::optional<Shard> parse_shard(std::string_view text);

// When and where a run happens: the current UTC time (ISO 8601) and this host's name.
std::string utc_timestamp();
std::string host_name();

struct RunSummary {
  int total = 0;
  int met = 0;
  int load_errors = 0;
  int by_disposition[kDispositionCount] = {};
  bool all_met() const { return load_errors == 0 && met == total; }
};

RunSummary summarize(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors);

}  // namespace attnres
