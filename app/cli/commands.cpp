#include "app/cli/commands.h"

#include "app/cli/commands/bench.h"
#include "app/cli/commands/explore.h"
#include "app/cli/commands/info.h"
#include "app/cli/commands/merge.h"
#include "app/cli/commands/mutants.h"
#include "app/cli/commands/repro.h"
#include "app/cli/commands/run.h"
#include "app/cli/commands/shrink.h"

namespace attnres {

CommandOutput execute(const Invocation& inv, const Progress& progress, const TextSink& stream) {
  switch (inv.command) {
    case Command::run: return run_command(inv, progress, stream);
    case Command::info: return info_command(inv);
    case Command::bench: return bench_command(inv.bench, inv.backend);
    case Command::repro: return repro_command(inv);
    case Command::shrink: return shrink_command(inv);
    case Command::merge: return merge_command(inv);
    case Command::mutants: return mutants_command(inv, progress);
    case Command::explore: return explore_command(inv, progress);
  }
  return {};
}

}  // namespace attnres
