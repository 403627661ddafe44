// Bug-report bundles and the case shrinker.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include "app/case_runner.h"
#include "app/command_support.h"
#include "app/runner.h"

namespace attnres {

CommandOutput repro_command(const Invocation& invocation);
CommandOutput shrink_command(const Invocation& invocation);

// Runs the case and writes its bug-report bundle into `dir` (made empty with `force`); the
// bundle's replay lines name `backend_options`. Appends what was written to out.text. With
// `ended_elsewhere` (the run that took its worker process down) the case is not run again: the
// bundle holds that result and the inputs, without outputs.
CaseResult write_repro_bundle(const CaseSpec& spec, Backend& backend, const RunOptions& options,
                              const BackendOptions& backend_options, const std::filesystem::path& dir, bool force,
                              CommandOutput& out, const CaseResult* ended_elsewhere = nullptr);

struct ShrinkOutcome {
  std::optional<CaseSpec> shrunk;  // nothing: the case does not end with the verdict asked for
  std::string log;                 // each reduction kept, and the smallest case
  int trials = 0;
};

// Reduces the case while its disposition (`verdict`, default the case's own) stays, and a wrong
// answer stays wrong. Throws UsageError for an unknown verdict.
ShrinkOutcome shrink_case(const CaseSpec& spec, CaseRunner& runner, const std::string& verdict);

// The standalone PyTorch script written into every bundle.
std::string repro_script();

}  // namespace attnres
