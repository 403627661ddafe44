// `attnres-check bench`: native and portable kernels, and the kernel --kernel names, timed with
// CUDA events over rotating input sets larger than L2, against a copy bandwidth measured in the
// same run. Every point is checked against the cuBLAS float64 reference before it is timed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/cli/options.h"
#include "app/engine/command_output.h"

namespace attnres {

struct BenchArguments {
  std::vector<std::int64_t> tokens{1, 64, 320, 4096, 16384};
  std::vector<int> blocks{1, 4, 8};
  int hidden = 7168;
  int repeats = 50;
  bool pdl = false;           // also time the native kernel with programmatic dependent launch
  bool native_plans = false;  // also time every native plan, not only the one chosen
  std::string markdown_path;
  std::string json_path;
  std::string csv_path;
};

CommandOptions add_bench_command(CLI::App& app, BenchArguments& args, CommonArguments& common);

CommandOutput bench_command(const BenchArguments& args, const BackendOptions& kernel);

}  // namespace attnres
