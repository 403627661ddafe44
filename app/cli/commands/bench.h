// `attnres-check bench`: its options, and the measurements (app/bench/run_bench.h) printed as a
// markdown table and written as markdown, JSON or CSV.
#pragma once
#include <string>

#include "app/bench/bench_results.h"
#include "app/cli/options.h"
#include "app/engine/command_output.h"

namespace attnres {

struct BenchArguments {
  BenchRequest request;
  std::string markdown_path;
  std::string json_path;
  std::string csv_path;
};

CommandOptions add_bench_command(CLI::App& app, BenchArguments& args, CommonArguments& common);

CommandOutput bench_command(const BenchArguments& args, const BackendOptions& kernel);

}  // namespace attnres
