#include "app/cli/cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "app/report/git_revision.h"
#include "kernels/common/problem.h"
#include "kernels/external/install_paths.h"
#include "kernels/external/kernel_profile.h"
#include "kernels/external/kernel_spec.h"

namespace attnres {

namespace {

void add_kernel_options(CLI::App* command, BackendOptions& options);

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
// A NaN would make --fail-under never fail.
const CLI::Validator kPercent = number_in_full<double>("PERCENT", "a percentage from 0 to 100",
                                                       [](double value) { return value >= 0 && value <= 100; });

void add_backend_options(CLI::App* command, BackendOptions& options) {
  command->add_option("--device", options.device, "CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them)")
      ->check(kDeviceOrdinal)
      ->capture_default_str();
  command
      ->add_option("--backend", options.backend,
                   "auto: the CUDA device if there is one; cuda; cpu: the CPU stand-ins of both kernels")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  command
      ->add_option("--device-model", options.device_model,
                   "with --backend cpu: the device the dispatcher is told about (sm_90, sm_100, sm_86, none)")
      ->capture_default_str();
  command->add_option("--native-images", options.native_images,
                      "with --backend cpu: native images the modelled build holds (e.g. sm_90a or none)");
  add_kernel_options(command, options);
}

void add_timeout_option(CLI::App* command, BackendOptions& options) {
  command
      ->add_option("--timeout", options.timeout_seconds,
                   "seconds a case run in a worker process (an external kernel; run --devices) may take before the "
                   "worker is killed and the case is an error, so a kernel that hangs costs only its case; 0: no limit")
      ->check(kSeconds)
      ->capture_default_str();
}

void add_kernel_options(CLI::App* command, BackendOptions& options) {
  command->add_option("--kernel", options.kernel,
                      "run every case on this kernel: native, portable, so:PATH[:SYMBOL] (a shared library behind "
                      "include/attnres/kernel_abi.h), torch-op:NAMESPACE::OP (a torch custom op; see --torch-library) "
                      "or python:MODULE:FUNCTION (see --signature); default: each case's own, auto by the dispatcher");
  command->add_option("--torch-library", options.torch_library,
                      "with --kernel torch-op:...: the shared library that registers the op, loaded first "
                      "(e.g. vllm/_C.abi3.so)");
  command
      ->add_option("--signature", options.signature,
                   "with --kernel python:...: vllm (positional arguments, returns the output) or flashinfer "
                   "(keyword scalars, writes a caller-owned out=)")
      ->check(CLI::IsMember({"vllm", "flashinfer"}))
      ->capture_default_str();
  command->add_option("--profile", options.profile,
                      "with an external --kernel: what it declares it refuses, a preset (vllm-op: must refuse rows "
                      "that are not densely packed with the op's exact message; vllm-dispatch, flashinfer: computes "
                      "every layout) or a JSON profile file (docs/plugins.md); default: it must compute every case");
}

// The commands that take one case of one file: repro and shrink.
void add_one_case_options(CLI::App* command, std::string& case_path, std::string& case_name, bool& no_layout_guard) {
  command->add_option("case_file", case_path, "case file")->required();
  command->add_option("--case", case_name, "which case of the file (by name)");
  command->add_flag("--no-layout-guard", no_layout_guard, "run without the native kernel's stride guard");
}

// Sizes such as 8G or 512M (powers of 1024), kept as text until parse() checks them.
struct BudgetText {
  std::string host, device;
};

// One option per report format (app/report/report.h), each naming the file it is written to.
void add_report_options(CLI::App* command, ReportFiles& files) {
  for (const ReportFormat* format : report_formats())
    command->add_option(format->option, files[format->option], format->help);
}

void add_budget_options(CLI::App* command, BudgetText& text) {
  command->add_option("--max-host-memory", text.host,
                      "host memory a case may use (bytes, or 512M, 8G ...); default: the memory available");
  command->add_option("--max-device-memory", text.device,
                      "device memory a case may use (bytes, or 512M, 8G ...); default: the device's free memory");
}

std::optional<std::int64_t> parse_budget(const std::string& option, const std::string& text) {
  if (text.empty()) return std::nullopt;
  const std::optional<std::int64_t> bytes = parse_byte_size(text);
  if (!bytes)
    throw UsageError(fmt::format("{}: expected a byte count such as 1073741824, 512M or 8G, got \"{}\"", option, text));
  return bytes;
}

struct VerbosityFlags {
  bool quiet = false, verbose = false;
  Verbosity resolve() const {
    if (quiet && verbose) throw UsageError("-q and -v exclude each other");
    return quiet ? Verbosity::quiet : verbose ? Verbosity::verbose : Verbosity::normal;
  }
};

void add_verbosity_flags(CLI::App* command, VerbosityFlags& flags) {
  command->add_flag("-q,--quiet", flags.quiet,
                    "show only the cases that did not meet their expectations, and the summary");
  command->add_flag("-v,--verbose", flags.verbose,
                    "show why each case ran as it did and what happened, for every case");
}

// "all", or comma-separated device ordinals (repeats allowed).
void parse_devices(const std::string& text, RunArguments& run) {
  if (text == "all") {
    run.all_devices = true;
    run.devices = {0};
    return;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string word = text.substr(start, end - start);
    int ordinal = -1;
    const auto [last, error] = std::from_chars(word.data(), word.data() + word.size(), ordinal);
    if (word.empty() || error != std::errc() || last != word.data() + word.size() || ordinal < 0)
      throw UsageError(fmt::format("--devices: expected all or device ordinals such as 0,1; got \"{}\"", text));
    run.devices.push_back(ordinal);
    start = end + 1;
  }
}

}  // namespace

std::optional<std::string> bundled_cases_directory() {
  std::error_code ec;
  if (const std::filesystem::path bin = executable_directory(); !bin.empty()) {
    const std::filesystem::path installed = bin.parent_path() / "share" / "attnres-check" / "cases";
    if (std::filesystem::is_directory(installed, ec)) return installed.string();
  }
  if (std::filesystem::is_directory("cases", ec)) return std::string("cases");
  return std::nullopt;
}

Invocation parse(const std::vector<std::string>& args) {
  Invocation inv;
  for (const auto& a : args) inv.command_line += (inv.command_line.empty() ? "" : " ") + a;
  CLI::App app{"attnres-check: verifies the Kimi K3 AttnRes kernel and turns failures into repros", "attnres-check"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ATTNRES_VERSION);

  CLI::App* run = app.add_subcommand("run", "run cases and judge every result against the float64 reference");
  run->add_option("cases", inv.run.paths,
                  "case files or directories (read recursively); default: the bundled cases (installed beside the "
                  "binary, or ./cases)");
  add_report_options(run, inv.run.report_files);
  run->add_option("--filter", inv.run.filters,
                  "run only cases whose name contains this text, or matches it as a glob where it has *, ? or [ "
                  "(repeatable: any of them)");
  run->add_option("--shard", inv.run.shard, "run shard k of n (1-based), e.g. 2/4");
  run->add_flag("--no-layout-guard", inv.run.no_layout_guard,
                "run the native kernel without its stride guard, to show the bug the guard prevents");
  run->add_flag("--allow-not-run", inv.run.allow_not_run, "cases nothing here can run do not fail the exit code");
  run->add_option("--inputs", inv.run.inputs, "replay tensors from this safetensors file (one case)");
  run->add_flag("--no-verify-checksums", inv.run.no_verify_checksums,
                "with --inputs: replay even when the data disagrees with the checksums stored in the file");
  run->add_option("--interesting", inv.run.interesting,
                  "exit 0 iff every case ends with this disposition (a C-Reduce style interestingness test)");
  VerbosityFlags run_verbosity;
  add_verbosity_flags(run, run_verbosity);
  run->add_option("--seed", inv.run.seed, "generate every case's inputs from this seed instead of its own")
      ->check(kDecimalSeed);
  run->add_option("--repeat", inv.run.repeat,
                  "run each case N times: with its own seed (or --seed), then with fresh seeds, each recorded in the "
                  "results")
      ->check(CLI::Range(1, 1000000));
  run->add_flag("--list", inv.run.list, "print the selected cases and what would run each (and why), run nothing");
  run->add_flag("--timings", inv.run.timings,
                "under each case, the seconds spent generating inputs, in the kernel, the reference, the comparison "
                "and the checks (always in the JSON report)");
  run->add_flag("--in-process", inv.run.in_process,
                "run an external kernel in this process rather than a worker process (for a debugger; a crash "
                "then ends the run)");
  add_timeout_option(run, inv.backend);
  std::string devices;
  run->add_option("--devices", devices,
                  "spread the cases over worker processes, one per CUDA device listed (all, or ordinals such as "
                  "0,1; a device listed twice gets two workers), and merge their results in case order");
  add_backend_options(run, inv.backend);
  BudgetText budget;
  add_budget_options(run, budget);

  CLI::App* info = app.add_subcommand("info", "the device, the native images in the build, and each case's path");
  info->add_option("cases", inv.info_paths, "case files or directories");
  add_backend_options(info, inv.backend);

  CLI::App* bench = app.add_subcommand("bench", "time native and portable kernels against a measured copy bandwidth");
  bench->add_option("--tokens", inv.bench.tokens, "token counts to sweep")->capture_default_str();
  bench->add_option("--blocks", inv.bench.blocks, "num_blocks values to sweep")->capture_default_str();
  bench->add_option("--hidden", inv.bench.hidden, "hidden size")->capture_default_str();
  bench->add_option("--repeats", inv.bench.repeats, "timed launches per point (median reported)")
      ->check(CLI::Range(3, 100000))
      ->capture_default_str();
  bench->add_flag("--pdl", inv.bench.pdl,
                  "also time the native kernel launched with programmatic dependent launch (each launch's prologue "
                  "overlapping the previous one's tail)");
  bench->add_flag(
      "--native-plans", inv.bench.native_plans,
      "also time every plan of the native kernel (ring, ring/cp.async, split/<cluster>x<vectors>), not only the one it "
      "picks");
  bench->add_option("--markdown", inv.bench.markdown_path, "also write the table as markdown here");
  bench->add_option("--json", inv.bench.json_path, "also write the results as JSON here");
  bench->add_option("--csv", inv.bench.csv_path, "also write one CSV row per point here");
  add_kernel_options(bench, inv.backend);

  CLI::App* repro = app.add_subcommand("repro", "write a bug-report bundle for a case");
  add_one_case_options(repro, inv.repro.case_path, inv.repro.case_name, inv.repro.no_layout_guard);
  repro->add_option("--out", inv.repro.out_dir, "bundle directory (default repro-<case name>)");
  repro->add_flag("--force", inv.repro.force, "empty the bundle directory first if it holds anything");
  add_backend_options(repro, inv.backend);
  add_timeout_option(repro, inv.backend);
  add_budget_options(repro, budget);

  CLI::App* shrink = app.add_subcommand("shrink", "reduce a case while its disposition stays the same");
  add_one_case_options(shrink, inv.shrink.case_path, inv.shrink.case_name, inv.shrink.no_layout_guard);
  shrink->add_option("--out", inv.shrink.out_path,
                     "where to write the smallest case (default <case name>-shrunk.json in the current directory)");
  shrink->add_option("--verdict", inv.shrink.verdict, "disposition to keep (default: the original case's)");
  add_backend_options(shrink, inv.backend);
  add_timeout_option(shrink, inv.backend);
  add_budget_options(shrink, budget);

  CLI::App* merge =
      app.add_subcommand("merge", "join the JSON reports of --shard k/n jobs (or any runs) into one report");
  merge->add_option("reports", inv.merge.reports, "JSON reports written by run --json")->required();
  add_report_options(merge, inv.merge.report_files);
  merge->add_flag("--allow-not-run", inv.merge.allow_not_run, "cases nothing could run do not fail the exit code");
  VerbosityFlags merge_verbosity;
  add_verbosity_flags(merge, merge_verbosity);

  CLI::App* mutants = app.add_subcommand(
      "mutants", "run deliberately wrong kernels over the cases and report which cases catch which (mutation score)");
  mutants->add_option("cases", inv.mutants.paths, "case files or directories; default: the bundled cases");
  mutants->add_option("--filter", inv.mutants.filters,
                      "only cases whose name contains this text or matches this glob (repeatable)");
  mutants->add_option("--only", inv.mutants.only, "only these mutants (repeatable; names as the table prints them)");
  mutants->add_option("--json", inv.mutants.json_path, "write which cases killed which mutant as JSON here");
  mutants
      ->add_option("--fail-under", inv.mutants.fail_under,
                   "exit 1 when the mutation score (percent of mutants killed) is below this, e.g. 100")
      ->check(kPercent);
  mutants->add_option("--device", inv.backend.device, "CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them)")
      ->check(kDeviceOrdinal);
  mutants
      ->add_option("--backend", inv.backend.backend,
                   "auto: the CUDA device if there is one (mutants of a one-thread-per-token kernel); cpu: the "
                   "same mutants on the host")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  add_budget_options(mutants, budget);

  CLI::App* explore = app.add_subcommand(
      "explore", "run random legal problems on the kernel until one goes wrong, then shrink it into a repro bundle");
  explore->add_option("--budget", inv.explore.budget, "trials before giving up (exit 0: nothing went wrong)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  explore->add_option("--seed", inv.explore.seed, "the exploration's seed (default: fresh, printed)")
      ->check(kDecimalSeed);
  explore->add_option("--out", inv.explore.out_dir, "where the finding's repro bundle goes (default explore-<trial>)");
  explore->add_flag("--force", inv.explore.force, "empty the bundle directory first if it holds anything");
  explore->add_flag("--no-layout-guard", inv.explore.no_layout_guard, "run the native kernel without its stride guard");
  explore->add_option("--max-tokens", inv.explore.max_tokens, "largest T drawn")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  explore->add_option("--max-hidden", inv.explore.max_hidden, "largest H drawn (a multiple of 8)")
      ->check(CLI::Range(8, kMaxHidden))
      ->capture_default_str();
  add_backend_options(explore, inv.backend);
  add_timeout_option(explore, inv.backend);
  add_budget_options(explore, budget);

  // CLI11 takes the words last-first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    inv.help = app.help();
    for (CLI::App* sub : {run, info, bench, repro, shrink, merge, mutants, explore})
      if (sub->parsed()) inv.help = sub->help();
    return inv;
  } catch (const CLI::CallForVersion&) {
    inv.help = fmt::format("attnres-check {} (git {}; native images: {})\n", ATTNRES_VERSION, kGitRevision,
                           ATTNRES_NATIVE_IMAGES);
    return inv;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + " (see --help)");
  }
  if (run->parsed()) inv.command = Command::run;
  inv.run.verbosity = run_verbosity.resolve();
  if (info->parsed()) inv.command = Command::info;
  if (bench->parsed()) inv.command = Command::bench;
  if (repro->parsed()) inv.command = Command::repro;
  if (shrink->parsed()) inv.command = Command::shrink;
  if (merge->parsed()) inv.command = Command::merge;
  if (mutants->parsed()) inv.command = Command::mutants;
  if (explore->parsed()) inv.command = Command::explore;
  if (inv.command == Command::explore && inv.explore.max_hidden % 8)
    throw UsageError("--max-hidden: must be a multiple of 8");
  inv.merge.verbosity = merge_verbosity.resolve();
  if (run->get_option("--devices")->count()) {
    parse_devices(devices, inv.run);
    if (run->get_option("--device")->count()) throw UsageError("--device and --devices exclude each other");
    if (inv.run.in_process) throw UsageError("--devices runs cases in worker processes; --in-process excludes it");
    if (inv.backend.backend == "cpu")
      throw UsageError("--devices spreads cases over CUDA devices; --backend cpu has none");
  }
  inv.budget.host_bytes = parse_budget("--max-host-memory", budget.host);
  inv.budget.device_bytes = parse_budget("--max-device-memory", budget.device);
  KernelSpec kernel;
  try {
    kernel = parse_kernel_spec(inv.backend.kernel);
  } catch (const KernelSpecError& e) {
    throw UsageError(e.what());
  }
  if (!inv.backend.torch_library.empty() && kernel.bridge != "torch")
    throw UsageError("--torch-library goes with --kernel torch-op:NAMESPACE::OP");
  if (!inv.backend.profile.empty() && !kernel.external())
    throw UsageError(
        "--profile goes with an external --kernel (so:, torch-op: or python:); the built-in kernels declare their own");
  if (!inv.backend.profile.empty() && !preset_preconditions(inv.backend.profile))
    inv.backend.profile = std::filesystem::absolute(inv.backend.profile).lexically_normal().string();
  // Library paths are file paths from the working directory (not dlopen's search path), held
  // absolute so that a bundle's replay.sh and environment.json name the same file from elsewhere.
  const auto absolute = [](const std::string& path) {
    return std::filesystem::absolute(path).lexically_normal().string();
  };
  if (kernel.kind == KernelSpec::Kind::shared_library) {
    kernel.library = absolute(kernel.library);
    inv.backend.kernel = kernel.to_string();
  }
  if (!inv.backend.torch_library.empty()) inv.backend.torch_library = absolute(inv.backend.torch_library);
  std::vector<std::string>* const case_paths = inv.command == Command::info      ? &inv.info_paths
                                               : inv.command == Command::run     ? &inv.run.paths
                                               : inv.command == Command::mutants ? &inv.mutants.paths
                                                                                 : nullptr;
  if (case_paths && case_paths->empty())
    if (const std::optional<std::string> bundled = bundled_cases_directory()) case_paths->push_back(*bundled);
  if (inv.command == Command::bench) {
    for (auto t : inv.bench.tokens)
      if (t < 1 || t > kMaxTokens) throw UsageError("--tokens: every value must be in [1, 2^31]");
    for (int b : inv.bench.blocks)
      if (b < 0 || b > 64) throw UsageError("--blocks: every value must be in [0, 64]");
    if (inv.bench.hidden < 8 || inv.bench.hidden > kMaxHidden || inv.bench.hidden % 8)
      throw UsageError("--hidden: must be a multiple of 8 in [8, 65536]");
  }
  return inv;
}

}  // namespace attnres
