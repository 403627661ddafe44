// `attnres-check shrink`: a case reduced while its disposition stays (also explore's shrinker).
#pragma once
#include <optional>
#include <string>

#include "app/cli/cli.h"
#include "app/cli/command_support.h"
#include "app/engine/case_runner.h"

namespace attnres {

CommandOutput shrink_command(const Invocation& invocation);

struct ShrinkOutcome {
  std::optional<CaseSpec> shrunk;  // nothing: the case does not end with the verdict asked for
  std::string log;                 // each reduction kept, and the smallest case
  int trials = 0;
};

// Reduces the case while its disposition (`verdict`, default the case's own) stays, and a wrong
// answer stays wrong. Throws UsageError for an unknown verdict.
ShrinkOutcome shrink_case(const CaseSpec& spec, CaseRunner& runner, const std::string& verdict);

}  // namespace attnres
