#include "app/cli/commands/bench.h"

#include <CLI/CLI.hpp>

#include "app/bench/bench_printers.h"
#include "app/bench/run_bench.h"
#include "app/cli/command_support.h"
#include "kernels/common/problem.h"

namespace attnres {

CommandOptions add_bench_command(CLI::App& app, BenchArguments& args, CommonArguments& common) {
  CommandOptions command(
      app.add_subcommand("bench", "time native and portable kernels against a measured copy bandwidth"));
  CLI::App* bench = command.app();
  bench->add_option("--tokens", args.request.tokens, "token counts to sweep")->capture_default_str();
  bench->add_option("--blocks", args.request.blocks, "num_blocks values to sweep")->capture_default_str();
  bench->add_option("--hidden", args.request.hidden, "hidden size")->capture_default_str();
  bench->add_option("--repeats", args.request.repeats, "timed launches per point (median reported)")
      ->check(CLI::Range(3, 100000))
      ->capture_default_str();
  bench->add_flag("--pdl", args.request.pdl,
                  "also time the native kernel, and with --native-plans each plan, launched with programmatic "
                  "dependent launch (each launch's prologue overlapping the previous one's tail)");
  bench->add_flag(
      "--native-plans", args.request.native_plans,
      "also time every plan of the native kernel (ring, ring/cp.async, split/<cluster>x<vectors>), not only the one it "
      "picks");
  bench->add_option("--markdown", args.markdown_path, "also write the table as markdown here");
  bench->add_option("--json", args.json_path, "also write the results as JSON here");
  bench->add_option("--csv", args.csv_path, "also write one CSV row per point here");
  add_kernel_options(command, common.backend);
  command.after_parse([&args] {
    for (auto t : args.request.tokens)
      if (t < 1 || t > kMaxTokens) throw UsageError("--tokens: every value must be in [1, 2^31]");
    for (int b : args.request.blocks)
      if (b < 0 || b > 64) throw UsageError("--blocks: every value must be in [0, 64]");
    if (args.request.hidden < 8 || args.request.hidden > kMaxHidden || args.request.hidden % 8)
      throw UsageError("--hidden: must be a multiple of 8 in [8, 65536]");
  });
  return command;
}

CommandOutput bench_command(const BenchArguments& args, const BackendOptions& kernel_options) {
  CommandOutput out;
  require_writable_reports({{"--markdown", args.markdown_path}, {"--json", args.json_path}, {"--csv", args.csv_path}},
                           {});
  const BenchResults results = run_bench(args.request, kernel_options);
  out.text = bench_markdown(results);
  write_report(
      args.markdown_path, [&] { return out.text; }, out);
  write_report(
      args.json_path, [&] { return bench_json(results); }, out);
  write_report(
      args.csv_path, [&] { return bench_csv(results); }, out);
  return out;
}

}  // namespace attnres
