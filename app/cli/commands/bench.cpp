#include "app/cli/commands/bench.h"

#include <algorithm>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/casefile/file_output.h"
#include "app/cli/command_support.h"
#include "app/engine/checks.h"
#include "app/engine/device_checks.h"
#include "app/engine/runner.h"
#include "app/report/csv.h"
#include "kernels/builtin/dispatch.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/device_generator.h"
#include "kernels/common/problem.h"
#include "kernels/external/plugin_kernel.h"
#include "kernels/native/launch_native.h"
#include "kernels/native/native_plan.h"
#include "kernels/portable/launch_portable.h"
#include "reference/cublas_reference.h"

namespace attnres {

using nlohmann::json;

namespace {

class Events {
 public:
  Events() {
    ATTNRES_CUDA_CHECK(cudaEventCreate(&start_));
    ATTNRES_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Events() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  template <class F>
  double time_ms(cudaStream_t stream, F&& launch) {
    ATTNRES_CUDA_CHECK(cudaEventRecord(start_, stream));
    launch();
    ATTNRES_CUDA_CHECK(cudaEventRecord(stop_, stream));
    ATTNRES_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    ATTNRES_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

class Stream {
 public:
  Stream() { ATTNRES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_{};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Bytes read plus written by a device-to-device copy of 2 GiB, median of 20.
double copy_bandwidth(Events& events) {
  const std::size_t bytes = std::size_t(2) << 30;
  DeviceBuffer<unsigned char> a(bytes), b(bytes);
  ATTNRES_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    const double t = events.time_ms(
        nullptr, [&] { ATTNRES_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); });
    if (i >= 3) ms.push_back(t);
  }
  return 2.0 * double(bytes) / (median(ms) * 1e-3);
}

// One set of per-call tensors (prefix, delta, blocks, output) inside a shared allocation.
struct InputSets {
  DeviceBuffer<bf16_bits> storage;
  DeviceBuffer<bf16_bits> weights;  // norm_weight, qk_weight, output_norm_weight
  std::int64_t set_elements = 0;
  int count = 0;
  AttnResShape shape;

  AttnResArgs args(int set) const {
    const std::int64_t th = shape.tokens * shape.hidden;
    bf16_bits* base = storage.get() + std::int64_t(set) * set_elements;
    AttnResArgs a;
    a.shape = shape;
    a.strides = {shape.hidden, shape.hidden, shape.hidden, std::int64_t(shape.max_blocks) * shape.hidden, shape.hidden};
    a.prefix = base;
    a.delta = base + th;
    a.blocks = base + 2 * th;
    a.output = base + 2 * th + th * shape.max_blocks;
    a.norm_weight = weights.get();
    a.qk_weight = weights.get() + shape.hidden;
    a.output_norm_weight = weights.get() + 2 * shape.hidden;
    return a;
  }
};

InputSets make_sets(const AttnResShape& shape, std::size_t l2_bytes) {
  InputSets sets;
  sets.shape = shape;
  const std::int64_t th = shape.tokens * shape.hidden;
  sets.set_elements = th * (3 + shape.max_blocks);
  const double set_bytes = double(sets.set_elements) * sizeof(bf16_bits);
  sets.count = int(std::clamp(4.0 * double(l2_bytes) / set_bytes + 1.0, 1.0, 256.0));
  sets.storage = DeviceBuffer<bf16_bits>(std::size_t(sets.set_elements) * sets.count);
  sets.weights = DeviceBuffer<bf16_bits>(std::size_t(3 * shape.hidden));
  CaseSpec spec = default_case("bench", shape.tokens, shape.hidden, shape.max_blocks, shape.num_blocks);
  const AttnResArgs a = sets.args(0);
  auto fill = [&](bf16_bits* data, std::int64_t rows, InputTensor which) {
    generate_on_device(data, StridedLayout::matrix(rows, shape.hidden, shape.hidden),
                       make_generator_key(spec.seed, to_string(which)),
                       resolve(spec.distributions[int(which)], spec.shape), nullptr);
  };
  fill(const_cast<bf16_bits*>(a.norm_weight), 1, InputTensor::norm_weight);
  fill(const_cast<bf16_bits*>(a.qk_weight), 1, InputTensor::qk_weight);
  fill(const_cast<bf16_bits*>(a.output_norm_weight), 1, InputTensor::output_norm_weight);
  fill(a.prefix, shape.tokens, InputTensor::prefix);
  fill(const_cast<bf16_bits*>(a.delta), shape.tokens, InputTensor::delta);
  fill(a.blocks, shape.tokens * shape.max_blocks, InputTensor::blocks);
  for (int s = 1; s < sets.count; ++s)
    ATTNRES_CUDA_CHECK(cudaMemcpyAsync(sets.storage.get() + s * sets.set_elements, sets.storage.get(),
                                       std::size_t(sets.set_elements) * sizeof(bf16_bits), cudaMemcpyDeviceToDevice));
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  return sets;
}

// Runs `launch` once on pristine set 0 and judges it against the float64 reference.
std::string check_kernel(InputSets& sets, const DeviceBuffer<double>& reference, const std::vector<bf16_bits>& pristine,
                         const std::function<void(const AttnResArgs&, cudaStream_t)>& launch) {
  const AttnResArgs a = sets.args(0);
  const std::int64_t tokens = sets.shape.tokens, hidden = sets.shape.hidden;
  ATTNRES_CUDA_CHECK(
      cudaMemcpy(a.prefix, pristine.data(), pristine.size() * sizeof(bf16_bits), cudaMemcpyHostToDevice));
  ATTNRES_CUDA_CHECK(cudaMemset(a.output, 0xff, std::size_t(tokens * hidden) * sizeof(bf16_bits)));  // NaN poison
  launch(a, nullptr);
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  const DeviceTensorView output{a.output, StridedLayout::matrix(tokens, hidden, hidden), 0};
  const Comparison c = comparison_from(compare_output_on_device(output, reference.get(), 8e-2, 3e-2, nullptr), tokens,
                                       hidden, 8e-2, 3e-2);
  // Later timed launches keep updating prefix in place; restore it for the next check.
  ATTNRES_CUDA_CHECK(
      cudaMemcpy(a.prefix, pristine.data(), pristine.size() * sizeof(bf16_bits), cudaMemcpyHostToDevice));
  if (!c.within_tolerance()) return fmt::format("INCORRECT: max-abs {:.4g}; {}", c.max_abs_error, c.mismatch_summary());
  return fmt::format("ok (max-abs {:.3g})", c.max_abs_error);
}

// Median time of one launch. Launches are captured into a CUDA graph of kLaunchesPerGraph
// (rotating input sets) and the graph is replayed, so host launch overhead stays out of the
// numbers even where one launch takes a few microseconds.
constexpr int kLaunchesPerGraph = 20;

// `enqueue(i, stream)` puts the i-th launch on the stream.
double time_graph_replays(int repeats, cudaStream_t stream, const std::function<void(int, cudaStream_t)>& enqueue) {
  for (int i = 0; i < 3; ++i) enqueue(i, stream);
  ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  ATTNRES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < kLaunchesPerGraph; ++i) enqueue(i, stream);
  } catch (...) {
    // Leave the stream out of capture mode, whatever the launch left behind.
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  ATTNRES_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  ATTNRES_CUDA_CHECK(instantiated);
  Events events;
  std::vector<double> ms;
  const int replays = std::max(5, repeats / kLaunchesPerGraph);
  try {
    ATTNRES_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up replay
    for (int i = 0; i < replays; ++i)
      ms.push_back(events.time_ms(stream, [&] { ATTNRES_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) /
                   kLaunchesPerGraph);
  } catch (...) {
    cudaGraphExecDestroy(exec);
    throw;
  }
  cudaGraphExecDestroy(exec);
  return median(ms);
}

double time_kernel(InputSets& sets, int repeats, cudaStream_t stream,
                   const std::function<void(const AttnResArgs&, cudaStream_t)>& launch) {
  return time_graph_replays(repeats, stream, [&](int i, cudaStream_t s) { launch(sets.args(i % sets.count), s); });
}

// The floor for a point's bytes at its size: a device-to-device copy reading half of them and
// writing the other half, timed as the kernels are (graph replays, rotating over as many buffer
// pairs as the kernels' input sets, so neither is served from L2).
double time_copy_of_the_same_bytes(double bytes, int buffer_pairs, int repeats, cudaStream_t stream) {
  const std::size_t half = std::size_t(bytes / 2) / 16 * 16;
  DeviceBuffer<unsigned char> source(half * std::size_t(buffer_pairs)), target(source.size());
  ATTNRES_CUDA_CHECK(cudaMemset(source.get(), 1, source.size()));
  return time_graph_replays(repeats, stream, [&](int i, cudaStream_t s) {
    const std::size_t offset = std::size_t(i % buffer_pairs) * half;
    ATTNRES_CUDA_CHECK(
        cudaMemcpyAsync(target.get() + offset, source.get() + offset, half, cudaMemcpyDeviceToDevice, s));
  });
}

// Median time of one launch with CUDA events around each launch on the default stream: for
// kernels that cannot be captured into a graph (host overhead included).
double time_kernel_with_events(InputSets& sets, int repeats,
                               const std::function<void(const AttnResArgs&, cudaStream_t)>& launch) {
  for (int i = 0; i < 3; ++i) launch(sets.args(i % sets.count), nullptr);
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  Events events;
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i)
    ms.push_back(events.time_ms(nullptr, [&] { launch(sets.args(i % sets.count), nullptr); }));
  return median(ms);
}

// One row per point: median microseconds and bytes per second of each kernel timed there (empty
// where it did not run) and the reference's milliseconds.
std::string bench_csv(const json& points) {
  std::string csv =
      csv_row({"tokens", "num_blocks", "hidden", "bytes", "copy_bandwidth", "same_bytes_copy_us", "native_plan",
               "native_us", "native_bytes_per_s", "native_pdl_us", "portable_us", "portable_bytes_per_s", "kernel",
               "kernel_us", "kernel_bytes_per_s", "cublas_reference_ms"});
  auto cells = [](const json& point, const char* kernel) -> std::vector<std::string> {
    if (!point.contains(kernel) || !point[kernel].contains("median_us")) return {"", ""};
    return {fmt::format("{}", point[kernel]["median_us"].get<double>()),
            fmt::format("{}", point[kernel]["bytes_per_s"].get<double>())};
  };
  for (const json& p : points) {
    std::vector<std::string> row{std::to_string(p["tokens"].get<std::int64_t>()),
                                 std::to_string(p["num_blocks"].get<int>()),
                                 std::to_string(p["hidden"].get<int>()),
                                 fmt::format("{}", p["bytes"].get<double>()),
                                 fmt::format("{}", p["copy_bandwidth"].get<double>()),
                                 fmt::format("{}", p["same_bytes_copy_us"].get<double>())};
    row.push_back(p["native"].contains("plan") ? p["native"]["plan"].get<std::string>() : "");
    for (std::string& cell : cells(p, "native")) row.push_back(std::move(cell));
    row.push_back(p.contains("native_pdl") ? fmt::format("{}", p["native_pdl"]["median_us"].get<double>()) : "");
    for (std::string& cell : cells(p, "portable")) row.push_back(std::move(cell));
    row.push_back(p.contains("kernel") ? p["kernel"]["name"].get<std::string>() : "");
    for (std::string& cell : cells(p, "kernel")) row.push_back(std::move(cell));
    row.push_back(fmt::format("{}", p["cublas_reference_ms"].get<double>()));
    csv += csv_row(row);
  }
  return csv;
}

// The kernel under test from --kernel, timed beside the built-in ones.
struct KernelUnderTest {
  std::unique_ptr<KernelEntry> entry;
  std::string name;
};

}  // namespace

CommandOptions add_bench_command(CLI::App& app, BenchArguments& args, CommonArguments& common) {
  CommandOptions command(
      app.add_subcommand("bench", "time native and portable kernels against a measured copy bandwidth"));
  CLI::App* bench = command.app();
  bench->add_option("--tokens", args.tokens, "token counts to sweep")->capture_default_str();
  bench->add_option("--blocks", args.blocks, "num_blocks values to sweep")->capture_default_str();
  bench->add_option("--hidden", args.hidden, "hidden size")->capture_default_str();
  bench->add_option("--repeats", args.repeats, "timed launches per point (median reported)")
      ->check(CLI::Range(3, 100000))
      ->capture_default_str();
  bench->add_flag("--pdl", args.pdl,
                  "also time the native kernel launched with programmatic dependent launch (each launch's prologue "
                  "overlapping the previous one's tail)");
  bench->add_flag(
      "--native-plans", args.native_plans,
      "also time every plan of the native kernel (ring, ring/cp.async, split/<cluster>x<vectors>), not only the one it "
      "picks");
  bench->add_option("--markdown", args.markdown_path, "also write the table as markdown here");
  bench->add_option("--json", args.json_path, "also write the results as JSON here");
  bench->add_option("--csv", args.csv_path, "also write one CSV row per point here");
  add_kernel_options(command, common.backend);
  command.after_parse([&args] {
    for (auto t : args.tokens)
      if (t < 1 || t > kMaxTokens) throw UsageError("--tokens: every value must be in [1, 2^31]");
    for (int b : args.blocks)
      if (b < 0 || b > 64) throw UsageError("--blocks: every value must be in [0, 64]");
    if (args.hidden < 8 || args.hidden > kMaxHidden || args.hidden % 8)
      throw UsageError("--hidden: must be a multiple of 8 in [8, 65536]");
  });
  return command;
}

CommandOutput bench_command(const BenchArguments& args, const BackendOptions& kernel_options) {
  CommandOutput out;
  require_writable_reports({{"--markdown", args.markdown_path}, {"--json", args.json_path}, {"--csv", args.csv_path}},
                           {});
  std::string why;
  std::unique_ptr<Backend> backend = make_cuda_backend(why);
  if (!backend) throw std::runtime_error("bench needs a CUDA device: " + why);
  const DeviceDescription device = backend->device();
  KernelUnderTest under_test;
  if (!kernel_options.kernel.empty()) {
    if (!is_external_kernel(kernel_options.kernel))
      throw UsageError(
          "bench --kernel: native and portable are always timed; name an external kernel (so:, torch-op:, python:)");
    try {
      under_test.entry =
          load_external_kernel(parse_kernel_spec(kernel_options.kernel),
                               {kernel_options.torch_library, kernel_options.signature, OperandPlace::cuda_device});
    } catch (const KernelSpecError& e) {
      throw UsageError(e.what());
    } catch (const PluginError& e) {
      throw UsageError(e.what());
    }
    if (under_test.entry->operands() != OperandPlace::cuda_device)
      throw UsageError(
          fmt::format("bench --kernel {}: it takes host operands; bench times CUDA kernels", kernel_options.kernel));
    under_test.name = kernel_options.kernel;
  }
  cudaDeviceProp props{};
  ATTNRES_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
  Events events;
  const double copy = copy_bandwidth(events);
  Stream stream;
  json results = json::array();
  std::string plan_rows;  // the --native-plans table's rows
  std::string table = fmt::format(
      "Device {} ({}), H={}, delta and output norm on, no block write; copy bandwidth {:.2f} TB/s "
      "(2 GiB device-to-device, read+written bytes). Each time is the median over CUDA-graph replays of 20 launches "
      "on rotating input sets (together > 4x L2). Same-bytes copy: a device-to-device copy reading "
      "half of the point's bytes and writing the other half, timed the same way (the floor for "
      "those bytes at that size).\n\n",
      device.name, device_arch(device), args.hidden, copy / 1e12);
  if (args.pdl)
    table +=
        "Native PDL: the same launches with programmatic dependent launch, so each one's prologue overlaps the "
        "previous "
        "one's tail.\n\n";
  if (under_test.entry)
    table += fmt::format(
        "Kernel under test (`{}`): timed the same way where its launch can be captured on the tool's stream, "
        "otherwise with CUDA events around each launch on the default stream (host overhead included); the "
        "`timed` column says which.\n\n",
        under_test.name);
  table += "| T | blocks | MB moved | same-bytes copy µs | native plan | native µs | native TB/s | native % copy |";
  table += args.pdl ? " native PDL µs |" : "";
  table += " portable µs | portable TB/s | native / portable |";
  table += under_test.entry ? " kernel µs | kernel TB/s | kernel % copy | timed |" : "";
  table += " cuBLAS fp64 ref ms (end to end) | check |\n";
  table += "|---:|---:|---:|---:|---|---:|---:|---:|";
  table += args.pdl ? "---:|" : "";
  table += "---:|---:|---:|";
  table += under_test.entry ? "---:|---:|---:|---|" : "";
  table += "---:|---|\n";
  for (const int nb : args.blocks)
    for (const std::int64_t tokens : args.tokens) {
      AttnResShape shape;
      shape.tokens = tokens;
      shape.hidden = args.hidden;
      shape.max_blocks = nb;
      shape.num_blocks = nb;
      shape.has_delta = true;
      shape.has_output_norm = true;
      InputSets sets = make_sets(shape, std::size_t(props.l2CacheSize));
      const double bytes = double(tokens) * args.hidden * sizeof(bf16_bits) * (2 + nb + 2);
      const AttnResArgs a0 = sets.args(0);
      std::vector<bf16_bits> pristine(std::size_t(tokens * args.hidden));
      ATTNRES_CUDA_CHECK(
          cudaMemcpy(pristine.data(), a0.prefix, pristine.size() * sizeof(bf16_bits), cudaMemcpyDeviceToHost));
      // The reference synchronises before it returns, so CUDA events around it time it end to end;
      // the first point also pays for a warm-up call (cuBLAS handle, module load).
      if (results.empty()) cublas_reference(a0, nullptr);
      DeviceBuffer<double> reference;
      const double ref_ms = events.time_ms(nullptr, [&] { reference = cublas_reference(a0, nullptr); });

      DispatchRequest request;
      request.shape = shape;
      request.strides = a0.strides;
      const DispatchDecision decision = dispatch(device, backend->native_images(), request);
      // The registry's entries, launched as the runner launches them (native with its guard).
      const auto entry_launcher = [&](const char* name, LaunchOptions options = {}) {
        KernelEntry* entry = backend->kernels().find(name);
        return [entry, options](const AttnResArgs& a, cudaStream_t s) { entry->launch(a, options, s); };
      };
      const auto native = entry_launcher("native");
      const auto portable = entry_launcher("portable");
      const native::Plan chosen = native::choose_plan(tokens, nb, args.hidden);
      const double copy_ms = time_copy_of_the_same_bytes(bytes, sets.count, args.repeats, stream.get());
      json point = {{"tokens", tokens},
                    {"num_blocks", nb},
                    {"hidden", args.hidden},
                    {"bytes", bytes},
                    {"copy_bandwidth", copy},
                    {"same_bytes_copy_us", copy_ms * 1e3},
                    {"cublas_reference_ms", ref_ms}};
      const std::string portable_check = check_kernel(sets, reference, pristine, portable);
      const double portable_ms = time_kernel(sets, args.repeats, stream.get(), portable);
      point["portable"] = {
          {"median_us", portable_ms * 1e3}, {"bytes_per_s", bytes / (portable_ms * 1e-3)}, {"check", portable_check}};
      const bool native_runs = decision.path == KernelPath::native && !decision.rejection;
      std::string native_cells = "n/a | n/a | n/a | n/a", pdl_cell = args.pdl ? " n/a |" : "", ratio = "n/a",
                  check = "portable " + portable_check;
      if (native_runs) {
        const std::string native_check = check_kernel(sets, reference, pristine, native);
        const double native_ms = time_kernel(sets, args.repeats, stream.get(), native);
        const double bw = bytes / (native_ms * 1e-3);
        native_cells = fmt::format("{} | {:.1f} | {:.2f} | {:.1f}%", native::to_string(chosen), native_ms * 1e3,
                                   bw / 1e12, 100.0 * bw / copy);
        ratio = fmt::format("{:.2f}x", portable_ms / native_ms);
        check = "native " + native_check + ", " + check;
        point["native"] = {{"plan", native::to_string(chosen)},
                           {"median_us", native_ms * 1e3},
                           {"bytes_per_s", bw},
                           {"fraction_of_copy", bw / copy},
                           {"check", native_check}};
        if (args.pdl) {
          LaunchOptions pdl;
          pdl.programmatic_dependent_launch = true;
          const auto native_pdl = entry_launcher("native", pdl);
          const std::string pdl_check = check_kernel(sets, reference, pristine, native_pdl);
          const double pdl_ms = time_kernel(sets, args.repeats, stream.get(), native_pdl);
          pdl_cell = fmt::format(" {:.1f} |", pdl_ms * 1e3);
          if (pdl_check != native_check) check += ", native with PDL " + pdl_check;
          point["native_pdl"] = {
              {"median_us", pdl_ms * 1e3}, {"bytes_per_s", bytes / (pdl_ms * 1e-3)}, {"check", pdl_check}};
        }
      } else {
        point["native"] = {{"not_run", decision.reason}};
      }
      if (args.native_plans && native_runs) {
        std::string cells;
        json plans = json::object();
        for (const native::Plan& plan : native::all_plans(args.hidden)) {
          const auto planned = [&](const AttnResArgs& a, cudaStream_t s) {
            NativeLaunchOptions options;
            options.plan = plan;
            launch_native(a, options, s);
          };
          const std::string plan_check = check_kernel(sets, reference, pristine, planned);
          const double plan_ms = time_kernel(sets, args.repeats, stream.get(), planned);
          const bool ok = plan_check.rfind("ok", 0) == 0;
          cells += fmt::format(" {:.1f}{}{} |", plan_ms * 1e3, plan == chosen ? "*" : "", ok ? "" : " INCORRECT");
          plans[native::to_string(plan)] = {{"median_us", plan_ms * 1e3}, {"check", plan_check}};
        }
        plan_rows += fmt::format("| {} | {} |{}\n", tokens, nb, cells);
        point["native_plans"] = plans;
      }
      std::string kernel_cells;
      if (under_test.entry) {
        kernel_cells = " n/a | n/a | n/a | n/a |";
        if (const auto why = under_test.entry->cannot_implement(shape, a0.strides, device)) {
          point["kernel"] = {{"name", under_test.name}, {"not_run", why->reason}};
          check += ", kernel not run: " + why->reason;
        } else {
          const auto external = [&](const AttnResArgs& a, cudaStream_t s) {
            under_test.entry->launch(a, LaunchOptions{}, s);
          };
          std::string kernel_check, timed = "graph";
          double kernel_ms = 0;
          try {
            kernel_check = check_kernel(sets, reference, pristine, external);
            try {
              kernel_ms = time_kernel(sets, args.repeats, stream.get(), external);
            } catch (const KernelFailure&) {  // refuses the tool's stream (the torch and Python bridges)
              timed = "events";
            } catch (const CudaError& e) {  // not capturable
              if (e.context_lost()) throw;
              timed = "events";
            }
          } catch (const KernelRejection& e) {
            kernel_check = std::string("REFUSED: ") + e.what();
            timed = "";
          }
          if (timed == "events") kernel_ms = time_kernel_with_events(sets, args.repeats, external);
          check += ", kernel " + kernel_check;
          if (timed.empty()) {
            point["kernel"] = {{"name", under_test.name}, {"check", kernel_check}};
          } else {
            const double bw = bytes / (kernel_ms * 1e-3);
            kernel_cells =
                fmt::format(" {:.1f} | {:.2f} | {:.1f}% | {} |", kernel_ms * 1e3, bw / 1e12, 100.0 * bw / copy, timed);
            point["kernel"] = {{"name", under_test.name}, {"median_us", kernel_ms * 1e3},
                               {"bytes_per_s", bw},       {"fraction_of_copy", bw / copy},
                               {"timed", timed},          {"check", kernel_check}};
          }
        }
      }
      table += fmt::format("| {} | {} | {:.1f} | {:.1f} | {} |{} {:.1f} | {:.2f} | {} |{} {:.1f} | {} |\n", tokens, nb,
                           bytes / 1e6, copy_ms * 1e3, native_cells, pdl_cell, portable_ms * 1e3,
                           bytes / (portable_ms * 1e-3) / 1e12, ratio, kernel_cells, ref_ms, check);
      results.push_back(point);
    }
  if (args.native_plans) {
    table += "\nEvery plan of the native kernel, median µs (`*`: the plan it picks):\n\n| T | blocks |";
    std::string rule = "|---:|---:|";
    for (const native::Plan& plan : native::all_plans(args.hidden)) {
      table += " " + native::to_string(plan) + " |";
      rule += "---:|";
    }
    table += "\n" + rule + "\n" + plan_rows;
  }
  out.text = table;
  write_report(
      args.markdown_path, [&] { return table; }, out);
  write_report(
      args.json_path,
      [&] {
        return json{{"schema", "attnres-check/bench"}, {"schema_version", 1},     {"device", device.name},
                    {"copy_bandwidth", copy},          {"repeats", args.repeats}, {"points", results}}
                   .dump(2) +
               "\n";
      },
      out);
  write_report(
      args.csv_path, [&] { return bench_csv(results); }, out);
  return out;
}

}  // namespace attnres
