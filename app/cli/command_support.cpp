#include "app/cli/command_support.h"

#include <fnmatch.h>

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/casefile/case_spec.h"
#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "app/engine/runner.h"
#include "app/report/report.h"
#include "kernels/external/kernel_profile.h"

namespace attnres {

namespace {}  // namespace

std::string case_plan(const std::vector<CaseSpec>& cases, const std::vector<CaseLoadError>& load_errors,
                      const Backend& backend, const std::string& kernel) {
  std::string text;
  const DeviceDescription device = backend.device();
  const KernelEntry* under_test = kernel.empty() ? nullptr : backend.kernels().find(kernel);
  std::vector<std::string> names;
  for (const CaseSpec& spec : cases) names.push_back(spec.name);
  TableStyle columns;  // the case column as wide as the run's table would make it
  fit_columns(columns, names, {});
  const std::size_t width = columns.case_width;
  for (const CaseSpec& spec : cases) {
    if (under_test) {
      const auto why = under_test->cannot_implement(spec.shape, spec.strides, device);
      std::string expectation;
      if (!why) judged_spec(spec, under_test->preconditions(), expectation);
      const char* verdict = !why ? "runs" : why->kind == Unsupported::Kind::signature ? "skipped" : "not-run";
      text += fmt::format("  {:<{}} {:<9} {}\n", printable(spec.name), width, verdict,
                          printable(why ? why->reason : "expected to " + expectation));
      continue;
    }
    DispatchRequest request;
    request.shape = spec.shape;
    request.strides = spec.strides;
    request.choice = spec.kernel;
    request.layout_guard = spec.layout_guard;
    const DispatchDecision d = dispatch(device, backend.native_images(), request);
    const std::string path = d.rejection ? "rejected" : d.path == KernelPath::none ? "not-run" : to_string(d.path);
    std::string expectation;
    if (d.path != KernelPath::none)
      judged_spec(spec, dispatched_preconditions(d.path == KernelPath::native, d.hard_coded_row_stride), expectation);
    text += fmt::format("  {:<{}} {:<9} {}{}\n", printable(spec.name), width, path, printable(d.reason),
                        expectation.empty() ? "" : printable("; expected to " + expectation));
  }
  for (const CaseLoadError& e : load_errors) text += fmt::format("  bad case: {}\n", printable(e.to_string()));
  return text;
}

std::vector<CaseSpec> select_cases(std::vector<CaseSpec> cases, const std::vector<std::string>& filters,
                                   const std::string& shard_text) {
  if (!filters.empty()) {
    // A glob where the pattern has glob characters, else a substring (pytest's -k habit).
    const auto matches = [](const std::string& pattern, const std::string& name) {
      if (pattern.find_first_of("*?[") != std::string::npos) return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
      return name.find(pattern) != std::string::npos;
    };
    std::vector<CaseSpec> kept;
    for (auto& c : cases)
      for (const auto& pattern : filters)
        if (matches(pattern, c.name)) {
          kept.push_back(std::move(c));
          break;
        }
    cases = std::move(kept);
  }
  if (!shard_text.empty()) {
    const std::optional<Shard> shard = parse_shard(shard_text);
    if (!shard) throw UsageError(fmt::format("--shard: expected k/n with 1 <= k <= n, got \"{}\"", shard_text));
    std::vector<CaseSpec> kept;
    for (std::size_t i = 0; i < cases.size(); ++i)
      if (int(i % std::size_t(shard->n)) == shard->k - 1) kept.push_back(std::move(cases[i]));
    cases = std::move(kept);
  }
  return cases;
}

RunOptions case_run_options(const CommonArguments& common, bool no_layout_guard) {
  RunOptions options;
  options.disable_layout_guard = no_layout_guard;
  options.budget = common.budget;
  options.kernel = common.backend.kernel;
  options.properties = common.properties;
  return options;
}

int verdict_exit_code(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      bool allow_not_run) {
  if (!load_errors.empty()) return kExitBadInput;
  const RunSummary summary = summarize(results, load_errors);
  const int not_run = summary.by_disposition[int(Disposition::not_run)];
  const int skipped = summary.by_disposition[int(Disposition::skipped)];
  // A gate that judged nothing is not green, whatever it allows.
  if (summary.total > 0 && not_run + skipped == summary.total && (allow_not_run || not_run == 0)) return kExitNoCases;
  return summary.total - summary.met - (allow_not_run ? not_run : 0) == 0 ? kExitOk : kExitUnmet;
}

void write_report(const std::string& path, const std::function<std::string()>& content, CommandOutput& out) {
  if (path.empty()) return;
  try {
    if (is_standard_output(path))
      out.text += content();
    else
      write_report_file(path, content());
  } catch (const std::exception& e) {
    out.notes += fmt::format("report not written: {}\n", e.what());
    if (out.exit_code == kExitOk) out.exit_code = kExitUnmet;
  }
}

void write_reports(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                   const RunContext& context, const ReportFiles& files, CommandOutput& out) {
  // The table is already made: a report that fails to write costs only itself.
  for (const ReportFormat* format : report_formats()) {
    const auto file = files.find(format->option);
    if (file != files.end())
      write_report(
          file->second, [&] { return format->print(results, load_errors, context); }, out);
  }
}

std::vector<NamedPath> named_report_files(const ReportFiles& files) {
  std::vector<NamedPath> named;
  for (const ReportFormat* format : report_formats()) {
    const auto file = files.find(format->option);
    named.emplace_back(format->option, file == files.end() ? "" : file->second);
  }
  return named;
}

bool reports_need_error_maps(const ReportFiles& files) {
  for (const ReportFormat* format : report_formats()) {
    const auto file = files.find(format->option);
    if (format->needs_error_maps && file != files.end() && !file->second.empty()) return true;
  }
  return false;
}

std::vector<NamedPath> case_file_inputs(const LoadedCases& loaded) {
  std::vector<NamedPath> inputs;
  std::unordered_set<std::string> seen;
  auto add = [&](const std::string& file) {
    if (!file.empty() && seen.insert(file).second) inputs.emplace_back("case file", file);
  };
  for (const CaseSpec& spec : loaded.cases) add(spec.file);
  for (const CaseLoadError& e : loaded.errors) add(e.file);
  return inputs;
}

void require_writable_reports(const std::vector<NamedPath>& reports, const std::vector<NamedPath>& inputs) {
  try {
    require_distinct_files(reports, inputs);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  for (const auto& [option, path] : reports) {
    if (path.empty()) continue;
    try {
      require_writable(path);
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("{}: report {}", option, e.what()));
    }
  }
}

CaseSpec load_single_case(const std::string& path, const std::string& name) {
  LoadedCases loaded = load_cases({path});
  if (!loaded.errors.empty()) throw CaseParseError(loaded.errors.front());
  std::vector<CaseSpec> matches;
  for (auto& c : loaded.cases)
    if (name.empty() || c.name == name) matches.push_back(std::move(c));
  if (matches.empty()) throw UsageError(fmt::format("{}: no case named \"{}\"", path, name));
  if (matches.size() > 1)
    throw UsageError(fmt::format("{}: holds {} cases; choose one with --case NAME", path, matches.size()));
  return std::move(matches.front());
}

}  // namespace attnres
