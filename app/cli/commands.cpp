#include "app/cli/commands.h"

namespace attnres {

CommandOutput execute(const Invocation& inv, const Progress& progress, const TextSink& stream) {
  switch (inv.command) {
    case Command::run: return run_command(inv.run, inv, progress, stream);
    case Command::info: return info_command(inv.info, inv);
    case Command::bench: return bench_command(inv.bench, inv.backend);
    case Command::repro: return repro_command(inv.repro, inv);
    case Command::shrink: return shrink_command(inv.shrink, inv);
    case Command::merge: return merge_command(inv.merge, inv);
    case Command::mutants: return mutants_command(inv.mutants, inv, progress);
    case Command::explore: return explore_command(inv.explore, inv, progress);
  }
  return {};
}

}  // namespace attnres
