#include "app/cli/commands/merge.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/casefile/json_io.h"
#include "app/cli/command_support.h"
#include "app/report/report.h"

namespace attnres {
namespace {

// Reports are read whole; a larger file is not one this tool wrote for a case list it can run.
constexpr std::uintmax_t kMaxReportBytes = std::uintmax_t(1) << 30;

struct Part {
  std::string path;
  LoadedReport report;
  int shard = 0, shards = 0;  // k and n of "k/n"; 0: not sharded
};

[[noreturn]] void bad_report(const std::string& path, const std::string& pointer, const std::string& message) {
  throw CaseParseError(CaseLoadError{path, pointer, message});
}

Part read_part(const std::string& path) {
  const BoundedFile read = read_bounded_file(path, kMaxReportBytes, "reports");
  if (!read.error.empty()) bad_report(path, "", read.error);
  // A CI matrix keeps each job's JUnit file too; say which file merge wants instead of a parse error.
  const std::size_t first = read.text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && read.text[first] == '<')
    bad_report(path, "",
               "an XML file (JUnit?); merge reads the JSON reports of run --json and writes JUnit itself with --junit");
  Part part{path, {}, 0, 0};
  try {
    part.report = report_from_json(parse_json_strict(read.text));
  } catch (const JsonInputError& e) {
    bad_report(path, e.pointer(), e.what());
  }
  const std::string& shard = part.report.context.shard;
  if (!shard.empty()) {
    const std::optional<Shard> parsed = parse_shard(shard);
    if (!parsed)
      bad_report(path, "/shard", fmt::format("expected k/n with 1 <= k <= n, got {}", quoted_literal(shard)));
    part.shard = parsed->k;
    part.shards = parsed->n;
  }
  return part;
}

// Shard k of n ran cases k-1, k-1+n, ... of one list: every shard once, and their case counts
// as that split gives them, or the original order cannot be rebuilt.
void check_shards(std::vector<Part>& parts) {
  const int shards = parts.front().shards;
  for (const Part& p : parts)
    if (p.shards != shards)
      bad_report(p.path, "/shard",
                 fmt::format("shard {} of {}, but {} is one of {}: merge joins the shards of one run", p.shard,
                             p.shards, parts.front().path, shards));
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.shard < b.shard; });
  for (std::size_t i = 1; i < parts.size(); ++i)
    if (parts[i].shard == parts[i - 1].shard)
      bad_report(parts[i].path, "/shard",
                 fmt::format("shard {}/{} again (also {})", parts[i].shard, shards, parts[i - 1].path));
  // The shards are distinct and at most n, so n - reports of them are missing (named up to 8: n
  // comes from a file and may be 2^31 - 1).
  const std::int64_t missing_count = std::int64_t(shards) - std::int64_t(parts.size());
  if (missing_count > 0) {
    std::vector<int> missing;
    for (int k = 1, i = 0; k <= shards && missing.size() < 8; ++k) {
      if (i < int(parts.size()) && parts[std::size_t(i)].shard == k)
        ++i;
      else
        missing.push_back(k);
    }
    bad_report(
        parts.front().path, "/shard",
        fmt::format("shard{} {}{} of {} missing: merge needs every shard's report", missing_count == 1 ? "" : "s",
                    fmt::join(missing, ", "),
                    missing_count > std::int64_t(missing.size()) ? fmt::format(" ... ({} in all)", missing_count) : "",
                    shards));
  }
  std::size_t total = 0;
  for (const Part& p : parts) total += p.report.results.size();
  for (const Part& p : parts) {
    const std::size_t expected = (total + std::size_t(shards - p.shard)) / std::size_t(shards);
    if (p.report.results.size() != expected)
      bad_report(
          p.path, "/cases",
          fmt::format("{} cases, but shard {} of {} cases split {} ways has {}: the shards did not run one case list",
                      p.report.results.size(), p.shard, total, shards, expected));
  }
}

