// What the subcommands share: the backend the options ask for, case selection and the reports
// (their output and exit codes: app/engine/command_output.h). Each subcommand includes this; only commands.cpp, which
// dispatches to them, includes theirs.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/casefile/file_output.h"
#include "app/cli/options.h"
#include "app/engine/backend.h"
#include "app/engine/command_output.h"
#include "app/engine/runner.h"
#include "app/report/report.h"
#include "app/workers/make_backend.h"

namespace attnres {

// A run's verdict: bad input where a case file had errors, else unmet unless every case met its
// expectation (not-run cases excepted with `allow_not_run`, unless every case is not-run: then
// nothing was judged, kExitNoCases).
int verdict_exit_code(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      bool allow_not_run);

// Writes one report where a path is given ("-": into the command's standard output); one that
// fails to write is a note and turns an exit code of 0 into kExitUnmet.
void write_report(const std::string& path, const std::function<std::string()>& content, CommandOutput& out);

// Each report format's (option, path), for require_writable_reports.
std::vector<NamedPath> named_report_files(const ReportFiles& files);
// Whether a report that draws error maps is written.
bool reports_need_error_maps(const ReportFiles& files);
// The files a run read its cases from (each loaded case's and each bad entry's), as inputs that
// no report may overwrite.
std::vector<NamedPath> case_file_inputs(const LoadedCases& loaded);
// write_report for every report format given a file.
void write_reports(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                   const RunContext& context, const ReportFiles& files, CommandOutput& out);

// Refuses (UsageError naming it) a report path that cannot be written, two reports given one
// file, and a report given the file of one of the run's inputs, before anything runs. Each is an
// (option, path) pair; "-" is standard output, which write_reports adds to the command's text.
void require_writable_reports(const std::vector<NamedPath>& reports, const std::vector<NamedPath>& inputs);

// What every case of a command runs with: the memory budget, --kernel, and the layout guard.
RunOptions case_run_options(const CommonArguments& common, bool no_layout_guard);

// The cases --filter and --shard ("k/n"; empty: all) select, in order. Throws UsageError for a
// malformed --shard.
std::vector<CaseSpec> select_cases(std::vector<CaseSpec> cases, const std::vector<std::string>& filters,
                                   const std::string& shard);

// Loads exactly one case (optionally chosen by name) from a file; throws UsageError or a
// CaseParseError-derived message.
CaseSpec load_single_case(const std::string& path, const std::string& name);

// One line per case: what would run it (the kernel under test, or the dispatcher's choice) and why;
// then a line per case file error.
std::string case_plan(const std::vector<CaseSpec>& cases, const std::vector<CaseLoadError>& load_errors,
                      const Backend& backend, const std::string& kernel);

}  // namespace attnres
