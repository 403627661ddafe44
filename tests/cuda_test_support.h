// What the GPU tests of every layer share (ctest label gpu: suite Gpu, each test skipping where
// there is no CUDA device): the fixture with its CUDA backend, the native kernel forced onto one
// plan, a kernel that damages what it is told to, the device checks compared with the host's, and
// the attnres-check binary run as a user runs it.
#pragma once
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "app/casefile/host_tensors.h"
#include "app/engine/backend.h"
#include "app/engine/checks.h"
#include "app/engine/runner.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/device_generator.h"
#include "kernels/native/launch_native.h"
#include "kernels/portable/launch_portable.h"
#include "kernels/registry/layout_guard.h"
#include "tests/test_util.h"

namespace attnres {

// A test kernel on CUDA operands that takes every problem and refuses nothing.
class DeviceTestKernel : public KernelEntry {
 public:
  OperandPlace operands() const override { return OperandPlace::cuda_device; }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription&) const override {
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return portable_preconditions(); }
};

// The native kernel forced onto one plan, as a registry entry, so the runner's checks judge it.
class PlannedNativeKernel : public DeviceTestKernel {
 public:
  explicit PlannedNativeKernel(native::Plan plan) : plan_(plan) {}
  std::string name() const override { return "native:" + native::to_string(plan_); }
  void launch(const AttnResArgs& args, const LaunchOptions&, cudaStream_t stream) override {
    NativeLaunchOptions options;
    options.plan = plan_;
    launch_native(args, options, stream);
  }

 private:
  native::Plan plan_;
};

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = make_cuda_backend(why);
    if (!backend_) GTEST_SKIP() << why;
  }
  bool native_here() const {
    const NativeImages images = backend_->native_images();
    return images.sm90a || images.sm100a;
  }
  CaseResult run(CaseSpec spec, KernelChoice choice) {
    spec.kernel = choice;
    spec.seed = testing::fresh_seed();
    return run_case(spec, *backend_, RunOptions{});
  }
  // The device's SM count and shared-memory opt-in, what native::ring_layout lays the ring out for.
  struct RingDevice {
    int sms = 0;
    int shared_optin = 0;
  };
  // Registers both rings (kRings) as "native:<plan>" kernels.
  RingDevice add_rings() {
    RingDevice device;
    ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&device.sms, cudaDevAttrMultiProcessorCount, 0));
    ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&device.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    for (const native::Plan& ring : kRings) backend_->add_kernel(std::make_unique<PlannedNativeKernel>(ring));
    return device;
  }
  static constexpr native::Plan kRings[] = {native::Plan{}, native::Plan{native::Variant::ring_cp_async}};
  std::unique_ptr<Backend> backend_;
};

inline void expect_passed(const CaseResult& r, const CaseSpec& spec) {
  EXPECT_EQ(r.disposition, Disposition::passed) << spec.name << " T=" << spec.shape.tokens << " H=" << spec.shape.hidden
                                                << " nb=" << spec.shape.num_blocks << ": " << r.detail;
}

// A CUDA-device kernel that runs the portable kernel and then damages what `damage` says.
class DamagingKernel : public DeviceTestKernel {
 public:
  explicit DamagingKernel(std::function<void(const AttnResArgs&)> damage) : damage_(std::move(damage)) {}
  std::string name() const override { return "damaging"; }
  void launch(const AttnResArgs& args, const LaunchOptions&, cudaStream_t stream) override {
    launch_portable(args, stream);
    ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
    damage_(args);
  }

 private:
  std::function<void(const AttnResArgs&)> damage_;
};

inline void poke(const bf16_bits* address, bf16_bits value) {
  ATTNRES_CUDA_CHECK(cudaMemcpy(const_cast<bf16_bits*>(address), &value, sizeof value, cudaMemcpyHostToDevice));
}

// Writes `value` over a generated element, or its neighbour where the element already holds
// it (a fresh seed can draw it), so the damage always shows.
inline void damage(const bf16_bits* address, bf16_bits value) {
  bf16_bits current = 0;
  ATTNRES_CUDA_CHECK(cudaMemcpy(&current, address, sizeof current, cudaMemcpyDeviceToHost));
  poke(address, current == value ? bf16_bits(value ^ 1) : value);
}

