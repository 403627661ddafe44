// `attnres-check explore`: random legal problems (token counts including 0 and 1, hidden sizes
// the native kernel takes and ones it does not, block counts and write indices, delta and output
// norm on or off, row paddings per tensor including odd ones, blocks whose RMS differs) run on the
// kernel under test until one goes wrong; that one is shrunk and written as a repro bundle.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "app/cli/command_support.h"
#include "app/cli/options.h"

namespace attnres {

struct ExploreArguments {
  int budget = 1000;                  // trials
  std::optional<std::uint64_t> seed;  // the exploration's; default: fresh (printed)
  std::string out_dir;                // the finding's repro bundle; default explore-<trial>
  bool force = false;                 // empty a non-empty out_dir first
  bool no_layout_guard = false;
  std::int64_t max_tokens = 64;
  int max_hidden = 2048;
};

CommandOptions add_explore_command(CLI::App& app, ExploreArguments& args, CommonArguments& common);

struct ExploreLimits {
  std::int64_t max_tokens = 64;
  int max_hidden = 2048;
};

// One random legal case (trial `index` of an exploration); the same generator state gives the same case.
CaseSpec draw_case(std::mt19937_64& rng, int index, const ExploreLimits& limits);

// What a trial's result says about the kernel: a finding is a wrong answer, memory damage or an
// error; a refusal (a rejection with a message) and a case nothing here runs are not.
enum class TrialOutcome { passed, refused, skipped, not_run, finding };
TrialOutcome classify_trial(const CaseResult& result);

CommandOutput explore_command(const ExploreArguments& args, const CommonArguments& common, const Progress& progress);

}  // namespace attnres
