#include "app/commands.h"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/bench.h"
#include "app/case_spec.h"
#include "app/file_output.h"
#include "app/git_revision.h"
#include "app/json_io.h"
#include "app/explore.h"
#include "app/merge.h"
#include "app/mutants.h"
#include "app/plugin_kernel.h"
#include "app/repro.h"
#include "app/report.h"
#include "app/runner.h"
#include "app/safetensors.h"
#include "app/worker.h"
#include "kernels/launch.h"

namespace attnres {

namespace {

NativeImages parse_native_images(const std::string& list) {
  NativeImages images;
  if (list == "none") return images;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    const std::string image = list.substr(start, end - start);
    if (image == "sm_90a") images.sm90a = true;
    else if (image == "sm_100a") images.sm100a = true;
    else throw UsageError(fmt::format("--native-images: unknown image \"{}\" (known: sm_90a, sm_100a, none)", image));
    start = end + 1;
  }
  return images;
}

// An external kernel under test replaces `auto` and `native` (the production kernel's role:
// the guard cases name it); a case pinned to the built-in portable kernel tests that kernel,
// so it is left out, with a note.
std::vector<CaseSpec> cases_for_kernel(std::vector<CaseSpec> cases, const std::string& kernel, std::string& notes) {
  if (!is_external_kernel(kernel)) return cases;
  std::vector<CaseSpec> kept;
  int pinned = 0;
  for (auto& c : cases) {
    if (c.kernel == KernelChoice::portable) ++pinned;
    else kept.push_back(std::move(c));
  }
  if (pinned)
    notes += fmt::format("{} case{} pinned to the built-in portable kernel left out: --kernel {} replaces auto and native\n",
                         pinned, pinned == 1 ? "" : "s", kernel);
  return kept;
}


// What the reports say about the run: the backend and device that ran it, and how.
RunContext run_context(const Invocation& inv, std::string backend, std::string device) {
  return RunContext{std::move(backend),
                    std::move(device),
                    compiled_native_images(),
                    inv.command_line,
                    inv.backend.kernel.empty() ? "each case's own (auto: the dispatcher)" : inv.backend.kernel,
                    inv.run.paths,
                    utc_timestamp(),
                    host_name(),
                    inv.run.shard};
}

// Inputs from a safetensors file for the one selected case; a bad file is an error entry
// naming the file and field, and the case is then not run.
std::optional<ReplayInputs> read_replay(const RunArguments& args, const MemoryBudget& budget, CaseSpec& spec,
                                        std::vector<CaseLoadError>& errors) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(args.inputs, ec);
  const std::optional<std::int64_t> host = budget.host_bytes ? budget.host_bytes : available_host_memory();
  if (!ec && host && size > std::uintmax_t(*host)) {
    errors.push_back({args.inputs, "", fmt::format("{} long, more than the host memory budget of {}", describe_bytes(std::int64_t(size)),
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

// One line per case: what would run it (the kernel under test, or the dispatcher's choice) and why.
std::string case_plan(const std::vector<CaseSpec>& cases, const Backend& backend, const std::string& kernel) {
  std::string text;
  const DeviceDescription device = backend.device();
  const KernelEntry* under_test = kernel.empty() ? nullptr : backend.kernels().find(kernel);
  for (const CaseSpec& spec : cases) {
    if (under_test) {
      const auto why = under_test->cannot_implement(spec.shape, spec.strides, device);
      text += fmt::format("  {:<44} {:<9} {}\n", spec.name, why ? "not-run" : "runs", why ? *why : under_test->name());
      continue;
    }
    DispatchRequest request;
    request.shape = spec.shape;
    request.strides = spec.strides;
    request.choice = spec.kernel;
    request.layout_guard = spec.layout_guard;
    const DispatchDecision d = dispatch(device, backend.native_images(), request);
    const std::string path = d.rejection ? "rejected" : d.path == KernelPath::none ? "not-run" : to_string(d.path);
    text += fmt::format("  {:<44} {:<9} {}\n", spec.name, path, d.reason);
  }
  return text;
}

CommandOutput run_command(const Invocation& inv, const Progress& progress, const TextSink& stream) {
  CommandOutput out;
  std::optional<Disposition> interesting;
  if (!inv.run.interesting.empty() && !(interesting = parse_disposition(inv.run.interesting)))
    throw UsageError(fmt::format("--interesting: unknown disposition \"{}\"", inv.run.interesting));
  // A report that cannot be written is found before any case runs.
  require_writable_reports({inv.run.json_path, inv.run.junit_path, inv.run.csv_path, inv.run.html_path});
  LoadedCases loaded = load_cases(inv.run.paths);
  const std::size_t loaded_count = loaded.cases.size();
  std::vector<CaseSpec> cases =
      select_cases(cases_for_kernel(std::move(loaded.cases), inv.backend.kernel, out.notes), inv.run);
  RunOptions options = case_run_options(inv, inv.run.no_layout_guard);
  options.error_maps = !inv.run.html_path.empty();
  cases = with_seeds(std::move(cases), inv.run);

  if (cases.empty() && loaded.errors.empty()) {
    if (inv.run.paths.empty()) out.notes += std::string(kNoBundledCases) + "\n";
    out.notes += fmt::format("no case selected: {} case{} loaded{}\n", loaded_count, loaded_count == 1 ? "" : "s",
                             inv.run.filters.empty() && inv.run.shard.empty() ? "" : ", none matched --filter/--shard");
    out.exit_code = kExitNoCases;
    return out;
  }
  if (inv.run.list) {
    std::unique_ptr<Backend> backend = make_backend(inv.backend, out.notes);
    out.text = case_plan(cases, *backend, inv.backend.kernel);
    for (const CaseLoadError& e : loaded.errors) out.text += fmt::format("  bad case: {}\n", e.to_string());
    out.exit_code = loaded.errors.empty() ? kExitOk : kExitBadInput;
    return out;
  }

  // Each case's rows are printed as soon as it is judged; the header, once the first result
  // says which backend and device ran it.
  TableStyle style{inv.color, inv.run.timings, inv.run.verbosity};
  std::vector<std::string> case_names;
  for (const CaseSpec& c : cases) case_names.push_back(c.name);
  fit_columns(style, case_names, {inv.backend.kernel});
  const auto emit = [&](const std::string& text) {
    if (stream) stream(text);
    else out.text += text;
  };
  std::vector<CaseResult> results;
  RunContext context = run_context(inv, inv.backend.backend, "none (no case ran)");
  const bool spread = !inv.run.devices.empty();
  const std::string devices_label =
      inv.run.all_devices ? "all" : fmt::format("{}", fmt::join(inv.run.devices, ","));
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
  if (!inv.run.inputs.empty()) {
    if (cases.size() != 1)
      throw UsageError(fmt::format("--inputs replays one case, but {} cases were selected (use --filter)", cases.size()));
    replay = read_replay(inv.run, inv.budget, cases[0], loaded.errors);
    if (replay) replay_source = InputSource{[&] { return replay->tensors(); }, replay->held_bytes()};
    else cases.clear();
  }
  const InputSource* inputs = replay_source ? &*replay_source : nullptr;
  if (spread || (is_external_kernel(inv.backend.kernel) && !inv.run.in_process)) {
    // A kernel from elsewhere may take its process down with it, so it runs in a worker
    // process; --devices runs one worker per device listed.
    const BackendMaker maker = [&](int device, std::string& notes) {
      BackendOptions backend = inv.backend;
      if (device < 0) return make_backend(backend, notes);
      backend.device = device;  // --devices: one CUDA device per worker, never the CPU fallback
      return make_backend(backend, notes, "--devices " + devices_label);
    };
    WorkerPlan plan{inv.run.devices, inv.run.all_devices, inv.backend.timeout_seconds, inputs, nullptr};
    if (spread || inv.run.verbosity == Verbosity::verbose)
      plan.started = [&](long pid, const std::string& device) { emit(fmt::format("worker process {} on {}\n", pid, device)); };
    out.notes += run_in_workers(cases, maker, plan, options, progress, judged);
    // The reports name every device that ran a case.
    if (spread) {
      std::vector<std::string> devices;
      for (const CaseResult& r : results)
        if (std::find(devices.begin(), devices.end(), r.device) == devices.end()) devices.push_back(r.device);
      if (!devices.empty()) context.device = fmt::format("{}", fmt::join(devices, "; "));
    }
  } else {
    std::unique_ptr<Backend> backend = make_backend(inv.backend, out.notes);
    context = run_context(inv, backend->name(), describe_device(backend->device()));
    for (std::size_t i = 0; i < cases.size(); ++i) {
      if (progress) progress(int(i), int(cases.size()), cases[i].name);
      judged(run_case(cases[i], *backend, options, inputs));
    }
  }
  if (results.empty()) emit(table_header(context, style));
  out.text += table_footer(results, loaded.errors, style);

  for (const CaseLoadError& e : loaded.errors) out.notes += e.to_string() + "\n";
  if (interesting) {
    bool all = !results.empty();
    for (const auto& r : results) all = all && r.disposition == *interesting;
    out.exit_code = !loaded.errors.empty() ? kExitBadInput : all ? kExitOk : kExitUnmet;
  } else {
    out.exit_code = verdict_exit_code(results, loaded.errors, inv.run.allow_not_run);
  }
  write_reports(results, loaded.errors, context, {inv.run.json_path, inv.run.junit_path, inv.run.csv_path, inv.run.html_path}, out);
  return out;
}

CommandOutput info_command(const Invocation& inv) {
  CommandOutput out;
  std::unique_ptr<Backend> backend = make_backend(inv.backend, out.notes);
  const DeviceDescription device = backend->device();
  const NativeImages images = backend->native_images();
  out.text += fmt::format("attnres-check {} (git {})\n", ATTNRES_VERSION, kGitRevision);
  out.text += fmt::format("backend: {}\n", backend->name());
  out.text += fmt::format("device: {}\n", describe_device(device));
  out.text += fmt::format("native images in this build: {}\n", fmt::join(compiled_native_images(), ", "));
  if (backend->name() == "cuda") {
    const NativeImageQuery query = query_native_image();
    out.text += fmt::format("native image loadable on this device: {} ({})\n", query.loadable ? "yes" : "no", query.detail);
  }
  out.text += fmt::format("dispatcher sees: sm_90a image {}, sm_100a image {}\n", images.sm90a ? "yes" : "no",
                          images.sm100a ? "yes" : "no");
  out.text += fmt::format("kernels in the registry: {}\n", fmt::join(backend->kernels().names(), ", "));
  LoadedCases loaded = load_cases(inv.info_paths);
  if (inv.info_paths.empty()) out.notes += std::string(kNoBundledCases) + "\n";
  out.text += fmt::format("{} cases:\n", loaded.cases.size());
  out.text += case_plan(loaded.cases, *backend, inv.backend.kernel);
  for (const CaseLoadError& e : loaded.errors) out.text += fmt::format("  bad case: {}\n", e.to_string());
  out.exit_code = loaded.errors.empty() ? kExitOk : kExitBadInput;
  return out;
}

}  // namespace

namespace {

// The backend with the kernel --kernel names in its registry: a built-in, or one loaded now.
std::unique_ptr<Backend> with_kernel(std::unique_ptr<Backend> backend, const BackendOptions& options) {
  const std::string& kernel = options.kernel;
  if (kernel.empty() || backend->kernels().find(kernel)) return backend;
  if (!is_external_kernel(kernel))
    throw UsageError(fmt::format("--kernel: unknown kernel \"{}\" (built-in: {}; external: so:PATH[:SYMBOL], "
                                 "torch-op:NAMESPACE::OP, python:MODULE:FUNCTION)",
                                 kernel, fmt::join(backend->kernels().names(), ", ")));
  try {
    backend->add_kernel(load_external_kernel(kernel, {options.torch_library, options.signature, backend->operand_place()}));
  } catch (const PluginError& e) {
    throw UsageError(e.what());
  }
  return backend;
}

}  // namespace

std::vector<CaseSpec> select_cases(std::vector<CaseSpec> cases, const RunArguments& args) {
  if (!args.filters.empty()) {
    // A glob where the pattern has glob characters, else a substring (pytest's -k habit).
    const auto matches = [](const std::string& pattern, const std::string& name) {
      if (pattern.find_first_of("*?[") != std::string::npos) return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
      return name.find(pattern) != std::string::npos;
    };
    std::vector<CaseSpec> kept;
    for (auto& c : cases)
      for (const auto& pattern : args.filters)
        if (matches(pattern, c.name)) {
          kept.push_back(std::move(c));
          break;
        }
    cases = std::move(kept);
  }
  if (!args.shard.empty()) {
    const std::optional<Shard> shard = parse_shard(args.shard);
    if (!shard) throw UsageError(fmt::format("--shard: expected k/n with 1 <= k <= n, got \"{}\"", args.shard));
    std::vector<CaseSpec> kept;
    for (std::size_t i = 0; i < cases.size(); ++i)
      if (int(i % std::size_t(shard->n)) == shard->k - 1) kept.push_back(std::move(cases[i]));
    cases = std::move(kept);
  }
  return cases;
}

RunOptions case_run_options(const Invocation& inv, bool no_layout_guard) {
  RunOptions options;
  options.disable_layout_guard = no_layout_guard;
  options.budget = inv.budget;
  options.kernel = inv.backend.kernel;
  return options;
}

int verdict_exit_code(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      bool allow_not_run) {
  if (!load_errors.empty()) return kExitBadInput;
  const RunSummary summary = summarize(results, load_errors);
  const int not_run = summary.by_disposition[int(Disposition::not_run)];
  return summary.total - summary.met - (allow_not_run ? not_run : 0) == 0 ? kExitOk : kExitUnmet;
}

void write_reports(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                   const RunContext& context, const ReportPaths& paths, CommandOutput& out) {
  // The table is already made: a report that fails to write costs only itself.
  auto write_report = [&](const std::string& path, auto&& content) {
    if (path.empty()) return;
    try {
      write_file_atomically(path, content());
    } catch (const std::exception& e) {
      out.notes += fmt::format("report not written: {}\n", e.what());
      if (out.exit_code == kExitOk) out.exit_code = kExitUnmet;
    }
  };
  write_report(paths.json, [&] { return dump_json(report_json(results, load_errors, context), 2) + "\n"; });
  write_report(paths.junit, [&] { return junit_xml(results, load_errors, context); });
  write_report(paths.csv, [&] { return results_csv(results); });
  write_report(paths.html, [&] { return html_page(results, load_errors, context); });
}

void require_writable_reports(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    try {
      require_writable(path);
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("report {}", e.what()));
    }
  }
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string& note, const std::string& cuda_required_by) {
  if (options.backend == "cpu") {
    const std::optional<DeviceDescription> model = parse_device_model(options.device_model);
    if (!model) throw UsageError(fmt::format("--device-model: expected sm_<major><minor> or none, got \"{}\"", options.device_model));
    const NativeImages images = options.native_images ? parse_native_images(*options.native_images) : native_images_from_build();
    return with_kernel(make_cpu_backend(*model, images), options);
  }
  if (options.native_images) throw UsageError("--native-images applies to --backend cpu only");
  std::string why;
  std::unique_ptr<Backend> backend;
  try {
    backend = make_cuda_backend(why, options.device);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (!backend) {
    if (!cuda_required_by.empty()) throw std::runtime_error(cuda_required_by + ": " + why);
    if (options.backend == "cuda") throw std::runtime_error("--backend cuda: " + why);
    note += fmt::format("{}: every case is not-run; --backend cpu runs the CPU stand-ins of both kernels\n", why);
    backend = make_cpu_backend(DeviceDescription{}, NativeImages{});
  }
  return with_kernel(std::move(backend), options);
}

CaseSpec load_single_case(const std::string& path, const std::string& name) {
  LoadedCases loaded = load_cases({path});
  if (!loaded.errors.empty()) throw CaseParseError(loaded.errors.front());
  std::vector<CaseSpec> matches;
  for (auto& c : loaded.cases)
    if (name.empty() || c.name == name) matches.push_back(std::move(c));
  if (matches.empty()) throw UsageError(fmt::format("{}: no case named \"{}\"", path, name));
  if (matches.size() > 1) throw UsageError(fmt::format("{}: holds {} cases; choose one with --case NAME", path, matches.size()));
  return std::move(matches.front());
}

CommandOutput execute(const Invocation& inv, const Progress& progress, const TextSink& stream) {
  switch (inv.command) {
    case Command::run: return run_command(inv, progress, stream);
    case Command::info: return info_command(inv);
    case Command::bench: return bench_command(inv.bench, inv.backend);
    case Command::repro: return repro_command(inv);
    case Command::shrink: return shrink_command(inv);
    case Command::merge: return merge_command(inv);
    case Command::mutants: return mutants_command(inv, progress);
    case Command::explore: return explore_command(inv, progress);
  }
  return {};
}

}  // namespace attnres
