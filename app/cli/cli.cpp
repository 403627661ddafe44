#include "app/cli/cli.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "app/engine/command_output.h"
#include "app/report/git_revision.h"

namespace attnres {

Invocation parse(const std::vector<std::string>& args) {
  Invocation inv;
  for (const auto& a : args) inv.command_line += (inv.command_line.empty() ? "" : " ") + a;
  CLI::App app{"attnres-check: verifies the Kimi K3 AttnRes kernel and turns failures into repros", "attnres-check"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ATTNRES_VERSION);

  struct Subcommand {
    Command command;
    CommandOptions options;
  };
  const std::vector<Subcommand> subcommands{
      {Command::run, add_run_command(app, inv.run, inv)},
      {Command::info, add_info_command(app, inv.info, inv)},
      {Command::bench, add_bench_command(app, inv.bench, inv)},
      {Command::repro, add_repro_command(app, inv.repro, inv)},
      {Command::shrink, add_shrink_command(app, inv.shrink, inv)},
      {Command::merge, add_merge_command(app, inv.merge)},
      {Command::mutants, add_mutants_command(app, inv.mutants, inv)},
      {Command::explore, add_explore_command(app, inv.explore, inv)},
  };

  // CLI11 takes the words last-first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    inv.help = app.help();
    for (const Subcommand& sub : subcommands)
      if (sub.options.app()->parsed()) inv.help = sub.options.app()->help();
    return inv;
  } catch (const CLI::CallForVersion&) {
    inv.help = fmt::format("attnres-check {} (git {}; native images: {})\n", ATTNRES_VERSION, kGitRevision,
                           ATTNRES_NATIVE_IMAGES);
    return inv;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + " (see --help)");
  }
  for (const Subcommand& sub : subcommands)
    if (sub.options.app()->parsed()) {
      inv.command = sub.command;
      sub.options.finish();
    }
  return inv;
}

}  // namespace attnres
