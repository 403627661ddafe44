// What the subcommands share: their output and exit codes, the backend the options ask for,
// case selection and the reports. Each subcommand includes this; only commands.cpp, which
// dispatches to them, includes theirs.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/backend.h"
#include "app/cli.h"
#include "app/file_output.h"
#include "app/report.h"
#include "app/runner.h"

namespace attnres {

// Exit codes: every case met its expectation / some did not / bad input or usage.
constexpr int kExitOk = 0;
constexpr int kExitUnmet = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitNoCases = 5;  // nothing selected or judged (pytest's code for no tests collected)
constexpr const char* kJudgedNothing = "every case is not-run: nothing was judged, and --allow-not-run does not pass that";

struct CommandOutput {
  std::string text;    // stdout
  std::string notes;   // stderr (hints, warnings)
  int exit_code = kExitOk;
};

// Called before each case with (index, total, name), for a progress line.
using Progress = std::function<void(int, int, const std::string&)>;
// Takes stdout text as soon as it is ready (each case's rows as it is judged); without one, all
// of it is in CommandOutput::text.
using TextSink = std::function<void(const std::string&)>;

// The backend the options ask for; `note` explains a fallback. Throws UsageError. Where the
// backend must be a CUDA device (--backend cuda, or `cuda_required_by` names the option that
// asks for one, such as "--devices all"), no device is the run's error, named after that option.
std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string& note, const std::string& cuda_required_by = "");

// A run's verdict: bad input where a case file had errors, else unmet unless every case met its
// expectation (not-run cases excepted with `allow_not_run`, unless every case is not-run: then
// nothing was judged, kExitNoCases).
int verdict_exit_code(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      bool allow_not_run);

// Writes one report where a path is given ("-": into the command's standard output); one that
// fails to write is a note and turns an exit code of 0 into kExitUnmet.
void write_report(const std::string& path, const std::function<std::string()>& content, CommandOutput& out);

// write_report for the JSON, JUnit, CSV and HTML reports.
struct ReportPaths {
  std::string json, junit, csv, html;  // empty: not written
  operator std::vector<NamedPath>() const { return {{"--json", json}, {"--junit", junit}, {"--csv", csv}, {"--html", html}}; }
};
template <typename Arguments>
ReportPaths report_paths(const Arguments& args) {
  return {args.json_path, args.junit_path, args.csv_path, args.html_path};
}
// The files a run read its cases from (each loaded case's and each bad entry's), as inputs that
// no report may overwrite.
std::vector<NamedPath> case_file_inputs(const LoadedCases& loaded);
void write_reports(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                   const RunContext& context, const ReportPaths& paths, CommandOutput& out);

// Refuses (UsageError naming it) a report path that cannot be written, two reports given one
// file, and a report given the file of one of the run's inputs, before anything runs. Each is an
// (option, path) pair; "-" is standard output, which write_reports adds to the command's text.
void require_writable_reports(const std::vector<NamedPath>& reports, const std::vector<NamedPath>& inputs);

// What every case of a command runs with: the memory budget, --kernel, and the layout guard.
RunOptions case_run_options(const Invocation& invocation, bool no_layout_guard);

// The cases --filter and --shard select, in order. Throws UsageError for a malformed --shard.
std::vector<CaseSpec> select_cases(std::vector<CaseSpec> cases, const RunArguments& args);

// Loads exactly one case (optionally chosen by name) from a file; throws UsageError or a
// CaseParseError-derived message.
CaseSpec load_single_case(const std::string& path, const std::string& name);

// One line per case: what would run it (the kernel under test, or the dispatcher's choice) and why;
// then a line per case file error.
std::string case_plan(const std::vector<CaseSpec>& cases, const std::vector<CaseLoadError>& load_errors,
                      const Backend& backend, const std::string& kernel);

}  // namespace attnres
