// `attnres-check merge`: joins the JSON reports of `run --shard k/n` jobs from a CI matrix (or of any
// runs) into one table, JSON report and JUnit XML, in the cases' original order.
#pragma once
#include <string>
#include <vector>

#include "app/cli/options.h"
#include "app/engine/command_output.h"

namespace attnres {

struct MergeArguments {
  std::vector<std::string> reports;  // JSON reports of run (--shard k/n jobs, or any runs)
  ReportFiles report_files;          // --json, --junit, --csv, --html
  bool allow_not_run = false;
  Verbosity verbosity = Verbosity::normal;
};

CommandOptions add_merge_command(CLI::App& app, MergeArguments& args);

CommandOutput merge_command(const MergeArguments& args, const CommonArguments& common);

}  // namespace attnres
