// Command-line parsing, separate from running so it can be tested: parse() turns argv words into
// an Invocation or throws UsageError. Each subcommand declares its own options (commands/*.h);
// what they share is in options.h.
#pragma once
#include <string>
#include <vector>

#include "app/cli/commands/bench.h"
#include "app/cli/commands/explore.h"
#include "app/cli/commands/info.h"
#include "app/cli/commands/merge.h"
#include "app/cli/commands/mutants.h"
#include "app/cli/commands/repro.h"
#include "app/cli/commands/run.h"
#include "app/cli/commands/shrink.h"
#include "app/cli/options.h"

namespace attnres {

enum class Command { run, info, bench, repro, shrink, merge, mutants, explore };

struct Invocation : CommonArguments {
  Command command = Command::run;
  RunArguments run;
  InfoArguments info;
  BenchArguments bench;
  ReproArguments repro;
  ShrinkArguments shrink;
  MergeArguments merge;
  MutantsArguments mutants;
  ExploreArguments explore;
  std::string help;  // non-empty: print this and exit 0
};

// `args` excludes the program name.
Invocation parse(const std::vector<std::string>& args);

}  // namespace attnres