// Values in first-seen order, without repeats.
struct DistinctValues {
  std::vector<std::string> values;
  std::unordered_set<std::string> seen;
  void add(const std::string& value) {
    if (seen.insert(value).second) values.push_back(value);
  }
};

}  // namespace

CommandOptions add_merge_command(CLI::App& app, MergeArguments& args) {
  CommandOptions command(
      app.add_subcommand("merge", "join the JSON reports of --shard k/n jobs (or any runs) into one report"));
  command.app()->add_option("reports", args.reports, "JSON reports written by run --json")->required();
  add_report_options(command, args.report_files);
  command.app()->add_flag("--allow-not-run", args.allow_not_run, "cases nothing could run do not fail the exit code");
  add_verbosity_flags(command, args.verbosity);
  return command;
}

CommandOutput merge_command(const MergeArguments& args, const CommonArguments& common) {
  CommandOutput out;
  std::vector<NamedPath> inputs;
  for (const std::string& path : args.reports) inputs.emplace_back("report given to merge", path);
  require_writable_reports(named_report_files(args.report_files), inputs);
  std::vector<Part> parts;
  for (const std::string& path : args.reports) parts.push_back(read_part(path));
  const auto sharded = std::count_if(parts.begin(), parts.end(), [](const Part& p) { return p.shards > 0; });
  if (sharded > 0 && sharded < std::ptrdiff_t(parts.size())) {
    const auto& unsharded = *std::find_if(parts.begin(), parts.end(), [](const Part& p) { return p.shards == 0; });
    const auto& with_shard = *std::find_if(parts.begin(), parts.end(), [](const Part& p) { return p.shards > 0; });
    bad_report(
        unsharded.path, "/shard",
        fmt::format("not a shard, but {} is shard {}: merge joins either the shards of one run or unsharded reports",
                    with_shard.path, with_shard.report.context.shard));
  }
  std::vector<CaseResult> results;
  if (sharded) {
    check_shards(parts);
    const std::size_t shards = parts.size();
    for (std::size_t j = 0; j < parts.front().report.results.size(); ++j)
      for (std::size_t k = 0; k < shards && j < parts[k].report.results.size(); ++k)
        results.push_back(std::move(parts[k].report.results[j]));
  } else {
    for (Part& p : parts)
      for (CaseResult& r : p.report.results) results.push_back(std::move(r));
  }

  // Every shard loaded the same case files: a bad entry is reported once.
  std::vector<CaseLoadError> load_errors;
  std::unordered_set<std::string> seen_errors;
  DistinctValues backends, devices, hosts, roots;
  for (const Part& p : parts) {
    for (const CaseLoadError& e : p.report.load_errors)
      if (seen_errors.insert(e.file + '\0' + e.pointer + '\0' + e.message).second) load_errors.push_back(e);
    backends.add(p.report.context.backend);
    devices.add(p.report.context.device);
    hosts.add(p.report.context.hostname);
    for (const std::string& root : p.report.context.case_roots) roots.add(root);
  }
  RunContext context = parts.front().report.context;
  context.backend = fmt::format("{}", fmt::join(backends.values, "; "));
  context.device = fmt::format("{}", fmt::join(devices.values, "; "));
  context.hostname = fmt::format("{}", fmt::join(hosts.values, "; "));
  context.case_roots = roots.values;
  context.command_line = common.command_line;
  context.shard.clear();

  if (results.empty() && load_errors.empty()) {
    out.notes += "the reports hold no case: nothing was judged\n";
    out.exit_code = kExitNoCases;
    return out;
  }
  out.text = format_table(results, load_errors, context, TableStyle{common.color, false, args.verbosity});
  for (const CaseLoadError& e : load_errors) out.notes += printable(e.to_string()) + "\n";
  out.exit_code = verdict_exit_code(results, load_errors, args.allow_not_run);
  if (out.exit_code == kExitNoCases) out.notes += std::string(kJudgedNothing) + "\n";
  write_reports(results, load_errors, context, args.report_files, out);
  return out;
}

}  // namespace attnres
