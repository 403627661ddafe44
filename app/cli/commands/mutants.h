// `attnres-check mutants`: how many deliberately wrong kernels (kernels/mutants/mutant_kernel.h) a suite
// of cases catches. Each case's inputs and reference are made once; the unmutated kernel and
// every mutant then run on them. A mutant is killed by a case whose expectation it fails to meet,
// among the cases the unmutated kernel meets (the others cannot judge a mutation).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/command_support.h"
#include "app/cli/options.h"
#include "app/engine/runner.h"

namespace attnres {

struct MutantsArguments {
  std::vector<std::string> paths;
  std::vector<std::string> filters;
  std::vector<std::string> only;  // mutant names; empty: every mutant
  std::string json_path;
  double fail_under = 0;  // exit 1 when the score (percent of mutants killed) is below this
};

CommandOptions add_mutants_command(CLI::App& app, MutantsArguments& args, CommonArguments& common);

struct MutantOutcome {
  std::string name;  // "no-key-rms-norm"
  std::string description;
  std::vector<CaseResult> killed_by;  // the mutant's results on the cases that killed it
};

struct MutationScore {
  std::string backend, device;
  int cases = 0;                     // selected and run
  std::vector<CaseResult> left_out;  // the unmutated kernel's results where it did not meet the expectation
  std::vector<MutantOutcome> mutants;
  int killed() const;
  double percent() const;  // killed mutants out of all, in percent (100 without mutants)
};

MutationScore score_mutants(const std::vector<CaseSpec>& cases, Backend& backend, const RunOptions& options,
                            const std::vector<std::string>& only, const Progress& progress);

std::string mutation_score_text(const MutationScore& score);
nlohmann::json mutation_score_json(const MutationScore& score);

CommandOutput mutants_command(const MutantsArguments& args, const CommonArguments& common, const Progress& progress);

}  // namespace attnres
