// Command-line parsing, separate from running so it can be tested: parse() turns argv words
// into an Invocation or throws UsageError.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/engine/backend_options.h"
#include "app/engine/command_output.h"
#include "app/engine/memory_budget.h"
#include "app/report/report.h"

namespace attnres {

enum class Command { run, info, bench, repro, shrink, merge, mutants, explore };

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
};

struct MergeArguments {
  std::vector<std::string> reports;  // JSON reports of run (--shard k/n jobs, or any runs)
  ReportFiles report_files;          // --json, --junit, --csv, --html
  bool allow_not_run = false;
  Verbosity verbosity = Verbosity::normal;
};

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

struct ReproArguments {
  std::string case_path;
  std::string case_name;  // which case of the file; default: the only one
  std::string out_dir;
  bool no_layout_guard = false;
  bool force = false;  // empty a non-empty out_dir first
};

struct ShrinkArguments {
  std::string case_path;
  std::string case_name;
  std::string out_path;
  std::string verdict;  // keep this disposition; default: the original case's
  bool no_layout_guard = false;
};

struct MutantsArguments {
  std::vector<std::string> paths;
  std::vector<std::string> filters;
  std::vector<std::string> only;  // mutant names; empty: every mutant
  std::string json_path;
  double fail_under = 0;  // exit 1 when the score (percent of mutants killed) is below this
};

struct ExploreArguments {
  int budget = 1000;                  // trials
  std::optional<std::uint64_t> seed;  // the exploration's; default: fresh (printed)
  std::string out_dir;                // the finding's repro bundle; default explore-<trial>
  bool force = false;                 // empty a non-empty out_dir first
  bool no_layout_guard = false;
  std::int64_t max_tokens = 64;
  int max_hidden = 2048;
};

struct Invocation {
  Command command = Command::run;
  BackendOptions backend;
  MemoryBudget budget;  // run, repro, shrink
  RunArguments run;
  std::vector<std::string> info_paths;
  BenchArguments bench;
  ReproArguments repro;
  ShrinkArguments shrink;
  MergeArguments merge;
  MutantsArguments mutants;
  ExploreArguments explore;
  bool color = false;  // set by main from the terminal and NO_COLOR
  std::string help;    // non-empty: print this and exit 0
  std::string command_line;
};

// `args` excludes the program name.
Invocation parse(const std::vector<std::string>& args);

// Where `run`, `info` and `mutants` read cases when given none: the installed
// share/attnres-check/cases beside the binary's bin/, else ./cases (a checkout); nullopt where
// neither is a directory (the commands then say so: kNoBundledCases).
std::optional<std::string> bundled_cases_directory();
inline constexpr const char* kNoBundledCases =
    "no case files given, and no bundled cases here (share/attnres-check/cases beside an installed binary, or ./cases "
    "in a "
    "checkout): name case files or directories";

}  // namespace attnres
