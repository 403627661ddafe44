// `attnres-check shrink`: a case reduced while its disposition stays (also explore's shrinker).
#pragma once
#include <optional>
#include <string>

#include "app/cli/options.h"
#include "app/engine/case_runner.h"
#include "app/engine/command_output.h"

namespace attnres {

struct ShrinkArguments {
  std::string case_path;
  std::string case_name;
  std::string out_path;
  std::string verdict;  // keep this disposition; default: the original case's
  bool no_layout_guard = false;
};

CommandOptions add_shrink_command(CLI::App& app, ShrinkArguments& args, CommonArguments& common);

CommandOutput shrink_command(const ShrinkArguments& args, const CommonArguments& common);

struct ShrinkOutcome {
  std::optional<CaseSpec> shrunk;  // nothing: the case does not end with the verdict asked for
  std::string log;                 // each reduction kept, and the smallest case
  int trials = 0;
};

// Reduces the case while its disposition (`verdict`, default the case's own) stays, and a wrong
// answer stays wrong. Throws UsageError for an unknown verdict.
ShrinkOutcome shrink_case(const CaseSpec& spec, CaseRunner& runner, const std::string& verdict);

}  // namespace attnres
