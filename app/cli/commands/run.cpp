#include "app/cli/commands/run.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>

#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/bundle/failure_bundles.h"
#include "app/casefile/case_spec.h"
#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "app/casefile/safetensors.h"
#include "app/cli/command_support.h"
#include "app/engine/interrupt.h"
#include "app/engine/runner.h"
#include "app/report/report.h"
#include "app/workers/make_case_runner.h"
#include "app/workers/sanitizer.h"
#include "app/workers/worker.h"
#include "kernels/external/plugin_kernel.h"

namespace attnres {

namespace {

// Under --kernel every selected case runs on that kernel, a case pinned to a built-in kernel too:
// it is a problem to be computed (or refused as the kernel declares), whichever kernel it was
// written for.
void note_pinned_cases(const std::vector<CaseSpec>& cases, const std::string& kernel, std::string& notes) {
  if (kernel.empty()) return;
  const auto pinned =
      std::count_if(cases.begin(), cases.end(), [](const CaseSpec& c) { return c.kernel != KernelChoice::automatic; });
  if (pinned)
    notes += fmt::format("{} case{} pinned to a built-in kernel run{} on --kernel {}\n", pinned, pinned == 1 ? "" : "s",
                         pinned == 1 ? "s" : "", kernel);
}

// What the reports say about the run: the backend and device that ran it, and how.
RunContext run_context(const RunArguments& args, const CommonArguments& common, std::string backend,
                       std::string device) {
  return RunContext{std::move(backend),
                    std::move(device),
                    compiled_native_images(),
                    common.command_line,
                    common.backend.kernel.empty() ? "each case's own (auto: the dispatcher)" : common.backend.kernel,
                    args.paths,
                    utc_timestamp(),
                    host_name(),
                    args.shard};
}

// Inputs from a safetensors file for the one selected case; a bad file is an error entry
// naming the file and field, and the case is then not run.
std::optional<ReplayInputs> read_replay(const RunArguments& args, const MemoryBudget& budget, CaseSpec& spec,
                                        std::vector<CaseLoadError>& errors) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(args.inputs, ec);
  const std::optional<std::int64_t> host = budget.host_bytes ? budget.host_bytes : available_host_memory();
  if (!ec && host && size > std::uintmax_t(*host)) {
    errors.push_back({args.inputs, "",
                      fmt::format("{} long, more than the host memory budget of {}", describe_bytes(std::int64_t(size)),
                                  describe_bytes(*host))});
    return std::nullopt;
  }
  try {
    return ReplayInputs(read_safetensors(args.inputs), args.inputs, spec, !args.no_verify_checksums);
  } catch (const SafetensorsError& e) {
    errors.push_back({e.file(), e.field(), e.message()});
  } catch (const std::bad_alloc&) {
    errors.push_back({args.inputs, "", "out of host memory while reading it"});
  }
  return std::nullopt;
}

// --seed replaces every case's seed; --repeat N runs each case N times, the repeats ("name#2",
// ...) on fresh seeds that the results record.
std::vector<CaseSpec> with_seeds(std::vector<CaseSpec> cases, const RunArguments& args) {
  if (args.seed)
    for (CaseSpec& c : cases) c.seed = *args.seed;
  if (args.repeat <= 1) return cases;
  std::mt19937_64 fresh{std::random_device{}()};
  std::vector<CaseSpec> repeated;
  for (const CaseSpec& c : cases) {
    repeated.push_back(c);
    for (int k = 2; k <= args.repeat; ++k) {
      CaseSpec again = c;
      again.seed = fresh();
      again.name = fmt::format("{}#{}", c.name, k);
      repeated.push_back(std::move(again));
    }
  }
  return repeated;
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

CommandOptions add_run_command(CLI::App& app, RunArguments& args, CommonArguments& common) {
  CommandOptions command(app.add_subcommand("run", "run cases and judge every result against the float64 reference"));
  CLI::App* run = command.app();
  run->add_option("cases", args.paths,
                  "case files or directories (read recursively); default: the bundled cases (installed beside the "
                  "binary, or ./cases)");
  add_report_options(command, args.report_files);
  run->add_option("--filter", args.filters,
                  "run only cases whose name contains this text, or matches it as a glob where it has *, ? or [ "
                  "(repeatable: any of them)");
  run->add_option("--shard", args.shard, "run shard k of n (1-based), e.g. 2/4");
  run->add_flag("--no-layout-guard", args.no_layout_guard,
                "run the native kernel without its stride guard, to show the bug the guard prevents");
  run->add_flag("--allow-not-run", args.allow_not_run, "cases nothing here can run do not fail the exit code");
  run->add_option("--inputs", args.inputs, "replay tensors from this safetensors file (one case)");
  run->add_flag("--no-verify-checksums", args.no_verify_checksums,
                "with --inputs: replay even when the data disagrees with the checksums stored in the file");
  run->add_option("--interesting", args.interesting,
                  "exit 0 iff every case ends with this disposition (a C-Reduce style interestingness test)");
  add_verbosity_flags(command, args.verbosity);
  add_seed_option(command, args.seed, "generate every case's inputs from this seed instead of its own");
  run->add_option("--repeat", args.repeat,
                  "run each case N times: with its own seed (or --seed), then with fresh seeds, each recorded in the "
                  "results")
      ->check(CLI::Range(1, 1000000));
  run->add_flag("--list", args.list, "print the selected cases and what would run each (and why), run nothing");
  run->add_flag("--timings", args.timings,
                "under each case, the seconds spent generating inputs, in the kernel, the reference, the comparison "
                "and the checks (always in the JSON report)");
  run->add_flag("--in-process", args.in_process,
                "run an external kernel in this process rather than a worker process (for a debugger; a crash "
                "then ends the run)");
  add_timeout_option(command, common.backend);
  add_check_option(command, common.properties);
  auto devices = std::make_shared<std::string>();
  run->add_option("--devices", *devices,
                  "spread the cases over worker processes, one per CUDA device listed (all, or ordinals such as "
                  "0,1; a device listed twice gets two workers), and merge their results in case order");
  auto sanitizer_tools = std::vector<std::string>(std::begin(kSanitizerTools), std::end(kSanitizerTools));
  run->add_option("--sanitizer", args.sanitizer,
                  "run each case in a fresh worker process under NVIDIA compute-sanitizer with this tool (memcheck, "
                  "racecheck, synccheck or initcheck; $ATTNRES_COMPUTE_SANITIZER or on PATH): a case whose process "
                  "it finds an error in is a hazard, naming the tool's report")
      ->check(CLI::IsMember(sanitizer_tools));
  run->add_option("--sanitizer-reports", args.sanitizer_reports,
                  "with --sanitizer: a new or empty directory for every case's report (<case>.txt); default: a new "
                  "directory under $TMPDIR that keeps the reports of the hazards only");
  run->add_option("--repro-dir", args.repro_dir,
                  "write a repro bundle of each case that did not meet its expectation into this new or empty "
                  "directory (DIR/<case>/, listed in DIR/index.json), with the kernel and flags of this run");
  auto repro_max_bytes = std::make_shared<std::string>();
  run->add_option("--repro-max-bytes", *repro_max_bytes,
                  "with --repro-dir: what the bundles may take in all (bytes, or 512M, 8G ...; default 2G): the "
                  "first failures' bundles are written, the rest listed");
  add_backend_options(command, common.backend);
  add_budget_options(command, common.budget);
  default_to_bundled_cases(command, args.paths);
  command.after_parse([repro_max_bytes, &args] {
    if (const std::optional<std::int64_t> bytes = parse_byte_option("--repro-max-bytes", *repro_max_bytes)) {
      if (args.repro_dir.empty()) throw UsageError("--repro-max-bytes goes with --repro-dir");
      args.repro_max_bytes = *bytes;
    }
    if (!args.repro_dir.empty() && !args.inputs.empty())
      throw UsageError("--repro-dir bundles cases made from their seeds; a run with --inputs replays a bundle already");
  });
  command.after_parse([run, devices, &args, &common] {
    if (!run->get_option("--devices")->count()) return;
    parse_devices(*devices, args);
    if (run->get_option("--device")->count()) throw UsageError("--device and --devices exclude each other");
    if (args.in_process) throw UsageError("--devices runs cases in worker processes; --in-process excludes it");
    if (common.backend.backend == "cpu")
      throw UsageError("--devices spreads cases over CUDA devices; --backend cpu has none");
  });
  command.after_parse([&args, &common] {
    if (args.sanitizer.empty()) {
      if (!args.sanitizer_reports.empty()) throw UsageError("--sanitizer-reports goes with --sanitizer");
      return;
    }
    // Each case runs from its seed in a process of its own, on the one device the options name.
    if (args.in_process) throw UsageError("--sanitizer runs each case in a worker process; --in-process excludes it");
    if (!args.devices.empty()) throw UsageError("--sanitizer runs one case at a time; --devices excludes it");
    if (!args.inputs.empty()) throw UsageError("--sanitizer runs each case from its seed; --inputs excludes it");
    if (common.backend.backend == "cpu")
      throw UsageError("--sanitizer checks what runs on a CUDA device; --backend cpu runs nothing there");
  });
  return command;
}

CommandOutput run_command(const RunArguments& args, const CommonArguments& common, const Progress& progress,
                          const TextSink& stream) {
  CommandOutput out;
  std::optional<Disposition> interesting;
  if (!args.interesting.empty() && !(interesting = parse_disposition(args.interesting)))
    throw UsageError(fmt::format("--interesting: unknown disposition \"{}\"", args.interesting));
  LoadedCases loaded = load_cases(args.paths);
  for (const std::string& line : loaded.opted_out) out.notes += line + "\n";
  // A report that cannot be written, or would overwrite an input, is found before any case runs.
  std::vector<NamedPath> input_files = case_file_inputs(loaded);
  input_files.emplace_back("--inputs file", args.inputs);
  require_writable_reports(named_report_files(args.report_files), input_files);
  if (!args.repro_dir.empty() && !args.list) claim_empty_directory("--repro-dir", args.repro_dir);
  const std::size_t loaded_count = loaded.cases.size();
  std::vector<CaseSpec> selected = select_cases(std::move(loaded.cases), args.filters, args.shard);
  const bool none_matched = selected.empty() && !(args.filters.empty() && args.shard.empty());
  note_pinned_cases(selected, common.backend.kernel, out.notes);
  std::vector<CaseSpec> cases = std::move(selected);
  RunOptions options = case_run_options(common, args.no_layout_guard);
  options.error_maps = reports_need_error_maps(args.report_files);
  cases = with_seeds(std::move(cases), args);

  if (cases.empty() && loaded.errors.empty()) {
    if (args.paths.empty()) out.notes += std::string(kNoBundledCases) + "\n";
    out.notes += fmt::format("no case selected: {} case{} loaded{}\n", loaded_count, loaded_count == 1 ? "" : "s",
                             none_matched ? ", none matched --filter/--shard" : "");
    out.exit_code = kExitNoCases;
    return out;
  }
  if (args.list) {
    std::unique_ptr<Backend> backend = make_backend(common.backend, out.notes);
    out.text = case_plan(cases, loaded.errors, *backend, common.backend.kernel);
    out.exit_code = loaded.errors.empty() ? kExitOk : kExitBadInput;
    return out;
  }

  // Each case's rows are printed as soon as it is judged; the header, once the first result
  // says which backend and device ran it.
  TableStyle style{common.color, args.timings, args.verbosity};
  std::vector<std::string> case_names;
  for (const CaseSpec& c : cases) case_names.push_back(c.name);
  fit_columns(style, case_names, {common.backend.kernel});
  const auto emit = [&](const std::string& text) {
    if (stream)
      stream(text);
    else
      out.text += text;
  };
  std::vector<CaseResult> results;
  RunContext context = run_context(args, common, common.backend.backend, "none (no case ran)");
  const bool spread = !args.devices.empty();
  const std::string devices_label = args.all_devices ? "all" : fmt::format("{}", fmt::join(args.devices, ","));
  const auto judged = [&](const CaseResult& r) {
    if (results.empty()) {
      context.backend = r.backend;
      context.device = spread ? fmt::format("per case (--devices {})", devices_label) : r.device;
      emit(table_header(context, style));
    }
    const auto start = std::chrono::steady_clock::now();
    emit(table_rows(r, style));
    results.push_back(r);
    results.back().timings.report = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // --inputs: the one selected case replays tensors from a file, read here before any worker is
  // forked (a worker's copy of this process holds them); a bad file runs nothing.
  std::optional<ReplayInputs> replay;
  std::optional<InputSource> replay_source;
  if (!args.inputs.empty()) {
    if (cases.size() != 1)
      throw UsageError(
          fmt::format("--inputs replays one case, but {} cases were selected (use --filter)", cases.size()));
    replay = read_replay(args, common.budget, cases[0], loaded.errors);
    if (replay)
      replay_source = InputSource{[&] { return replay->tensors(); }, replay->held_bytes()};
    else
      cases.clear();
  }
  const InputSource* inputs = replay_source ? &*replay_source : nullptr;
  if (!args.sanitizer.empty()) {
    const SanitizerPlan plan = make_sanitizer_plan(args.sanitizer, args.sanitizer_reports);
    std::unique_ptr<CaseRunner> runner = make_sanitized_runner(plan, common.backend, options, out.notes);
    context = run_context(args, common, runner->backend_name(), runner->device_description());
    for (std::size_t i = 0; i < cases.size() && !interrupt_signal(); ++i) {
      if (progress) progress(int(i), int(cases.size()), cases[i].name);
      judged(runner->run(cases[i], options.disable_layout_guard));
    }
    finish_sanitizer_reports(plan, out.notes);
  } else if (spread || (is_external_kernel(common.backend.kernel) && !args.in_process)) {
    // A kernel from elsewhere may take its process down with it, so it runs in a worker
    // process; --devices runs one worker per device listed.
    const BackendMaker maker = [&](int device, std::string& notes) {
      BackendOptions backend = common.backend;
      if (device < 0) return make_backend(backend, notes);
      backend.device = device;  // --devices: one CUDA device per worker, never the CPU fallback
      return make_backend(backend, notes, "--devices " + devices_label);
    };
    WorkerPlan plan{args.devices, args.all_devices, common.backend.timeout_seconds, inputs, nullptr};
    if (spread || args.verbosity == Verbosity::verbose)
      plan.started = [&](long pid, const std::string& device) {
        emit(fmt::format("worker process {} on {}\n", pid, device));
      };
    out.notes += run_in_workers(cases, maker, plan, options, progress, judged);
    // The reports name every device that ran a case.
    if (spread) {
      std::vector<std::string> devices;
      for (const CaseResult& r : results)
        if (std::find(devices.begin(), devices.end(), r.device) == devices.end()) devices.push_back(r.device);
      if (!devices.empty()) context.device = fmt::format("{}", fmt::join(devices, "; "));
    }
  } else {
    std::unique_ptr<Backend> backend = make_backend(common.backend, out.notes);
    context = run_context(args, common, backend->name(), describe_device(backend->device()));
    for (std::size_t i = 0; i < cases.size() && !interrupt_signal(); ++i) {
      if (progress) progress(int(i), int(cases.size()), cases[i].name);
      judged(run_case(cases[i], *backend, options, inputs));
    }
  }
  // SIGINT or SIGTERM: what was not judged is said to be so, and the reports are still written.
  const int signal = interrupt_signal();
  for (std::size_t i = results.size(); signal && i < cases.size(); ++i)
    judged(unjudged_result(cases[i], context.backend, context.device, common.backend.kernel, Disposition::not_run,
                           interrupted_detail(signal)));
  if (results.empty()) emit(table_header(context, style));
  out.text += table_footer(results, loaded.errors, style);

  for (const CaseLoadError& e : loaded.errors) out.notes += printable(e.to_string()) + "\n";
  if (interesting) {
    bool all = !results.empty();
    for (const auto& r : results) all = all && r.disposition == *interesting;
    out.exit_code = !loaded.errors.empty() ? kExitBadInput : all ? kExitOk : kExitUnmet;
  } else {
    out.exit_code = verdict_exit_code(results, loaded.errors, args.allow_not_run);
    if (out.exit_code == kExitNoCases) out.notes += std::string(kJudgedNothing) + "\n";
  }
  write_reports(results, loaded.errors, context, args.report_files, out);
  // A bundle runs its case again, so an interrupted run writes none.
  if (!args.repro_dir.empty() && !signal)
    write_failure_bundles(
        cases, results, [&] { return make_case_runner(common.backend, options, out.notes); }, args.repro_dir,
        args.repro_max_bytes, out);
  if (signal) {
    out.notes +=
        fmt::format("interrupted by {}: the cases not judged are not-run (interrupted) in the table and reports\n",
                    signal_name(signal));
    out.exit_code = 128 + signal;
  }
  return out;
}

}  // namespace attnres
