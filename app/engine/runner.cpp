#include "app/engine/runner.h"

#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "kernels/common/checked_size.h"
#include "kernels/common/cuda_check.h"
#include "kernels/registry/kernel_entry.h"

namespace attnres {

CaseSpec judged_spec(const CaseSpec& spec, const KernelPreconditions& declared, std::string& expectation) {
  CaseSpec judged = spec;
  auto message_text = [](const std::string& message) {
    return message.empty() ? std::string("with any message") : "with " + quoted_literal(message);
  };
  if (spec.expectation_written) {
    expectation = spec.expect == Expectation::reject ? "refuse " + message_text(spec.expected_message) : "compute";
    expectation += ": the case file says so";
    return judged;
  }
  const RefusalRule* rule = applicable_refusal(declared, spec.shape, spec.strides);
  if (!rule) {
    judged.expect = Expectation::pass;
    expectation = fmt::format("compute: {} declares no refusal that covers it", declared.source);
    return judged;
  }
  judged.expect = rule->mode == RefusalMode::must ? Expectation::reject : Expectation::pass_or_reject;
  judged.expected_message = rule->message.empty() ? "" : refusal_message(*rule, spec.shape, spec.strides);
  expectation =
      fmt::format("{} {}: {} declares it {}", rule->mode == RefusalMode::must ? "refuse" : "compute or refuse",
                  message_text(judged.expected_message), declared.source, describe(*rule));
  return judged;
}

namespace {

constexpr const char* kContextLost = "not attempted: an earlier fault left the CUDA context unusable";

void judge_rejection(const CaseSpec& spec, const KernelRejection& rejection, CaseResult& result) {
  const std::string message = rejection.what();
  result.rejection = message;
  if (spec.expect == Expectation::pass) {
    result.disposition = Disposition::unexpected_rejection;
    result.detail = "rejected: " + message;
  } else if (!spec.expected_message.empty() && spec.expected_message != message) {
    result.disposition = Disposition::unexpected_rejection;
    result.detail = fmt::format("rejected with another message: got {}, expected {}", quoted_literal(message),
                                quoted_literal(spec.expected_message));
  } else {
    result.disposition = Disposition::rejected_as_expected;
    result.detail = message;
  }
  if (!rejection.kind().empty()) result.detail += fmt::format(" (raised as {})", rejection.kind());
  result.kernel_context = rejection.context();
}

// skipped where the kernel's signature cannot express the problem; not-run where it cannot run here.
Disposition unsupported_disposition(const Unsupported& why) {
  return why.kind == Unsupported::Kind::signature ? Disposition::skipped : Disposition::not_run;
}

// The registry entry a case runs on, and why; or why nothing runs it.
struct Selection {
  KernelEntry* kernel = nullptr;
  LaunchOptions launch;
  std::string reason;
  std::optional<Unsupported> unsupported;
  std::optional<std::string> predicted_rejection;  // the built-in native guard, known before launch
  KernelPreconditions preconditions;               // what the kernel that runs it declares
};

Selection select_kernel(const CaseSpec& spec, const Backend& backend, const RunOptions& options, bool layout_guard) {
  Selection s;
  s.launch.layout_guard = layout_guard;
  const DeviceDescription device = backend.device();
  const AttnResStrides strides = spec.strides;
  if (!options.kernel.empty()) {
    s.kernel = backend.kernels().find(options.kernel);
    if (!s.kernel) throw std::invalid_argument("no kernel named \"" + options.kernel + "\" in the registry");
    s.reason = "--kernel " + options.kernel;
    s.preconditions = s.kernel->preconditions();
    if (s.kernel->operands() != backend.operand_place())
      s.unsupported = Unsupported{
          Unsupported::Kind::here,
          fmt::format("{} takes {} operands, but the {} backend keeps tensors on the {}", s.kernel->name(),
                      s.kernel->operands() == OperandPlace::host ? "host (kDLCPU)" : "CUDA device", backend.name(),
                      backend.operand_place() == OperandPlace::host ? "host" : "CUDA device")};
    else
      s.unsupported = s.kernel->cannot_implement(spec.shape, strides, device);
    return s;
  }
  // `auto` and the built-in choices: the dispatcher's policy over the built-in entries.
  DispatchRequest request;
  request.shape = spec.shape;
  request.strides = strides;
  request.choice = spec.kernel;
  request.layout_guard = layout_guard;
  const DispatchDecision decision = dispatch(device, backend.native_images(), request);
  s.reason = decision.reason;
  s.launch.hard_coded_row_stride = decision.hard_coded_row_stride;
  if (decision.path == KernelPath::none) {
    s.unsupported = Unsupported{Unsupported::Kind::here, decision.reason};
    return s;
  }
  s.kernel = backend.kernels().find(to_string(decision.path));
  s.predicted_rejection = decision.rejection;
  s.preconditions = dispatched_preconditions(decision.path == KernelPath::native, decision.hard_coded_row_stride);
  return s;
}

// Why the case does not fit the memory budget, if it does not.
std::optional<std::string> over_budget(const CaseFootprint& need, const Backend& backend, const RunOptions& options) {
  if (!need.host_bytes || !need.device_bytes) return std::string("its tensor sizes overflow 64-bit byte counts");
  const std::optional<std::int64_t> host =
      options.budget.host_bytes ? options.budget.host_bytes : available_host_memory();
  if (host && *need.host_bytes > *host)
    return fmt::format(
        "needs at most {} of host memory; the budget is {} ({})", describe_bytes(*need.host_bytes),
        describe_bytes(*host),
        options.budget.host_bytes ? "--max-host-memory" : "the memory available; --max-host-memory sets it");
  if (*need.device_bytes == 0) return std::nullopt;
  const std::optional<std::int64_t> device =
      options.budget.device_bytes ? options.budget.device_bytes : backend.free_device_bytes();
  if (device && *need.device_bytes > *device)
    return fmt::format(
        "needs at most {} of device memory; the budget is {} ({})", describe_bytes(*need.device_bytes),
        describe_bytes(*device),
        options.budget.device_bytes ? "--max-device-memory" : "the device's free memory; --max-device-memory sets it");
  return std::nullopt;
}

// Seconds since the last lap.
class Lap {
 public:
  double next() {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return seconds;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// The kernel on the workspace's inputs, judged against its reference. Sets result.comparison
// only where the kernel ran and the reference could judge it.
void judge_kernel(const CaseSpec& spec, const RunOptions& options, CaseWorkspace& workspace,
                  const ReferenceSummary& reference, KernelEntry& kernel, const LaunchOptions& launch,
                  CaseResult& result) {
  Lap lap;
  // A probe call first, with the output poisoned by finite values instead of NaN and with other
  // canaries, different per tensor and element: a kernel that reads its output before writing it
  // (fmaxf(NaN, x) is x) or reads padding leaves other bits than in the judged call, and one that
  // copies or fills canaries shows it. The judged call keeps the one constant canary, so that a
  // report's numbers do not depend on the probe.
  std::optional<ProbeCall> probe;
  auto with_probe_damage = [&](std::vector<Violation>& violations) {
    if (!violations.empty() || !probe) return;
    for (Violation v : probe->canaries_overwritten) {
      v.kind += " (in the probe call, whose canaries differ per tensor and element)";
      violations.push_back(v);
    }
  };
  try {
    if (spec.shape.tokens > 0) probe = workspace.run_probe_call(kernel, launch, spec.seed);
    workspace.run_kernel(kernel, launch);
  } catch (const KernelRejection& e) {
    // Refused at launch (an external kernel's own guard). The ABI's word that no operand was
    // touched is checked, not taken: damage, then a refusal, is the worst silent failure.
    judge_rejection(spec, e, result);
    result.violations = workspace.check_untouched().violations;
    with_probe_damage(result.violations);
    if (!result.violations.empty()) {
      std::string written;
      for (const Violation& v : result.violations) written += "; " + v.to_string();
      result.disposition = Disposition::memory_violation;
      result.detail = fmt::format("refused with {} after writing its operands{}", quoted_literal(e.what()), written);
    }
    return;
  } catch (const KernelFailure& e) {
    result.disposition = Disposition::error;
    result.detail = e.what();
    result.kernel_context = e.context();
    return;
  } catch (const KernelWrongResult& e) {
    result.disposition = spec.expect == Expectation::reject ? Disposition::not_rejected : Disposition::failed;
    result.detail = fmt::format("the kernel ran but returned no usable output: {}", e.what());
    return;
  }
  result.timings.kernel = lap.next();
  // A reference that is not finite is the case's fault (inputs that overflow float64's
  // arithmetic, eps 0 on zero rows): nothing can be judged against it.
  if (reference.first_non_finite) {
    const auto [index, value] = *reference.first_non_finite;
    const std::int64_t hidden = spec.shape.hidden;
    result.disposition = Disposition::error;
    result.detail = fmt::format(
        "reference is not finite at [{}, {}] ({}): the case's inputs leave the contract undefined "
        "there; nothing is judged",
        index / hidden, index % hidden,
        value != value ? "NaN"
        : value > 0    ? "Infinity"
                       : "-Infinity");
    return;
  }
  Comparison comparison = workspace.compare(spec.atol, spec.rtol);
  comparison.reference = reference.name;
  if (options.error_maps && comparison.mismatched) result.error_map = workspace.error_map(spec.atol, spec.rtol);
  result.timings.compare = lap.next();
  const ExactnessReport exactness = workspace.check();
  result.timings.checks = lap.next();
  comparison.prefix_mismatches = exactness.prefix_mismatches;
  comparison.blocks_mismatches = exactness.blocks_mismatches;
  comparison.first_prefix_mismatch = exactness.first_prefix_mismatch;
  comparison.first_blocks_mismatch = exactness.first_blocks_mismatch;
  result.violations = exactness.violations;
  with_probe_damage(result.violations);
  result.comparison = comparison;

  std::string violations;
  for (const Violation& v : result.violations) violations += "; " + v.to_string();
  std::string reads_output;
  if (probe && probe->refused) {
    reads_output =
        "; it refused the same call with the output poisoned with finite values instead of NaN and other canaries";
  } else if (probe) {
    const OutputDifference d = workspace.difference_from_probe_call();
    if (d.count)
      reads_output = fmt::format(
          "; its output depends on memory it must not read: {} of {} elements differ from a probe call "
          "whose output was poisoned with finite values instead of NaN and whose padding and guards "
          "held other canaries (first at [{}, {}]: 0x{:04x} in the probe call, 0x{:04x} in the judged "
          "call); it reads its output or padding, or is not deterministic",
          d.count, comparison.total, d.first_index / spec.shape.hidden, d.first_index % spec.shape.hidden,
          d.first_before, d.first_now);
  }
  if (spec.expect == Expectation::reject) {
    result.disposition = Disposition::not_rejected;
    result.detail = fmt::format("expected a rejection{}, but the kernel ran: {}{}",
                                spec.expected_message.empty() ? "" : " (\"" + spec.expected_message + "\")",
                                describe_comparison(comparison), violations);
  } else if (!result.violations.empty()) {
    result.disposition = Disposition::memory_violation;
    result.detail = violations.substr(2) + "; " + describe_comparison(comparison) + reads_output;
  } else if (!comparison.within_tolerance() || !comparison.exact_state() || comparison.systematic() ||
             !reads_output.empty()) {
    result.disposition = Disposition::failed;
    result.detail = describe_comparison(comparison) + reads_output;
  } else {
    result.disposition = Disposition::passed;
    result.detail = spec.shape.tokens == 0
                        ? "T = 0 (an empty batch): nothing to compute, and the kernel wrote nothing: "
                          "guard regions, padding and inputs unchanged"
                        : describe_comparison(comparison);
  }
}

// `judged_output`: where given, a host copy of the output once the case passed (the properties
// compare against it).
void run_and_judge(const CaseSpec& spec, Backend& backend, const RunOptions& options, KernelEntry& kernel,
                   const LaunchOptions& launch, const InputSource* inputs, CaseResult& result,
                   std::optional<CaseArtifacts>* artifacts, std::optional<HostTensor>* judged_output) {
  Lap lap;
  const std::unique_ptr<CaseWorkspace> workspace = backend.prepare(spec, inputs, artifacts != nullptr);
  result.input_checksums = workspace->input_checksums();
  result.timings.generate = lap.next();
  // The reference runs on the inputs as made, before the kernel changes prefix and blocks; its
  // own steps 1-2 say what they must hold afterwards.
  const ReferenceSummary reference = workspace->compute_reference();
  result.timings.reference = lap.next();
  judge_kernel(spec, options, *workspace, reference, kernel, launch, result);
  if (judged_output && result.disposition == Disposition::passed) *judged_output = workspace->output();
  if (artifacts && result.comparison) *artifacts = workspace->take_artifacts();
}

// One more call of the kernel the case's selection makes for `variant`, in a workspace of its
// own: `make(workspace, kernel, launch)` makes it, and says why the backend cannot, if it cannot.
// True where it ran; else what became of it in `outcome` and `reason`.
template <class Make>
bool make_variant_call(const CaseSpec& variant, const InputSource* inputs, Backend& backend, const RunOptions& options,
                       bool layout_guard, VariantCall::Outcome& outcome, std::string& reason, Make&& make) {
  const Selection selection = select_kernel(variant, backend, options, layout_guard);
  outcome = VariantCall::Outcome::refused;
  if (selection.unsupported) {
    reason = selection.unsupported->reason;
    return false;
  }
  if (selection.predicted_rejection) {
    reason = "refused with " + quoted_literal(*selection.predicted_rejection);
    return false;
  }
  if (const auto why = budget_refusal(variant, backend, options, false, inputs)) {
    outcome = VariantCall::Outcome::not_run;
    reason = *why;
    return false;
  }
  if (!backend.usable()) throw std::runtime_error(kContextLost);
  const std::unique_ptr<CaseWorkspace> workspace = backend.prepare(variant, inputs, false);
  try {
    if (const std::optional<std::string> unavailable = make(*workspace, *selection.kernel, selection.launch)) {
      outcome = VariantCall::Outcome::unavailable;
      reason = *unavailable;
      return false;
    }
  } catch (const KernelRejection& e) {
    reason = "refused with " + quoted_literal(e.what());
    return false;
  } catch (const KernelWrongResult& e) {
    throw std::runtime_error(std::string("it returned no usable output: ") + e.what());
  }
  outcome = VariantCall::Outcome::computed;
  return true;
}

// A VariantCaller call: the output of one more call of the case's kernel, or why it made none.
VariantCall call_variant(const CaseSpec& variant, const InputSource* inputs, VariantLaunch launch, Backend& backend,
                         const RunOptions& options, bool layout_guard) {
  VariantCall call;
  make_variant_call(variant, inputs, backend, options, layout_guard, call.outcome, call.reason,
                    [&](CaseWorkspace& workspace, KernelEntry& kernel, const LaunchOptions& launch_options) {
                      std::optional<std::string> unavailable;
                      switch (launch) {
                        case VariantLaunch::as_judged: workspace.run_kernel(kernel, launch_options); break;
                        case VariantLaunch::behind_late_inputs:
                          unavailable = workspace.run_kernel_behind_late_inputs(kernel, launch_options);
                          break;
                        case VariantLaunch::behind_early_trigger:
                          unavailable = workspace.run_kernel_behind_early_trigger(kernel, launch_options);
                          break;
                      }
                      if (!unavailable) call.output = workspace.output();
                      return unavailable;
                    });
  return call;
}

// The case's call captured in a CUDA graph and replayed once per seed.
GraphCall replay_graph(const CaseSpec& spec, const std::vector<std::uint64_t>& seeds, Backend& backend,
                       const RunOptions& options, bool layout_guard) {
  GraphCall graph;
  try {
    make_variant_call(spec, nullptr, backend, options, layout_guard, graph.outcome, graph.reason,
                      [&](CaseWorkspace& workspace, KernelEntry& kernel, const LaunchOptions& launch_options) {
                        return workspace.run_kernel_in_graph(kernel, launch_options, seeds, spec.atol, spec.rtol,
                                                             graph.replays);
                      });
  } catch (const GraphCaptureError& e) {
    graph.capture_failed = true;
    graph.reason = e.what();
  }
  return graph;
}

// The properties `asked` judged where the call passed (and left `judged_output`), and what they
// make of the case; each not judged where it did not.
void judge_case_properties(const CaseSpec& spec, const std::vector<CaseProperty>& asked, Backend& backend,
                           const RunOptions& options, const InputSource* inputs,
                           const std::optional<HostTensor>& judged_output, CaseResult& result) {
  if (asked.empty()) return;
  if (result.disposition != Disposition::passed || !judged_output) {
    result.properties =
        unjudged_properties(asked, fmt::format("not judged: the case is {}", to_string(result.disposition)));
    return;
  }
  PropertyCallers callers;
  callers.call = [&](const CaseSpec& variant, const InputSource* inputs, VariantLaunch launch) {
    return call_variant(variant, inputs, launch, backend, options, result.layout_guard);
  };
  callers.replay_graph = [&](const CaseSpec& variant, const std::vector<std::uint64_t>& seeds) {
    return replay_graph(variant, seeds, backend, options, result.layout_guard);
  };
  result.properties = judge_properties(spec, asked, *judged_output, callers, inputs);
  // The worst verdict among the properties becomes the case's, with the properties that gave it.
  for (const Disposition worst : {Disposition::failed, Disposition::error, Disposition::not_run}) {
    std::string lines;
    for (const PropertyResult& p : result.properties)
      if (p.disposition == worst)
        lines += fmt::format("{}{}: {}", lines.empty() ? "" : "; ", to_string(p.property), p.detail);
    if (lines.empty()) continue;
    result.disposition = worst;
    result.detail = fmt::format("{}; the call itself passed: {}", lines, result.detail);
    return;
  }
}

}  // namespace

CaseFootprint case_footprint(const CaseSpec& spec, const Backend& backend, bool keeps_artifacts,
                             const InputSource* inputs) {
  const AttnResStrides strides = spec.strides;
  CaseFootprint footprint = backend.footprint(spec.shape, strides, keeps_artifacts, inputs != nullptr);
  const std::optional<std::int64_t> tensors = case_storage_bytes(spec.shape, strides);
  if (!tensors || !footprint.host_bytes) return CaseFootprint{std::nullopt, footprint.device_bytes};
  // A repro bundle's files are built from copies: the inputs, and the tensors after the run with
  // the reference.
  const CheckedSize reference = CheckedSize(spec.shape.tokens) * spec.shape.hidden * CheckedSize(sizeof(double));
  const CheckedSize bundle = keeps_artifacts ? CheckedSize(*tensors) * 2 + reference : CheckedSize(0);
  footprint.host_bytes = (CheckedSize(*footprint.host_bytes) + bundle + (inputs ? inputs->held_bytes : 0)).get();
  return footprint;
}

std::optional<std::string> budget_refusal(const CaseSpec& spec, const Backend& backend, const RunOptions& options,
                                          bool keeps_artifacts, const InputSource* inputs) {
  return over_budget(case_footprint(spec, backend, keeps_artifacts, inputs), backend, options);
}

std::optional<std::string> host_inputs_refusal(const CaseSpec& spec, const Backend& backend,
                                               const RunOptions& options) {
  CaseFootprint need = case_footprint(spec, backend, true);
  need.device_bytes = 0;
  return over_budget(need, backend, options);
}

namespace {

// What a result says of the case and where it runs, before anything runs.
CaseResult result_for(const CaseSpec& spec, const Backend& backend, const RunOptions& options) {
  CaseResult result;
  result.name = spec.name;
  result.seed = spec.seed;
  result.location = spec.location();
  result.backend = backend.name();
  result.device = describe_device(backend.device());
  result.layout_guard = spec.layout_guard && !options.disable_layout_guard;
  return result;
}

void record_exception(CaseResult& result) {
  result.disposition = Disposition::error;
  try {
    throw;
  } catch (const std::bad_alloc&) {
    result.detail = "out of host memory";
  } catch (const std::exception& e) {
    result.detail = e.what();
  }
}

}  // namespace

CaseResult unjudged_result(const CaseSpec& spec, const std::string& backend, const std::string& device,
                           const std::string& kernel, Disposition disposition, const std::string& detail) {
  CaseResult r;
  r.name = spec.name;
  r.location = spec.location();
  r.seed = spec.seed;
  r.backend = backend;
  r.device = device;
  r.kernel = kernel.empty() ? "none" : kernel;
  r.disposition = disposition;
  r.detail = detail;
  return r;
}

CaseResult run_case(const CaseSpec& spec, Backend& backend, const RunOptions& options, const InputSource* inputs,
                    std::optional<CaseArtifacts>* artifacts) {
  const auto start = std::chrono::steady_clock::now();
  CaseResult result = result_for(spec, backend, options);
  const std::vector<CaseProperty> asked = united(options.properties, spec.checks);
  try {
    std::optional<HostTensor> judged_output;
    if (!backend.usable()) {
      result.disposition = Disposition::error;
      result.detail = kContextLost;
    } else {
      const Selection selection = select_kernel(spec, backend, options, result.layout_guard);
      result.kernel = selection.kernel ? selection.kernel->name() : "none";
      result.dispatch_reason = selection.reason;
      if (selection.unsupported) {
        result.disposition = unsupported_disposition(*selection.unsupported);
        result.detail = selection.unsupported->reason;
      } else {
        const CaseSpec judged = judged_spec(spec, selection.preconditions, result.expectation);
        if (selection.predicted_rejection) {
          judge_rejection(judged, KernelRejection(*selection.predicted_rejection), result);
        } else if (const auto why = budget_refusal(spec, backend, options, artifacts != nullptr, inputs)) {
          result.disposition = Disposition::not_run;
          result.detail = "not run: " + *why;
        } else {
          run_and_judge(judged, backend, options, *selection.kernel, selection.launch, inputs, result, artifacts,
                        asked.empty() ? nullptr : &judged_output);
        }
      }
    }
    judge_case_properties(spec, asked, backend, options, inputs, judged_output, result);
  } catch (const std::exception&) {
    record_exception(result);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<CaseResult> run_case_on_kernels(const CaseSpec& spec, Backend& backend, const RunOptions& options,
                                            const std::vector<std::string>& kernels) {
  std::vector<CaseResult> results;
  std::vector<Selection> selections;
  for (const std::string& name : kernels) {
    results.push_back(result_for(spec, backend, options));
    RunOptions one = options;
    one.kernel = name;
    selections.push_back(select_kernel(spec, backend, one, results.back().layout_guard));
    results.back().kernel = name;
    results.back().dispatch_reason = selections.back().reason;
  }
  auto all_not_judged = [&](Disposition disposition, const std::string& detail) {
    for (CaseResult& r : results) {
      r.disposition = disposition;
      r.detail = detail;
    }
  };
  if (!backend.usable()) {
    all_not_judged(Disposition::error, kContextLost);
    return results;
  }
  // The workspace keeps the inputs as made (restore_inputs needs them on the host).
  if (const auto why = budget_refusal(spec, backend, options, true)) {
    all_not_judged(Disposition::not_run, "not run: " + *why);
    return results;
  }
  std::unique_ptr<CaseWorkspace> workspace;
  ReferenceSummary reference;
  Lap lap;
  try {
    workspace = backend.prepare(spec, nullptr, true);
    results.front().input_checksums = workspace->input_checksums();
    results.front().timings.generate = lap.next();
    reference = workspace->compute_reference();
    results.front().timings.reference = lap.next();
  } catch (const std::exception&) {
    record_exception(results.front());
    all_not_judged(results.front().disposition, results.front().detail);
    return results;
  }
  bool used = false;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    CaseResult& result = results[i];
    const auto start = std::chrono::steady_clock::now();
    try {
      if (selections[i].unsupported) {
        result.disposition = unsupported_disposition(*selections[i].unsupported);
        result.detail = selections[i].unsupported->reason;
        continue;
      }
      if (!backend.usable()) throw std::runtime_error(kContextLost);
      if (used) workspace->restore_inputs();
      used = true;
      result.input_checksums = results.front().input_checksums;
      const CaseSpec judged = judged_spec(spec, selections[i].preconditions, result.expectation);
      judge_kernel(judged, options, *workspace, reference, *selections[i].kernel, selections[i].launch, result);
    } catch (const std::exception&) {
      record_exception(result);
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return results;
}

}  // namespace attnres
