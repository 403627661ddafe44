#include "app/cli/commands/repro.h"

#include <filesystem>
#include <memory>

#include "app/workers/make_case_runner.h"

namespace attnres {

CommandOutput repro_command(const Invocation& inv) {
  CommandOutput out;
  const CaseSpec spec = load_single_case(inv.repro.case_path, inv.repro.case_name);
  const std::unique_ptr<CaseRunner> runner =
      make_case_runner(inv.backend, case_run_options(inv, inv.repro.no_layout_guard), out.notes);
  const std::filesystem::path dir = inv.repro.out_dir.empty() ? "repro-" + spec.name : inv.repro.out_dir;
  const CaseResult result = runner->write_bundle(spec, dir, inv.repro.force, out);
  out.exit_code = meets_expectation(result.disposition) ? kExitOk : kExitUnmet;
  return out;
}

}  // namespace attnres
