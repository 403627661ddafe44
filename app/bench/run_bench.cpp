#include "app/bench/run_bench.h"

#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "app/bench/input_sets.h"
#include "app/bench/timing.h"
#include "app/engine/backend.h"
#include "app/engine/command_output.h"
#include "kernels/builtin/dispatch.h"
#include "kernels/external/kernel_spec.h"
#include "kernels/external/plugin_kernel.h"
#include "kernels/native/launch_native.h"
#include "kernels/native/native_plan.h"
#include "reference/cublas_reference.h"

namespace attnres {

namespace {

// The kernel --kernel names, loaded for the device; nullptr without --kernel.
std::unique_ptr<KernelEntry> kernel_under_test(const BackendOptions& options) {
  if (options.kernel.empty()) return nullptr;
  if (!is_external_kernel(options.kernel))
    throw UsageError(
        "bench --kernel: native and portable are always timed; name an external kernel (so:, torch-op:, python:)");
  std::unique_ptr<KernelEntry> entry;
  try {
    entry = load_external_kernel(parse_kernel_spec(options.kernel),
                                 {options.torch_library, bridge_signature(options), OperandPlace::cuda_device});
  } catch (const KernelSpecError& e) {
    throw UsageError(e.what());
  } catch (const PluginError& e) {
    throw UsageError(e.what());
  }
  if (entry->operands() != OperandPlace::cuda_device)
    throw UsageError(
        fmt::format("bench --kernel {}: it takes host operands; bench times CUDA kernels", options.kernel));
  return entry;
}

// Checked, then timed by replays of a graph of kLaunchesPerGraph calls captured as its framework
// captures (a Python kernel under torch.cuda.graph); a kernel that cannot be captured is timed
// with events instead, and one that refuses is recorded with its message.
Measurement measure_external(InputSets& sets, const DeviceBuffer<double>& reference,
                             const std::vector<bf16_bits>& pristine, int repeats, cudaStream_t stream,
                             KernelEntry& entry) {
  const Launcher launch = [&entry](const AttnResArgs& a, cudaStream_t s) { entry.launch(a, LaunchOptions{}, s); };
  Measurement m;
  try {
    m.check = check_kernel(sets, reference, pristine, launch);
    std::vector<AttnResArgs> calls;
    for (int i = 0; i < kLaunchesPerGraph; ++i) calls.push_back(sets.args(i % sets.count));
    try {
      const std::unique_ptr<CapturedCall> captured = entry.capture(calls, LaunchOptions{}, stream);
      m.median_ms = time_replays(repeats, kLaunchesPerGraph, stream, [&](cudaStream_t s) { captured->replay(s); });
    } catch (const GraphCaptureError&) {
      m.timed = "events";
    }
  } catch (const KernelRejection& e) {
    m.check = std::string("REFUSED: ") + e.what();
    return m;
  }
  if (m.timed == "events") m.median_ms = time_kernel_with_events(sets, repeats, launch);
  return m;
}

}  // namespace

BenchResults run_bench(const BenchRequest& request, const BackendOptions& kernel_options) {
  std::string why;
  std::unique_ptr<Backend> backend = make_cuda_backend(why);
  if (!backend) throw std::runtime_error("bench needs a CUDA device: " + why);
  const DeviceDescription device = backend->device();
  const std::unique_ptr<KernelEntry> under_test = kernel_under_test(kernel_options);
  cudaDeviceProp props{};
  ATTNRES_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
  Events events;
  BenchResults results;
  results.device = device.name;
  results.arch = device_arch(device);
  results.hidden = request.hidden;
  results.repeats = request.repeats;
  results.pdl = request.pdl;
  results.copy_bandwidth = copy_bandwidth(events);
  if (under_test) results.kernel = kernel_options.kernel;
  if (request.native_plans)
    for (const native::Plan& plan : native::all_plans(request.hidden)) results.plans.push_back(native::to_string(plan));
  Stream stream;
  for (const int nb : request.blocks)
    for (const std::int64_t tokens : request.tokens) {
      AttnResShape shape;
      shape.tokens = tokens;
      shape.hidden = request.hidden;
      shape.max_blocks = nb;
      shape.num_blocks = nb;
      shape.has_delta = true;
      shape.has_output_norm = true;
      InputSets sets = make_sets(shape, std::size_t(props.l2CacheSize));
      BenchPoint point;
      point.tokens = tokens;
      point.num_blocks = nb;
      point.hidden = request.hidden;
      point.bytes = double(tokens) * request.hidden * sizeof(bf16_bits) * (2 + nb + 2);
      const AttnResArgs a0 = sets.args(0);
      std::vector<bf16_bits> pristine(std::size_t(tokens * request.hidden));
      ATTNRES_CUDA_CHECK(
          cudaMemcpy(pristine.data(), a0.prefix, pristine.size() * sizeof(bf16_bits), cudaMemcpyDeviceToHost));
      // The reference synchronises before it returns, so CUDA events around it time it end to end;
      // the first point also pays for a warm-up call (cuBLAS handle, module load).
      if (results.points.empty()) cublas_reference(a0, nullptr);
      DeviceBuffer<double> reference;
      point.cublas_reference_ms = events.time_ms(nullptr, [&] { reference = cublas_reference(a0, nullptr); });

      DispatchRequest dispatch_request;
      dispatch_request.shape = shape;
      dispatch_request.strides = a0.strides;
      const DispatchDecision decision = dispatch(device, backend->native_images(), dispatch_request);
      // The registry's entries, launched as the runner launches them (native with its guard).
      const auto entry_launcher = [&](const char* name, LaunchOptions options = {}) -> Launcher {
        KernelEntry* entry = backend->kernels().find(name);
        return [entry, options](const AttnResArgs& a, cudaStream_t s) { entry->launch(a, options, s); };
      };
      const auto measure = [&](const Launcher& launch) {
        Measurement m;
        m.check = check_kernel(sets, reference, pristine, launch);
        m.median_ms = time_kernel(sets, request.repeats, stream.get(), launch);
        return m;
      };
      point.same_bytes_copy_ms = time_copy_of_the_same_bytes(point.bytes, sets.count, request.repeats, stream.get());
      point.portable = measure(entry_launcher("portable"));
      if (decision.path == KernelPath::native && !decision.rejection) {
        const native::Plan chosen = native::choose_plan(tokens, nb, request.hidden);
        point.native_plan = native::to_string(chosen);
        point.native.measured = measure(entry_launcher("native"));
        if (request.pdl) {
          LaunchOptions pdl;
          pdl.programmatic_dependent_launch = true;
          point.native_pdl = measure(entry_launcher("native", pdl));
        }
        if (request.native_plans)
          for (const native::Plan& plan : native::all_plans(request.hidden)) {
            const auto plan_launcher = [plan](bool pdl) -> Launcher {
              return [plan, pdl](const AttnResArgs& a, cudaStream_t s) {
                NativeLaunchOptions options;
                options.plan = plan;
                options.programmatic_dependent_launch = pdl;
                launch_native(a, options, s);
              };
            };
            PlanMeasurement& timed = point.native_plans.emplace_back();
            timed.plan = native::to_string(plan);
            timed.plain = measure(plan_launcher(false));
            if (request.pdl) timed.with_pdl = measure(plan_launcher(true));
          }
      } else {
        point.native.not_run = decision.reason;
      }
      if (under_test) {
        KernelAtPoint& kernel = point.kernel.emplace();
        if (const auto cannot = under_test->cannot_implement(shape, a0.strides, device))
          kernel.not_run = cannot->reason;
        else
          kernel.measured = measure_external(sets, reference, pristine, request.repeats, stream.get(), *under_test);
      }
      results.points.push_back(std::move(point));
    }
  return results;
}

}  // namespace attnres
