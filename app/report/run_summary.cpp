#include "app/report/run_summary.h"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <ctime>

namespace attnres {

std::optional<Shard> parse_shard(std::string_view text) {
  Shard shard;
  const char* const end = text.data() + text.size();
  const auto [slash, k_error] = std::from_chars(text.data(), end, shard.k);
  if (k_error != std::errc() || slash == end || *slash != '/') return std::nullopt;
  const auto [stop, n_error] = std::from_chars(slash + 1, end, shard.n);
  if (n_error != std::errc() || stop != end || shard.n < 1 || shard.k < 1 || shard.k > shard.n) return std::nullopt;
  return shard;
}

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

RunSummary summarize(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors) {
  RunSummary summary;
  summary.total = int(results.size());
  summary.load_errors = int(load_errors.size());
  for (const CaseResult& r : results) {
    ++summary.by_disposition[int(r.disposition)];
    if (meets_expectation(r.disposition)) ++summary.met;
  }
  return summary;
}

}  // namespace attnres
