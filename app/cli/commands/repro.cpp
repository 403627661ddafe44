#include "app/cli/commands/repro.h"

#include <filesystem>
#include <memory>

#include <CLI/CLI.hpp>

#include "app/cli/command_support.h"

#include "app/workers/make_case_runner.h"

namespace attnres {

CommandOptions add_repro_command(CLI::App& app, ReproArguments& args, CommonArguments& common) {
  CommandOptions command(app.add_subcommand("repro", "write a bug-report bundle for a case"));
  add_one_case_options(command, args.case_path, args.case_name, args.no_layout_guard);
  command.app()->add_option("--out", args.out_dir, "bundle directory (default repro-<case name>)");
  command.app()->add_flag("--force", args.force, "empty the bundle directory first if it holds anything");
  add_case_runner_options(command, common);
  return command;
}

CommandOutput repro_command(const ReproArguments& args, const CommonArguments& common) {
  CommandOutput out;
  const CaseSpec spec = load_single_case(args.case_path, args.case_name);
  const std::unique_ptr<CaseRunner> runner =
      make_case_runner(common.backend, case_run_options(common, args.no_layout_guard), out.notes);
  const std::filesystem::path dir = args.out_dir.empty() ? "repro-" + spec.name : args.out_dir;
  const CaseResult result = runner->write_bundle(spec, dir, args.force, out);
  out.exit_code = meets_expectation(result.disposition) ? kExitOk : kExitUnmet;
  return out;
}

}  // namespace attnres