// Runs `spec` keeping its artifacts (replayed from host tensors with `replay`) and judges the
// tensors again with the host loops: the device reductions must report the same, field by field.
inline CaseResult expect_device_checks_match_the_hosts(Backend& backend, const CaseSpec& spec,
                                                       const RunOptions& options, bool replay) {
  std::optional<CaseArtifacts> artifacts;
  const InputSource source{[&] { return make_case_tensors(spec); }, 0};
  const CaseResult r = run_case(spec, backend, options, replay ? &source : nullptr, &artifacts);
  if (!artifacts || !r.comparison) {
    ADD_FAILURE() << spec.name << ": the kernel did not run: " << r.detail;
    return r;
  }
  const Comparison host = compare_output(artifacts->after.output, artifacts->reference, spec.atol, spec.rtol);
  const Comparison& device = *r.comparison;
  EXPECT_EQ(device.mismatched, host.mismatched);
  EXPECT_EQ(device.nan_count, host.nan_count);
  EXPECT_EQ(device.inf_count, host.inf_count);
  EXPECT_EQ(device.max_abs_error, host.max_abs_error);
  EXPECT_EQ(device.max_rel_error, host.max_rel_error);
  EXPECT_EQ(device.worst_token, host.worst_token);
  EXPECT_EQ(device.worst_column, host.worst_column);
  EXPECT_TRUE(device.worst_value == host.worst_value ||
              (std::isnan(device.worst_value) && std::isnan(host.worst_value)));
  EXPECT_EQ(device.worst_reference, host.worst_reference);
  const ExactnessReport exactness = check_after_run(artifacts->after, expected_after_run(artifacts->inputs));
  EXPECT_EQ(device.prefix_mismatches, exactness.prefix_mismatches);
  EXPECT_EQ(device.blocks_mismatches, exactness.blocks_mismatches);
  EXPECT_EQ(device.first_prefix_mismatch, exactness.first_prefix_mismatch);
  EXPECT_EQ(device.first_blocks_mismatch, exactness.first_blocks_mismatch);
  std::vector<std::string> device_violations, host_violations;
  for (const Violation& v : r.violations) device_violations.push_back(v.to_string());
  for (const Violation& v : exactness.violations) host_violations.push_back(v.to_string());
  EXPECT_EQ(device_violations, host_violations);
  if (options.error_maps && r.error_map) {
    const ErrorMap host_map = error_map(artifacts->after.output, artifacts->reference, spec.atol, spec.rtol);
    EXPECT_EQ(r.error_map->rows, host_map.rows);
    EXPECT_EQ(r.error_map->columns, host_map.columns);
    EXPECT_EQ(r.error_map->max_error, host_map.max_error);
    EXPECT_EQ(r.error_map->mismatched, host_map.mismatched);
  }
  return r;
}

// External kernels run in a worker process forked before it touches CUDA; this test process
// already holds a CUDA context, so these tests run the attnres-check binary itself, as a user
// would, and read its JSON report.
struct BinaryRun {
  int exit_code = -1;
  std::string output;
  nlohmann::json report;
};

inline std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The commands with a JSON report write it where BinaryRun::report reads it.
inline BinaryRun run_binary(std::vector<std::string> args) {
  testing::TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  if (args.front() != "explore") args.insert(args.end(), {"--json", report});
  std::string command = "ATTNRES_BRIDGE_DIR=" + shell_quote(ATTNRES_BRIDGE_DIR) +
                        " PYTHONPATH=" + shell_quote(ATTNRES_PYTHON_TEST_DIR) + " " + shell_quote(ATTNRES_CHECK_BINARY);
  for (const std::string& a : args) command += " " + shell_quote(a);
  command += " 2>&1";
  BinaryRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  char chunk[4096];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) run.output.append(chunk, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string text = testing::read_file(report);
  if (!text.empty()) run.report = nlohmann::json::parse(text);
  return run;
}

inline std::string cuda_plugin(const std::string& variant) {
  return std::string("so:") + ATTNRES_PLUGIN_DIR + "/libattnres_plugin_test_cuda_" + variant + ".so";
}

inline const nlohmann::json& find_case(const nlohmann::json& report, const std::string& name) {
  for (const auto& c : report["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no case " + name);
}

// The nine public T=17 cases on a CUDA test plugin that goes wrong on every call with 3 blocks:
// that case is an error whose detail `check_detail` judges, the other eight pass, in case order.
inline void expect_only_the_three_block_case_lost(const std::string& plugin,
                                                  const std::vector<std::string>& more_arguments,
                                                  const std::function<void(const std::string&)>& check_detail) {
  std::vector<std::string> arguments = {
      "run", testing::source_path("cases/public.json"), "--filter", "public-t17-*", "--kernel", cuda_plugin(plugin)};
  arguments.insert(arguments.end(), more_arguments.begin(), more_arguments.end());
  const BinaryRun run = run_binary(arguments);
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  const nlohmann::json& r = run.report;
  ASSERT_EQ(r["cases"].size(), 9u) << run.output;
  for (std::size_t i = 0; i < 9; ++i) {
    const auto& c = r["cases"][i];
    if (i != 3) {
      EXPECT_EQ(c["disposition"], "passed") << c["name"] << ": " << c["detail"];
    } else {
      EXPECT_EQ(c["disposition"], "error");
      check_detail(c["detail"].get<std::string>());
    }
  }
}

}  // namespace attnres
