#include "app/bundle/failure_bundles.h"

#include <cctype>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "app/casefile/file_output.h"
#include "app/casefile/host_tensors.h"
#include "app/casefile/json_io.h"
#include "app/engine/memory_budget.h"
#include "kernels/common/checked_size.h"

namespace attnres {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// What a bundle of `spec` may take: its inputs and its tensors after the run (each at most the
// case's storage), the float64 reference, and a MiB for the error map and the text files.
std::optional<std::int64_t> estimated_bundle_bytes(const CaseSpec& spec) {
  const std::optional<std::int64_t> storage = case_storage_bytes(spec.shape, spec.strides);
  if (!storage) return std::nullopt;
  return (CheckedSize(*storage) * 2 + CheckedSize(spec.shape.tokens) * spec.shape.hidden * 8 + (1 << 20)).get();
}

std::int64_t bytes_under(const fs::path& dir) {
  std::int64_t total = 0;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir, ec))
    if (entry.is_regular_file(ec)) total += std::int64_t(entry.file_size(ec));
  return total;
}

}  // namespace

std::string file_name_for_case(const std::string& case_name, std::set<std::string>& taken) {
  std::string name;
  for (const char c : case_name)
    name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  if (name.empty() || name == "." || name == "..") name = "case";
  std::string unique = name;
  for (int k = 2; !taken.insert(unique).second; ++k) unique = fmt::format("{}-{}", name, k);
  return unique;
}

void claim_empty_directory(const std::string& option, const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw UsageError(fmt::format("{} {}: not a directory", option, dir.string()));
  if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec))
    throw UsageError(fmt::format("{} {}: holds files already; name a new or empty directory", option, dir.string()));
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw UsageError(fmt::format("{} {}: cannot be made: {}", option, dir.string(), ec.message()));
}

void write_failure_bundles(const std::vector<CaseSpec>& cases, const std::vector<CaseResult>& results,
                           const std::function<std::unique_ptr<CaseRunner>()>& make_runner, const fs::path& dir,
                           std::int64_t max_bytes, CommandOutput& out) {
  std::unique_ptr<CaseRunner> runner;
  json bundles = json::array(), left_out = json::array();
  std::set<std::string> taken{kReproIndexFile};
  std::int64_t written_bytes = 0;
  const auto leave_out = [&](const CaseResult& r, const std::string& reason) {
    left_out.push_back(
        {{"case", r.name}, {"location", r.location}, {"disposition", to_string(r.disposition)}, {"reason", reason}});
    out.notes += fmt::format("no repro bundle for {}: {}\n", printable(r.name), reason);
  };
  for (std::size_t i = 0; i < results.size() && i < cases.size(); ++i) {
    const CaseResult& r = results[i];
    if (meets_expectation(r.disposition)) continue;
    if (r.disposition == Disposition::not_run) {
      leave_out(r, "it was not run here (" + r.detail + ")");
      continue;
    }
    const std::optional<std::int64_t> estimate = estimated_bundle_bytes(cases[i]);
    if (!estimate || !(CheckedSize(written_bytes) + *estimate).within(max_bytes)) {
      leave_out(r, fmt::format("its bundle (about {}) would pass --repro-max-bytes {} after {} written",
                               estimate ? describe_bytes(*estimate) : "more than can be counted",
                               describe_bytes(max_bytes), describe_bytes(written_bytes)));
      continue;
    }
    const fs::path bundle = dir / file_name_for_case(r.name, taken);
    CommandOutput bundle_out;
    CaseResult again;
    try {
      if (!runner) runner = make_runner();
      // A hazard is compute-sanitizer's finding, which a run without it cannot see again.
      again = runner->write_bundle(cases[i], bundle, false, bundle_out, r.sanitizer ? &r : nullptr);
    } catch (const std::exception& e) {
      leave_out(r, std::string("writing it failed: ") + e.what());
      continue;
    }
    out.notes += bundle_out.notes;
    const std::int64_t bytes = bytes_under(bundle);
    written_bytes += bytes;
    out.text += fmt::format("repro bundle: {}/ ({}, {})\n", printable(bundle.string()), to_string(again.disposition),
                            describe_bytes(bytes));
    if (again.disposition != r.disposition)
      out.notes += fmt::format("{} was {} in the run but {} when run again for its bundle\n", printable(r.name),
                               to_string(r.disposition), to_string(again.disposition));
    bundles.push_back({{"case", r.name},
                       {"location", r.location},
                       {"seed", std::to_string(cases[i].seed)},
                       {"disposition", to_string(r.disposition)},
                       {"bundle_disposition", to_string(again.disposition)},
                       {"dir", bundle.filename().string()},
                       {"bytes", bytes}});
  }
  const json index = {{"schema", "attnres-check/repro-dir"}, {"schema_version", 1}, {"max_bytes", max_bytes},
                      {"written_bytes", written_bytes},      {"bundles", bundles},  {"left_out", left_out}};
  write_file_atomically((dir / kReproIndexFile).string(), dump_json(index, 2) + "\n");
}

}  // namespace attnres
