#include "app/cli/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <memory>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/engine/command_output.h"
#include "kernels/external/install_paths.h"
#include "kernels/external/kernel_profile.h"
#include "kernels/external/kernel_spec.h"

namespace attnres {

namespace {

// Options taken as a number with nothing after it, in the range `accept` allows, refused in words
// otherwise (CLI11's own checks print 1.8e308 as a range's bound and let "nan" through).
template <typename Number, typename Accept>
CLI::Validator number_in_full(const char* name, const char* expected, Accept accept) {
  return CLI::Validator(
      [expected, accept](const std::string& text) -> std::string {
        Number value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (text.empty() || error != std::errc() || stop != end || !accept(value))
          return fmt::format("expected {}, got \"{}\"", expected, text);
        return "";
      },
      name);
}

// A seed must come back exactly as a report printed it: CLI11's own conversion wraps "-1" and
// saturates 2^64 and up to 2^64 - 1 without a word, which would reproduce a different case.
const CLI::Validator kDecimalSeed =
    number_in_full<std::uint64_t>("SEED", "a decimal seed in [0, 2^64)", [](std::uint64_t) { return true; });
const CLI::Validator kDeviceOrdinal =
    number_in_full<int>("ORDINAL", "a CUDA device ordinal (0, 1, ...)", [](int value) { return value >= 0; });
const CLI::Validator kSeconds = number_in_full<double>("SECONDS", "seconds >= 0 (0: no limit)",
                                                       [](double value) { return std::isfinite(value) && value >= 0; });
const CLI::Validator kPercent = number_in_full<double>("PERCENT", "a percentage from 0 to 100",
                                                       [](double value) { return value >= 0 && value <= 100; });

// Library paths are file paths from the working directory (not dlopen's search path), held
// absolute so that a bundle's replay.sh and environment.json name the same file from elsewhere.
std::string absolute(const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); }

bool python_identifier(const std::string& text) {
  return !text.empty() && !std::isdigit(static_cast<unsigned char>(text[0])) &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

// Each --arg is CONTRACT=PARAMETER, both identifiers; which names the contract has, and whether
// the function has the parameter, the binding says when the kernel is opened.
void check_contract_arguments(const std::vector<std::string>& arguments) {
  for (const std::string& argument : arguments) {
    const std::size_t equals = argument.find('=');
    if (equals == std::string::npos || !python_identifier(argument.substr(0, equals)) ||
        !python_identifier(argument.substr(equals + 1)))
      throw UsageError(
          fmt::format("--arg: expected CONTRACT=PARAMETER (e.g. prefix=prefix_sum), got \"{}\"", argument));
  }
}

// The kernel options checked against each other once parsed.
void check_kernel_options(BackendOptions& options) {
  KernelSpec kernel;
  try {
    kernel = parse_kernel_spec(options.kernel);
  } catch (const KernelSpecError& e) {
    throw UsageError(e.what());
  }
  if (!options.torch_library.empty() && !kernel.takes_option("--torch-library"))
    throw UsageError("--torch-library goes with --kernel " + kernel_form_taking("--torch-library"));
  if (options.signature != "auto" && !kernel.takes_option("--signature"))
    throw UsageError("--signature goes with --kernel " + kernel_form_taking("--signature"));
  if (!options.arguments.empty() && !kernel.takes_option("--arg"))
    throw UsageError("--arg goes with --kernel " + kernel_form_taking("--arg"));
  if (!options.arguments.empty() && options.signature != "auto")
    throw UsageError("--arg binds parameters by name: it goes with --signature auto, not " + options.signature);
  check_contract_arguments(options.arguments);
  if (!options.profile.empty() && !kernel.external())
    throw UsageError(
        "--profile goes with an external --kernel (so:, torch-op: or python:); the built-in kernels declare their own");
  if (!options.profile.empty() && !preset_preconditions(options.profile)) options.profile = absolute(options.profile);
  if (kernel.kind == KernelSpec::Kind::shared_library) {
    kernel.library = absolute(kernel.library);
    options.kernel = kernel.to_string();
  }
  if (!options.torch_library.empty()) options.torch_library = absolute(options.torch_library);
}

}  // namespace

void add_device_option(CommandOptions& command, int& device) {
  command.app()
      ->add_option("--device", device, "CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them)")
      ->check(kDeviceOrdinal)
      ->capture_default_str();
}

void add_backend_options(CommandOptions& command, BackendOptions& options) {
  CLI::App* app = command.app();
  add_device_option(command, options.device);
  app->add_option("--backend", options.backend,
                  "auto: the CUDA device if there is one; cuda; cpu: the CPU stand-ins of both kernels")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  app->add_option("--device-model", options.device_model,
                  "with --backend cpu: the device the dispatcher is told about (sm_90, sm_100, sm_86, none)")
      ->capture_default_str();
  app->add_option("--native-images", options.native_images,
                  "with --backend cpu: native images the modelled build holds (e.g. sm_90a or none)");
  add_kernel_options(command, options);
}

void add_kernel_options(CommandOptions& command, BackendOptions& options) {
  CLI::App* app = command.app();
  app->add_option("--kernel", options.kernel,
                  "run every case on this kernel: native, portable, so:PATH[:SYMBOL] (a shared library behind "
                  "include/attnres/kernel_abi.h), torch-op:NAMESPACE::OP (a torch custom op; see --torch-library) "
                  "or python:MODULE:FUNCTION (see --signature); default: each case's own, auto by the dispatcher");
  app->add_option("--torch-library", options.torch_library,
                  "with --kernel torch-op:...: the shared library that registers the op, loaded first "
                  "(e.g. vllm/_C.abi3.so)");
  app->add_option("--signature", options.signature,
                  "with --kernel python:...: auto (its parameters bound by name to the contract's names, the "
                  "common aliases and --arg), vllm (ten positional arguments, returns the output) or flashinfer "
                  "(six positional tensors, keyword scalars, writes a caller-owned out=)")
      ->check(CLI::IsMember({"auto", "vllm", "flashinfer"}))
      ->capture_default_str();
  app->add_option("--arg", options.arguments,
                  "with --kernel python:... (repeatable): CONTRACT=PARAMETER binds the function's PARAMETER to "
                  "the contract's CONTRACT (prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, "
                  "num_blocks, block_write_idx, eps, output_norm_eps, output), e.g. --arg prefix=prefix_sum")
      ->type_name("CONTRACT=PARAMETER");
  app->add_option("--profile", options.profile,
                  "with an external --kernel: what it declares it refuses, a preset (vllm-op: must refuse rows "
                  "that are not densely packed with the op's exact message; vllm-dispatch, flashinfer: computes "
                  "every layout) or a JSON profile file (docs/plugins.md); default: it must compute every case");
  command.after_parse([&options] { check_kernel_options(options); });
}

void add_timeout_option(CommandOptions& command, BackendOptions& options) {
  command.app()
      ->add_option("--timeout", options.timeout_seconds,
                   "seconds a case run in a worker process (an external kernel; run --devices) may take before the "
                   "worker is killed and the case is an error, so a kernel that hangs costs only its case; 0: no limit")
      ->check(kSeconds)
      ->capture_default_str();
}

void add_report_options(CommandOptions& command, ReportFiles& files) {
  for (const ReportFormat* format : report_formats())
    command.app()->add_option(format->option, files[format->option], format->help);
}

std::optional<std::int64_t> parse_byte_option(const std::string& option, const std::string& text) {
  if (text.empty()) return std::nullopt;
  const std::optional<std::int64_t> bytes = parse_byte_size(text);
  if (!bytes)
    throw UsageError(fmt::format("{}: expected a byte count such as 1073741824, 512M or 8G, got \"{}\"", option, text));
  return bytes;
}

void add_budget_options(CommandOptions& command, MemoryBudget& budget) {
  // Sizes stay text until parsed: CLI11 would take "8G" for no number at all.
  auto host = std::make_shared<std::string>(), device = std::make_shared<std::string>();
  command.app()->add_option("--max-host-memory", *host,
                            "host memory a case may use (bytes, or 512M, 8G ...); default: the memory available");
  command.app()->add_option("--max-device-memory", *device,
                            "device memory a case may use (bytes, or 512M, 8G ...); default: the device's free memory");
  command.after_parse([host, device, &budget] {
    budget.host_bytes = parse_byte_option("--max-host-memory", *host);
    budget.device_bytes = parse_byte_option("--max-device-memory", *device);
  });
}

void add_verbosity_flags(CommandOptions& command, Verbosity& verbosity) {
  auto quiet = std::make_shared<bool>(false), verbose = std::make_shared<bool>(false);
  command.app()->add_flag("-q,--quiet", *quiet,
                          "show only the cases that did not meet their expectations, and the summary");
  command.app()->add_flag("-v,--verbose", *verbose,
                          "show why each case ran as it did and what happened, for every case");
  command.after_parse([quiet, verbose, &verbosity] {
    if (*quiet && *verbose) throw UsageError("-q and -v exclude each other");
    verbosity = *quiet ? Verbosity::quiet : *verbose ? Verbosity::verbose : Verbosity::normal;
  });
}

std::vector<CaseProperty> parse_check_option(const std::vector<std::string>& words) {
  std::vector<CaseProperty> properties;
  for (const std::string& word : words) {
    std::size_t start = 0;
    while (start <= word.size()) {
      const std::size_t end = std::min(word.find(',', start), word.size());
      const std::string name = word.substr(start, end - start);
      start = end + 1;
      if (name == "all") {
        properties = united(properties, {std::begin(kAllCaseProperties), std::end(kAllCaseProperties)});
        continue;
      }
      // Offsets past 32 bits need tensors of gigabytes: they are cases of their own, not a check.
      if (name == "offsets")
        throw UsageError(
            "--check: offsets is no check of each case but a set of cases: run cases/scale (dense blocks and "
            "two-row views whose element offsets straddle 2^31 - 1 and 2^32 - 1, up to 11.8 GB a case)");
      const std::optional<CaseProperty> property = parse_case_property(name);
      if (!property)
        throw UsageError(fmt::format("--check: \"{}\" is no check; the checks are {}, or all", printable(name),
                                     case_property_names()));
      properties = united(properties, {*property});
    }
  }
  return properties;
}

void add_check_option(CommandOptions& command, std::vector<CaseProperty>& properties) {
  auto words = std::make_shared<std::vector<std::string>>();
  command.app()->add_option("--check", *words,
                            "also judge these properties of the kernel on every case, each in its own calls: " +
                                case_property_names() + ", or all (comma-separated or repeated)");
  command.after_parse([words, &properties] { properties = parse_check_option(*words); });
}

void add_case_runner_options(CommandOptions& command, CommonArguments& common) {
  add_check_option(command, common.properties);
  add_backend_options(command, common.backend);
  add_timeout_option(command, common.backend);
  add_budget_options(command, common.budget);
}

void add_one_case_options(CommandOptions& command, std::string& case_path, std::string& case_name,
                          bool& no_layout_guard) {
  command.app()->add_option("case_file", case_path, "case file")->required();
  command.app()->add_option("--case", case_name, "which case of the file (by name)");
  command.app()->add_flag("--no-layout-guard", no_layout_guard, "run without the native kernel's stride guard");
}

void add_seed_option(CommandOptions& command, std::optional<std::uint64_t>& seed, const std::string& help) {
  command.app()->add_option("--seed", seed, help)->check(kDecimalSeed);
}

void add_percent_option(CommandOptions& command, const std::string& name, double& value, const std::string& help) {
  command.app()->add_option(name, value, help)->check(kPercent);
}

std::optional<std::string> bundled_cases_directory() {
  std::error_code ec;
  if (const std::filesystem::path bin = executable_directory(); !bin.empty()) {
    const std::filesystem::path installed = bin.parent_path() / "share" / "attnres-check" / "cases";
    if (std::filesystem::is_directory(installed, ec)) return installed.string();
  }
  if (std::filesystem::is_directory("cases", ec)) return std::string("cases");
  return std::nullopt;
}

void default_to_bundled_cases(CommandOptions& command, std::vector<std::string>& paths) {
  command.after_parse([&paths] {
    if (!paths.empty()) return;
    if (const std::optional<std::string> bundled = bundled_cases_directory()) paths.push_back(*bundled);
  });
}

}  // namespace attnres
