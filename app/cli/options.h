// What every subcommand's options share: the arguments common to all of them, the option groups
// several take (backend, kernel, reports, memory budget, verbosity), and CommandOptions, which a
// subcommand's add_*_command returns: its CLI11 subcommand and the checks that run once the words
// are parsed. Each subcommand declares its own options in its file under commands/.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/casefile/case_property.h"
#include "app/engine/backend_options.h"
#include "app/engine/memory_budget.h"
#include "app/report/report.h"
#include "app/report/table.h"

namespace CLI {
class App;
}

namespace attnres {

// The arguments every subcommand may use besides its own.
struct CommonArguments {
  BackendOptions backend;
  MemoryBudget budget;                   // run, repro, shrink, mutants, explore
  std::vector<CaseProperty> properties;  // --check: run, repro, shrink, explore
  bool color = false;                    // set by main from the terminal and NO_COLOR
  std::string command_line;              // the words after the program name, as given
};

// A subcommand's CLI11 app and the checks that complete its arguments after parsing (each may
// throw UsageError), in the order they were added.
class CommandOptions {
 public:
  explicit CommandOptions(CLI::App* app) : app_(app) {}
  CLI::App* app() const { return app_; }
  void after_parse(std::function<void()> check) { checks_.push_back(std::move(check)); }
  void finish() const {
    for (const auto& check : checks_) check();
  }

 private:
  CLI::App* app_;
  std::vector<std::function<void()>> checks_;
};

// --device, --backend, --device-model, --native-images and the kernel options.
void add_backend_options(CommandOptions& command, BackendOptions& options);
// --kernel, --torch-library, --signature, --profile; after parsing, they are checked against each
// other and library paths are made absolute.
void add_kernel_options(CommandOptions& command, BackendOptions& options);
void add_timeout_option(CommandOptions& command, BackendOptions& options);
// One option per report format (app/report/report.h), each naming the file it is written to.
void add_report_options(CommandOptions& command, ReportFiles& files);
// --max-host-memory and --max-device-memory (bytes, or 512M, 8G ...).
void add_budget_options(CommandOptions& command, MemoryBudget& budget);
// A size option's text as bytes (1073741824, 512M, 8G ...); nothing for empty text; UsageError
// naming `option` otherwise.
std::optional<std::int64_t> parse_byte_option(const std::string& option, const std::string& text);
// --check LIST: properties judged on every case besides one correct call (comma-separated or
// repeated names, or all).
void add_check_option(CommandOptions& command, std::vector<CaseProperty>& properties);
// --check's words as properties; UsageError naming the word that is none.
std::vector<CaseProperty> parse_check_option(const std::vector<std::string>& words);
// -q and -v.
void add_verbosity_flags(CommandOptions& command, Verbosity& verbosity);
// What a command that runs cases on one kernel takes: the backend options, --timeout, --check and
// the memory budget (repro, shrink, explore).
void add_case_runner_options(CommandOptions& command, CommonArguments& common);
// The case file and --case of the commands that take one case (repro, shrink), and --no-layout-guard.
void add_one_case_options(CommandOptions& command, std::string& case_path, std::string& case_name,
                          bool& no_layout_guard);
// --seed: a decimal seed in [0, 2^64), refused in words otherwise.
void add_seed_option(CommandOptions& command, std::optional<std::uint64_t>& seed, const std::string& help);
// --device alone (mutants: no kernel options).
void add_device_option(CommandOptions& command, int& device);
// A percentage from 0 to 100 (a NaN would make a threshold never fail).
void add_percent_option(CommandOptions& command, const std::string& name, double& value, const std::string& help);

// Where `run`, `info` and `mutants` read cases when given none: the installed
// share/attnres-check/cases beside the binary's bin/, else ./cases (a checkout); nullopt where
// neither is a directory (the commands then say so: kNoBundledCases).
std::optional<std::string> bundled_cases_directory();
// After parsing: no case paths given means the bundled cases, where there are some.
void default_to_bundled_cases(CommandOptions& command, std::vector<std::string>& paths);
inline constexpr const char* kNoBundledCases =
    "no case files given, and no bundled cases here (share/attnres-check/cases beside an installed binary, or "
    "./cases in a checkout): name case files or directories";

}  // namespace attnres
