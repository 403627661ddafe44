// `attnres-check run`: the selected cases judged, each case's rows printed as it is judged, the
// reports written; external kernels and --devices in worker processes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/cli/options.h"
#include "app/engine/command_output.h"

namespace attnres {

struct RunArguments {
  std::vector<std::string> paths;
  ReportFiles report_files;  // --json, --junit, --csv, --html
  std::vector<std::string> filters;
  std::string shard;  // "k/n", 1-based
  bool no_layout_guard = false;
  bool allow_not_run = false;
  std::string inputs;                 // replay tensors from this safetensors file
  bool no_verify_checksums = false;   // replay even when the stored checksums disagree
  std::string interesting;            // exit 0 iff every case ends with this disposition
  bool in_process = false;            // run an external kernel in this process instead of a worker
  bool timings = false;               // a line of phase times under each case
  bool list = false;                  // print the selected cases and what would run each, run nothing
  std::optional<std::uint64_t> seed;  // every case's seed, instead of its own
  int repeat = 1;                     // runs of each case: its own (or --seed) seed, then fresh recorded seeds
  Verbosity verbosity = Verbosity::normal;
  // --devices: one worker process per entry (a device may repeat), each case on whichever is
  // free; with all_devices, one per CUDA device there is. Empty and false: no --devices.
  std::vector<int> devices;
  bool all_devices = false;
  std::string sanitizer;          // run each case in a worker under this compute-sanitizer tool
  std::string sanitizer_reports;  // where the tool's reports go; empty: a new directory under $TMPDIR
  std::string repro_dir;          // a repro bundle of each case that did not meet its expectation
  std::int64_t repro_max_bytes = std::int64_t(2) << 30;  // what those bundles may take in all
};

CommandOptions add_run_command(CLI::App& app, RunArguments& args, CommonArguments& common);

CommandOutput run_command(const RunArguments& args, const CommonArguments& common, const Progress& progress,
                          const TextSink& stream);

}  // namespace attnres
