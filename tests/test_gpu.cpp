// GPU tests (ctest label gpu): each skips where there is no CUDA device.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "app/casefile/host_tensors.h"
#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/engine/backend.h"
#include "app/engine/runner.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/device_generator.h"
#include "kernels/mutants/mutant_kernel.h"
#include "kernels/native/launch_native.h"
#include "kernels/portable/launch_portable.h"
#include "kernels/registry/layout_guard.h"
#include "reference/cpu_reference.h"
#include "test_util.h"
#include "tests/native_pack_probe.h"

namespace attnres {
namespace {

using testing::read_file;
using testing::run_cli;

// The native kernel forced onto one plan, as a registry entry, so the runner's checks judge it.
class PlannedNativeKernel : public KernelEntry {
 public:
  explicit PlannedNativeKernel(native::Plan plan) : plan_(plan) {}
  std::string name() const override { return "native:" + native::to_string(plan_); }
  OperandPlace operands() const override { return OperandPlace::cuda_device; }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription&) const override {
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return portable_preconditions(); }
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

void expect_passed(const CaseResult& r, const CaseSpec& spec) {
  EXPECT_EQ(r.disposition, Disposition::passed) << spec.name << " T=" << spec.shape.tokens << " H=" << spec.shape.hidden
                                                << " nb=" << spec.shape.num_blocks << ": " << r.detail;
}

TEST_F(Gpu, DeviceGeneratorMatchesTheHostBitForBit) {
  CaseSpec spec = default_case("gen", 37, 520, 3, 2);
  spec.seed = testing::fresh_seed();
  set_token_major_blocks(spec.strides, spec.shape.max_blocks, 531);
  spec.distributions[int(InputTensor::blocks)].block_scales = {0.5, 3.0};  // block 2: 1
  const CaseTensors host = make_case_tensors(spec);
  const std::int64_t rows = 37 * 3;
  DeviceBuffer<bf16_bits> device{std::size_t(rows * 531)};
  generate_on_device(device.get(), StridedLayout::matrix(rows, 520, 531), make_generator_key(spec.seed, "blocks"),
                     resolve(spec.distributions[int(InputTensor::blocks)], spec.shape), nullptr);
  std::vector<bf16_bits> back(device.size());
  ATTNRES_CUDA_CHECK(cudaMemcpy(back.data(), device.get(), device.bytes(), cudaMemcpyDeviceToHost));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t h = 0; h < 520; ++h)
      ASSERT_EQ(back[std::size_t(r * 531 + h)], host.blocks.at(r, h)) << r << "," << h;
}

// The CUDA backend generates a case's inputs on the device: storage (canaries, padding, poison
// and all) must equal the host generator's, bit for bit, and so must the input checksums.
TEST_F(Gpu, DeviceMadeInputsEqualTheHostsEverywhere) {
  CaseSpec spec = default_case("inputs", 19, 1000, 5, 4);
  spec.seed = testing::fresh_seed();
  spec.strides.prefix = 1007;
  set_token_major_blocks(spec.strides, spec.shape.max_blocks, 1003);
  spec.strides.output = 1008;
  spec.distributions[int(InputTensor::blocks)].block_scales = {0.0, 2.5, 1.0, 0.125, 7.0};
  SCOPED_TRACE("seed " + std::to_string(spec.seed));
  const CaseTensors host = make_case_tensors(spec);
  const std::unique_ptr<CaseWorkspace> workspace = backend_->prepare(spec, nullptr, true);
  EXPECT_EQ(workspace->input_checksums(), input_checksums(host));
  workspace->compute_reference();
  const CaseArtifacts device = workspace->take_artifacts();
  const auto a = host.all(), b = device.inputs.all(), c = device.after.all();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i]->storage == b[i]->storage) << a[i]->name;
    EXPECT_TRUE(a[i]->storage == c[i]->storage) << a[i]->name << " changed without a kernel";
  }
}

// A CUDA-device kernel that runs the portable kernel and then damages what `damage` says.
class DamagingKernel : public KernelEntry {
 public:
  explicit DamagingKernel(std::function<void(const AttnResArgs&)> damage) : damage_(std::move(damage)) {}
  std::string name() const override { return "damaging"; }
  OperandPlace operands() const override { return OperandPlace::cuda_device; }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription&) const override {
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return portable_preconditions(); }
  void launch(const AttnResArgs& args, const LaunchOptions&, cudaStream_t stream) override {
    launch_portable(args, stream);
    ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
    damage_(args);
  }

 private:
  std::function<void(const AttnResArgs&)> damage_;
};

void poke(const bf16_bits* address, bf16_bits value) {
  ATTNRES_CUDA_CHECK(cudaMemcpy(const_cast<bf16_bits*>(address), &value, sizeof value, cudaMemcpyHostToDevice));
}

// Writes `value` over a generated element, or its neighbour where the element already holds
// it (a fresh seed can draw it), so the damage always shows.
void damage(const bf16_bits* address, bf16_bits value) {
  bf16_bits current = 0;
  ATTNRES_CUDA_CHECK(cudaMemcpy(&current, address, sizeof current, cudaMemcpyDeviceToHost));
  poke(address, current == value ? bf16_bits(value ^ 1) : value);
}

// Runs `spec` keeping its artifacts (replayed from host tensors with `replay`) and judges the
// tensors again with the host loops: the device reductions must report the same, field by field.
CaseResult expect_device_checks_match_the_hosts(Backend& backend, const CaseSpec& spec, const RunOptions& options,
                                                bool replay) {
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

TEST_F(Gpu, DeviceChecksReportWhatTheHostChecksReport) {
  CaseSpec spec = default_case("damaged", 37, 1000, 6, 4);
  spec.seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(spec.seed));
  spec.shape.block_write_idx = 5;
  spec.strides.prefix = 1003;
  set_token_major_blocks(spec.strides, spec.shape.max_blocks, 1001);
  spec.strides.output = 1010;
  backend_->add_kernel(std::make_unique<DamagingKernel>([](const AttnResArgs& a) {
    poke(a.prefix + 5 * a.strides.prefix + 1001, 0);                                          // prefix padding
    damage(a.prefix + 9 * a.strides.prefix + 17, 0x3f80);                                     // prefix not p
    poke(a.blocks - 3, 0);                                                                    // guard before blocks
    damage(a.blocks + 36 * a.strides.blocks_token + 5 * a.strides.blocks_row + 999, 0x4000);  // the written block
    damage(a.blocks + 2 * a.strides.blocks_token + 1 * a.strides.blocks_row + 4, 0x4000);     // a source block
    damage(a.delta + 30 * a.strides.delta + 2, 0x4000);                                       // delta
    poke(a.qk_weight + 1000, 0);                                                              // guard after qk_weight
    poke(a.output + 36 * a.strides.output + 999, kPoisonBits);                                // unwritten
    poke(a.output + 3 * a.strides.output + 7, 0x4400);                                        // out of tolerance
    poke(a.output + 4 * a.strides.output + 8, 0x7f80);                                        // +Inf
  }));
  RunOptions options;
  options.kernel = "damaging";
  options.error_maps = true;
  for (const bool replay : {false, true}) {
    SCOPED_TRACE(replay ? "replayed inputs" : "generated inputs");
    const CaseResult r = expect_device_checks_match_the_hosts(*backend_, spec, options, replay);
    EXPECT_EQ(r.disposition, Disposition::memory_violation) << r.detail;
    EXPECT_EQ(r.violations.size(), 6u) << r.detail;
    EXPECT_EQ(r.comparison->prefix_mismatches, 1);
    EXPECT_EQ(r.comparison->blocks_mismatches, 1);
    EXPECT_TRUE(r.error_map);
  }
  options.kernel.clear();  // and a clean run of the built-in kernel
  for (const bool replay : {false, true}) {
    const CaseResult r = expect_device_checks_match_the_hosts(*backend_, spec, options, replay);
    EXPECT_EQ(r.disposition, Disposition::passed) << r.detail;
  }
}

TEST_F(Gpu, PortableKernelMatchesTheReferenceOnFreshInputs) {
  struct Shape {
    std::int64_t tokens;
    int hidden, max_blocks, num_blocks, block_write_idx, padding;
    bool delta, norm;
  };
  for (const Shape s : {Shape{7, 7168, 8, 8, 3, 7, true, true}, Shape{33, 512, 4, 4, -1, 0, true, true},
                        Shape{5, 16384, 3, 2, 2, 8, false, true}, Shape{3, 8, 1, 0, -1, 1, true, false},
                        Shape{64, 1000, 12, 12, 11, 0, true, true}}) {
    CaseSpec spec = default_case("portable", s.tokens, s.hidden, s.max_blocks, s.num_blocks);
    spec.shape.block_write_idx = s.block_write_idx;
    spec.shape.has_delta = s.delta;
    spec.shape.has_output_norm = s.norm;
    spec.strides.prefix = spec.strides.delta = spec.strides.output = s.hidden + s.padding;
    set_token_major_blocks(spec.strides, s.max_blocks, s.hidden + s.padding);
    expect_passed(run(spec, KernelChoice::portable), spec);
  }
}

TEST_F(Gpu, NativeKernelMatchesTheReferenceOnFreshInputs) {
  if (!native_here()) GTEST_SKIP() << "no native image loads on this device";
  for (int nb = 0; nb <= 8; ++nb)
    for (int variant = 0; variant < 2; ++variant) {
      CaseSpec spec = default_case("native", variant ? 320 : 3, 7168, 8, nb);
      spec.shape.has_delta = variant == 0 || nb % 2 == 0;
      spec.shape.has_output_norm = variant == 1 || nb % 3 == 0;
      spec.shape.block_write_idx = variant ? nb / 2 : std::min(nb, 7);  // inside and outside the sources
      const CaseResult r = run(spec, KernelChoice::native);
      EXPECT_EQ(r.kernel, "native");
      expect_passed(r, spec);
    }
  {  // Without delta, p is prefix bit for bit, -0.0 included.
    CaseSpec spec = default_case("native-negative-zero", 17, 7168, 4, 3);
    spec.shape.has_delta = false;
    spec.distributions[int(InputTensor::prefix)] =
        DistributionSpec{DistributionKind::constant, 0, 0, false, 0, 0, -0.0};
    const CaseResult r = run(spec, KernelChoice::native);
    expect_passed(r, spec);
    EXPECT_EQ(r.comparison->prefix_mismatches, 0);
  }
  for (const int hidden : {512, 4096, 7680}) {
    CaseSpec spec = default_case("native-h", 200, hidden, 8, 5);
    spec.shape.block_write_idx = 6;
    set_token_major_blocks(spec.strides, spec.shape.max_blocks, hidden + 8);
    expect_passed(run(spec, KernelChoice::native), spec);
  }
}

// The split variant rounds p and the output with the hardware conversion; p must still be the
// software rounding's bits (the references'), so the two must agree on every float.
TEST_F(Gpu, HardwareBf16PackMatchesTheSoftwareRounding) {
  if (!native_here()) GTEST_SKIP() << "no native image loads on this device";
  const testing::PackProbeResult probe = testing::probe_native_pack();
  EXPECT_EQ(probe.mismatches, 0u) << fmt::format("first differing input 0x{:08x}", probe.first_input);
}

// Every plan of the native kernel, whichever the policy would pick: each source count, with and
// without delta and output norm, the written block inside and outside the sources, every
// supported hidden size's corner, blocks with padded rows.
TEST_F(Gpu, EveryNativePlanMatchesTheReference) {
  if (!native_here()) GTEST_SKIP() << "no native image loads on this device";
  std::mt19937 random(testing::fresh_seed());
  for (const native::Plan& plan : native::all_plans(512))
    backend_->add_kernel(std::make_unique<PlannedNativeKernel>(plan));
  for (const int hidden : {512, 1536, 7168, 7680})
    for (const native::Plan& plan : native::all_plans(hidden)) {
      RunOptions options;
      options.kernel = "native:" + native::to_string(plan);
      for (const std::int64_t tokens : {1, 5, 133}) {
        const int nb = int(random() % 9);
        CaseSpec spec = default_case("plan", tokens, hidden, 8, nb);
        spec.seed = random();
        spec.shape.has_delta = random() % 4 != 0;
        spec.shape.has_output_norm = random() % 4 != 0;
        spec.shape.block_write_idx = int(random() % 9) - 1;  // -1 (none) .. 7
        set_token_major_blocks(spec.strides, 8, hidden + 8 * int(random() % 3));
        const CaseResult r = run_case(spec, *backend_, options);
        EXPECT_EQ(r.disposition, Disposition::passed)
            << options.kernel << " H=" << hidden << " T=" << tokens << " nb=" << nb << " delta=" << spec.shape.has_delta
            << " norm=" << spec.shape.has_output_norm << " write=" << spec.shape.block_write_idx << " seed "
            << spec.seed << ": " << r.detail;
      }
    }
}

// The ring with two rows per reduction (native::ring_layout picks it for at most 4 sources, stages
// to spare and more rows than SMs): a CTA's last row with and without a partner, one to eight
// iterations, so each iteration's stashed rows take their norms from the next one's reduction.
// Both copy paths.
TEST_F(Gpu, RingPairedRowsMatchTheReference) {
  if (!native_here()) GTEST_SKIP() << "no native image loads on this device";
  const auto [sms, shared_optin] = add_rings();
  struct Shape {
    int hidden, num_blocks;
  };
  int variation = 0;
  for (const native::Plan& ring : kRings) {
    RunOptions options;
    options.kernel = "native:" + native::to_string(ring);
    for (const Shape shape : {Shape{7168, 0}, Shape{7168, 2}, Shape{4096, 3}, Shape{1536, 3}})
      for (const std::int64_t tokens :
           {std::int64_t(sms) + 1, 2 * std::int64_t(sms), 2 * std::int64_t(sms) + 1, 8 * std::int64_t(sms) - 5}) {
        CaseSpec spec = default_case("paired", tokens, shape.hidden, 8, shape.num_blocks);
        spec.seed = 1000 + variation;
        spec.shape.has_delta = variation % 3 != 2;
        spec.shape.has_output_norm = variation % 4 != 3;
        spec.shape.block_write_idx = variation % 2 == 0 ? shape.num_blocks : -1;
        ++variation;
        const std::optional<native::RingLayout> layout =
            native::ring_layout(tokens, shape.num_blocks, spec.shape.has_delta, shape.hidden, sms, shared_optin);
        ASSERT_TRUE(layout.has_value());
        EXPECT_EQ(layout->rows_per_iteration, 2) << "H=" << shape.hidden << " nb=" << shape.num_blocks;
        const CaseResult r = run_case(spec, *backend_, options);
        EXPECT_EQ(r.disposition, Disposition::passed)
            << options.kernel << " H=" << shape.hidden << " T=" << tokens << " nb=" << shape.num_blocks
            << " delta=" << spec.shape.has_delta << " norm=" << spec.shape.has_output_norm << ": " << r.detail;
      }
  }
}

// The ring holding a row's first blocks in registers and the rest in their stages (kMaxHeldSources,
// 5, in kernels/native/native_sm90.cu): 5, 6 and 8 blocks at two hidden sizes on both copy paths, with the
// written block among the held blocks, the last held one, the first staged one, a staged one, past
// the sources, or none; one row per CTA or rows that wrap the ring.
TEST_F(Gpu, RingWithHeldSourcesMatchesTheReference) {
  if (!native_here()) GTEST_SKIP() << "no native image loads on this device";
  const auto [sms, shared_optin] = add_rings();
  int variation = 0;
  for (const native::Plan& ring : kRings) {
    RunOptions options;
    options.kernel = "native:" + native::to_string(ring);
    for (const int hidden : {7168, 7680})
      for (const int num_blocks : {5, 6, 8})
        for (const int write : {-1, 1, 4, 5, num_blocks - 1, num_blocks}) {
          const std::int64_t tokens = variation % 2 == 0 ? 1 : 3 * std::int64_t(sms) - 2;
          CaseSpec spec = default_case("held", tokens, hidden, 9, num_blocks);
          spec.seed = 2000 + variation;
          spec.shape.has_delta = variation % 3 != 2;
          spec.shape.has_output_norm = variation % 4 != 3;
          spec.shape.block_write_idx = write;
          ++variation;
          const std::optional<native::RingLayout> layout =
              native::ring_layout(tokens, num_blocks, spec.shape.has_delta, hidden, sms, shared_optin);
          ASSERT_TRUE(layout.has_value());
          ASSERT_EQ(layout->rows_per_iteration, 1) << "H=" << hidden << " nb=" << num_blocks;
          const CaseResult r = run_case(spec, *backend_, options);
          EXPECT_EQ(r.disposition, Disposition::passed)
              << options.kernel << " H=" << hidden << " T=" << tokens << " nb=" << num_blocks
              << " delta=" << spec.shape.has_delta << " norm=" << spec.shape.has_output_norm << " write=" << write
              << ": " << r.detail;
        }
  }
}

// The bulk-copy ring's producer must not copy into a stage the consumers are still reading (the
// consumers read through the generic proxy, the copy writes through the async one). The shape
// where that showed, 6 blocks, no delta or output norm, the block written past the sources, with
// rows wrapping the ring: without the proxy fence 10 of 20 seeds failed on an H100.
TEST_F(Gpu, RingBulkCopyNeverOverwritesAStageStillBeingRead) {
  if (!native_here()) GTEST_SKIP() << "no native image loads on this device";
  const auto [sms, shared_optin] = add_rings();
  RunOptions options;
  options.kernel = "native:" + native::to_string(native::Plan{});
  for (const int hidden : {7168, 7680})
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      CaseSpec spec = default_case("bulk-ring-stage-reuse", 3 * std::int64_t(sms) - 2, hidden, 9, 6);
      spec.seed = seed;
      spec.shape.has_delta = false;
      spec.shape.has_output_norm = false;
      spec.shape.block_write_idx = 6;
      const CaseResult r = run_case(spec, *backend_, options);
      EXPECT_EQ(r.disposition, Disposition::passed) << "H=" << hidden << " seed " << seed << ": " << r.detail;
    }
}

// bench judges each kernel before timing it: the check must cover the output (a float64
// reference never equals a bf16 output everywhere, so max-abs is above zero) and every plan.
TEST_F(Gpu, BenchChecksEveryTimedKernelAgainstTheReference) {
  testing::TempDir dir;
  const std::string json_path = (dir.path() / "bench.json").string();
  run_cli({"bench", "--tokens", "5", "--blocks", "3", "--hidden", "1024", "--repeats", "3", "--native-plans", "--pdl",
           "--json", json_path});
  const nlohmann::json point = nlohmann::json::parse(read_file(json_path))["points"].at(0);
  std::vector<std::string> checks{point["portable"]["check"].get<std::string>()};
  if (native_here()) {
    checks.push_back(point["native"]["check"].get<std::string>());
    checks.push_back(point["native_pdl"]["check"].get<std::string>());
    EXPECT_EQ(point["native_plans"].size(), native::all_plans(1024).size());
    for (const auto& plan : point["native_plans"].items()) checks.push_back(plan.value()["check"].get<std::string>());
  }
  for (const std::string& check : checks) {
    double max_abs = -1;
    ASSERT_EQ(std::sscanf(check.c_str(), "ok (max-abs %lf)", &max_abs), 1) << check;
    EXPECT_GT(max_abs, 0.0) << check;
    EXPECT_LT(max_abs, 0.08) << check;
  }
  // The floor of a point: a copy of its bytes, timed; the portable kernel moves the same bytes
  // and computes too.
  const double copy_us = point["same_bytes_copy_us"].get<double>();
  EXPECT_GT(copy_us, 0.0);
  EXPECT_LT(copy_us, point["portable"]["median_us"].get<double>());
}

TEST_F(Gpu, NativeGuardRefusesBeforeLaunching) {
  if (!native_here()) GTEST_SKIP() << "no native image loads on this device";
  CaseSpec spec = default_case("guard", 320, 7168, 8, 4);
  spec.strides.prefix = 7175;
  CaseTensors host = make_case_tensors(spec);
  AttnResArgs args = host.layout();
  DeviceBuffer<bf16_bits> prefix{host.prefix.storage.size()}, output{host.output.storage.size()};
  ATTNRES_CUDA_CHECK(cudaMemcpy(output.get(), host.output.storage.data(), output.bytes(), cudaMemcpyHostToDevice));
  args.prefix = prefix.get() + host.prefix.guard();
  args.output = output.get() + host.output.guard();  // the other pointers stay null: nothing may be launched
  try {
    launch_native(args, NativeLaunchOptions{}, nullptr);
    FAIL() << "no LayoutError";
  } catch (const LayoutError& e) {
    EXPECT_STREQ(e.what(),
                 "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168");
  }
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<bf16_bits> back(output.size());
  ATTNRES_CUDA_CHECK(cudaMemcpy(back.data(), output.get(), output.bytes(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host.output.storage);  // still poison and canaries
}

// The seed bug, judged by the device reductions: the same numbers as the host loops over the
// same tensors, and the 2204 prefix-padding canaries the native kernel overwrites.
TEST_F(Gpu, UnguardedSeedReproShowsTheSilentCorruption) {
  const CaseResult r = testing::expect_unguarded_seed_repro_corrupts_silently(*backend_);
  ASSERT_FALSE(r.violations.empty());
  if (r.kernel == "native") EXPECT_EQ(r.violations[0].count, 2204);
  CaseSpec seed = load_cases({testing::source_path("cases/guard.json")}).cases.at(0);
  seed.expectation_written = true;  // judged as a computation, whatever the native kernel declares
  seed.expect = Expectation::pass;
  RunOptions unguarded;
  unguarded.disable_layout_guard = true;
  const CaseResult again = expect_device_checks_match_the_hosts(*backend_, seed, unguarded, false);
  EXPECT_EQ(again.comparison->max_abs_error, r.comparison->max_abs_error);
  EXPECT_EQ(again.comparison->mismatched, r.comparison->mismatched);
}

// Views: block-major blocks, storage offsets (odd ones misalign the operands). Damage before a
// view's first element, in a block-major row's padding and in the written block is located on
// the device as on the host; the built-in kernels run every such layout correctly.
TEST_F(Gpu, DeviceChecksLocateDamageInViewsAsTheHostDoes) {
  CaseSpec spec = default_case("views", 29, 1024, 5, 4);
  spec.seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(spec.seed));
  spec.shape.block_write_idx = 4;
  spec.strides.blocks_token = 1032;
  spec.strides.blocks_row = 29 * 1032 + 16;
  for (int i = 0; i < kOperandCount; ++i) spec.strides.storage_offset[i] = 2 * i + 1;
  backend_->add_kernel(std::make_unique<DamagingKernel>([](const AttnResArgs& a) {
    poke(a.prefix - 1, 0);                                                             // before prefix's first element
    poke(a.blocks + 3 * a.strides.blocks_token + 2 * a.strides.blocks_row + 1027, 0);  // a block row's padding
    damage(a.blocks + 28 * a.strides.blocks_token + 4 * a.strides.blocks_row + 5, 0x4000);  // the written block
    poke(a.output - 13, 0);  // the output's first storage element
  }));
  RunOptions options;
  options.kernel = "damaging";
  for (const bool replay : {false, true}) {
    SCOPED_TRACE(replay ? "replayed inputs" : "generated inputs");
    const CaseResult r = expect_device_checks_match_the_hosts(*backend_, spec, options, replay);
    EXPECT_EQ(r.disposition, Disposition::memory_violation) << r.detail;
    EXPECT_EQ(r.violations.size(), 3u) << r.detail;
    EXPECT_EQ(r.comparison->blocks_mismatches, 1);
  }
  options.kernel.clear();
  for (const bool replay : {false, true}) {
    const CaseResult r = expect_device_checks_match_the_hosts(*backend_, spec, options, replay);
    EXPECT_EQ(r.disposition, Disposition::passed) << r.detail;
    EXPECT_EQ(r.kernel, "portable") << "odd storage offsets keep the native kernel out";
  }
  // Aligned offsets and block-major blocks whose strides are multiples of 8: the native kernel's.
  for (int i = 0; i < kOperandCount; ++i) spec.strides.storage_offset[i] = 8 * i;
  spec.kernel = KernelChoice::native;
  const CaseResult native = expect_device_checks_match_the_hosts(*backend_, spec, options, false);
  EXPECT_EQ(native.disposition, Disposition::passed) << native.detail;
}

// The float64 reference on the device against the CPU's, over random layouts, padded ones included.
TEST_F(Gpu, DeviceReferenceAgreesWithTheCpuReference) {
  const std::uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  auto pick = [&](int low, int high) { return int(std::uniform_int_distribution<int>(low, high)(random)); };
  for (int trial = 0; trial < 8; ++trial) {
    const int hidden = 8 * pick(1, 1024), max_blocks = pick(0, 10);
    CaseSpec spec = default_case("xcheck", pick(1, 40), hidden, max_blocks, pick(0, max_blocks));
    spec.seed = random();
    spec.shape.block_write_idx = max_blocks ? pick(-1, max_blocks - 1) : -1;
    spec.shape.has_delta = pick(0, 1);
    spec.shape.has_output_norm = pick(0, 1);
    spec.strides.prefix = hidden + pick(0, 1) * pick(1, 9);
    spec.strides.delta = hidden + pick(0, 1) * pick(1, 9);
    const std::int64_t blocks_rows = hidden + pick(0, 1) * pick(1, 9);
    if (pick(0, 1)) {  // block-major storage [MAXB, T, H], viewed as [T, MAXB, H]
      spec.strides.blocks_token = blocks_rows;
      spec.strides.blocks_row = spec.shape.tokens * blocks_rows;
    } else {
      set_token_major_blocks(spec.strides, spec.shape.max_blocks, blocks_rows);
    }
    for (std::int64_t& offset : spec.strides.storage_offset) offset = pick(0, 1) * pick(1, 9);
    SCOPED_TRACE(fmt::format("T={} H={} MAXB={} nb={} write={} strides {}", spec.shape.tokens, hidden, max_blocks,
                             spec.shape.num_blocks, spec.shape.block_write_idx,
                             describe_strides(spec.shape, spec.strides)));
    const std::unique_ptr<CaseWorkspace> workspace = backend_->prepare(spec, nullptr, true);
    EXPECT_EQ(workspace->compute_reference().name, "cublas-float64");
    const CaseArtifacts device = workspace->take_artifacts();
    CaseTensors scratch = make_case_tensors(spec);
    const std::vector<double> cpu = cpu_reference(scratch.args());
    ASSERT_EQ(cpu.size(), device.reference.size());
    double worst = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i)
      worst = std::fmax(worst, std::fabs(cpu[i] - device.reference[i]) / (1.0 + std::fabs(cpu[i])));
    EXPECT_LT(worst, 1e-10);
  }
}

TEST_F(Gpu, BundledCasesMeetTheirExpectations) {
  const LoadedCases loaded = load_cases({testing::source_path("cases")});
  ASSERT_TRUE(loaded.errors.empty());
  for (const CaseSpec& spec : loaded.cases) {
    const CaseResult r = run_case(spec, *backend_, RunOptions{});
    EXPECT_TRUE(meets_expectation(r.disposition)) << spec.name << ": " << to_string(r.disposition) << ": " << r.detail;
    if (spec.name == "large-t4096-b8") {
      EXPECT_EQ(r.comparison->reference, "cublas-float64");
    }
  }
}

TEST_F(Gpu, NativeImageQueryMatchesTheDevice) {
  const DeviceDescription d = backend_->device();
  const NativeImageQuery q = query_native_image();
  if (d.cc_major == 9 && d.cc_minor == 0) {
    EXPECT_TRUE(q.loadable) << q.detail;
    EXPECT_EQ(q.binary_version, 90);
  } else if (d.cc_major != 10) {
    EXPECT_FALSE(q.loadable) << q.detail;
  }
}

// External kernels run in a worker process forked before it touches CUDA; this test process
// already holds a CUDA context, so these tests run the attnres-check binary itself, as a user
// would, and read its JSON report.
struct BinaryRun {
  int exit_code = -1;
  std::string output;
  nlohmann::json report;
};

std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The commands with a JSON report write it where BinaryRun::report reads it.
BinaryRun run_binary(std::vector<std::string> args) {
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
  const std::string text = read_file(report);
  if (!text.empty()) run.report = nlohmann::json::parse(text);
  return run;
}

std::string cuda_plugin(const std::string& variant) {
  return std::string("so:") + ATTNRES_PLUGIN_DIR + "/libattnres_plugin_test_cuda_" + variant + ".so";
}

const nlohmann::json& find_case(const nlohmann::json& report, const std::string& name) {
  for (const auto& c : report["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no case " + name);
}

// The test plugin behaves as vLLM's fixed native op: it refuses padded rows with the seed's
// message. Declared so (--profile vllm-op), every bundled case is judged on it and met; with no
// declaration its refusals are failures.
TEST_F(Gpu, CudaPluginMeetsTheBundledExpectations) {
  const BinaryRun run =
      run_binary({"run", testing::source_path("cases"), "--kernel", cuda_plugin("ok"), "--profile", "vllm-op"});
  EXPECT_EQ(run.exit_code, kExitOk) << run.output;
  const nlohmann::json& r = run.report;
  EXPECT_EQ(r["summary"]["total"],
            std::int64_t(load_cases({testing::source_path("cases")}).cases.size()));  // none left out
  EXPECT_EQ(r["summary"]["by_disposition"]["rejected-as-expected"], 21);
  EXPECT_EQ(find_case(r, "vllm-attn_res-triton-write")["rejection"],
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, none, 7168 for hidden_size 7168");
  EXPECT_EQ(find_case(r, "vllm-attn_res-triton-write-add")["rejection"],
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7175, 7168 for hidden_size 7168");
  for (const auto& c : r["cases"]) EXPECT_EQ(c["kernel"], cuda_plugin("ok")) << c["name"];
  const BinaryRun undeclared =
      run_binary({"run", testing::source_path("cases/guard.json"), "--kernel", cuda_plugin("ok")});
  EXPECT_EQ(undeclared.exit_code, kExitUnmet) << undeclared.output;
  EXPECT_EQ(undeclared.report["summary"]["by_disposition"]["unexpected-rejection"], 4);
}

// The mutants run on the device (one thread per token) where the backend is CUDA: every
// mutant must be caught by exactly the cases that catch its host twin (the eps, denormal and
// row-count mutants only by cases/numerics.json).
TEST_F(Gpu, DeviceMutantsAreCaughtByTheCasesThatCatchTheHostOnes) {
  const std::vector<std::string> cases{"mutants",
                                       testing::source_path("cases/depth.json"),
                                       testing::source_path("cases/portable-padded.json"),
                                       testing::source_path("cases/numerics.json"),
                                       "--filter",
                                       "depth-*",
                                       "--filter",
                                       "zero-*",
                                       "--filter",
                                       "large-logits-*",
                                       "--filter",
                                       "*-t3-*",
                                       "--filter",
                                       "numerics-*"};
  std::vector<std::string> on_gpu = cases, on_cpu = cases;
  on_gpu.insert(on_gpu.end(), {"--backend", "cuda", "--fail-under", "100"});
  on_cpu.insert(on_cpu.end(), {"--backend", "cpu"});
  const BinaryRun gpu = run_binary(on_gpu), cpu = run_binary(on_cpu);
  EXPECT_EQ(gpu.exit_code, kExitOk) << gpu.output;
  ASSERT_EQ(gpu.report["mutants"].size(), mutations().size()) << gpu.output;
  EXPECT_EQ(gpu.report["backend"], "cuda");
  EXPECT_EQ(gpu.report["left_out"].size(), 0u);
  for (std::size_t m = 0; m < mutations().size(); ++m) {
    std::vector<std::string> gpu_killers, cpu_killers;
    for (const auto& k : gpu.report["mutants"][m]["killed_by"]) gpu_killers.push_back(k["case"]);
    for (const auto& k : cpu.report["mutants"][m]["killed_by"]) cpu_killers.push_back(k["case"]);
    EXPECT_EQ(gpu_killers, cpu_killers) << gpu.report["mutants"][m]["name"];
    EXPECT_FALSE(gpu_killers.empty()) << gpu.report["mutants"][m]["name"];
  }
}

TEST_F(Gpu, CudaPluginWritingOutOfBoundsIsAMemoryViolationAndLaterCasesAreJudged) {
  const BinaryRun run = run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                    "--kernel", cuda_plugin("out_of_bounds")});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  const nlohmann::json& r = run.report;
  ASSERT_GE(r["cases"].size(), 2u) << run.output;
  for (const auto& c : r["cases"]) {
    EXPECT_EQ(c["disposition"], "memory-violation") << c["name"] << ": " << c["detail"];
    ASSERT_FALSE(c["violations"].empty());
    EXPECT_EQ(c["violations"][0]["tensor"], "output");
    EXPECT_EQ(c["violations"][0]["kind"], "guard region after the allocation overwritten");
    EXPECT_TRUE(c["comparison"]["mismatched"] == 0) << c["name"];  // the answer itself is right
  }
}

// A kernel whose own non-blocking stream writes the output ~50 ms after the call returned: the
// tool waits for every stream before it judges, so the +1 it adds is seen as out of tolerance.
TEST_F(Gpu, LateWritesOnTheKernelsOwnStreamAreJudged) {
  const BinaryRun run = run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                    "--kernel", cuda_plugin("late_writer")});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  ASSERT_GE(run.report["cases"].size(), 2u) << run.output;
  for (const auto& c : run.report["cases"]) {
    EXPECT_EQ(c["disposition"], "failed") << c["name"] << ": " << c["detail"];
    EXPECT_GT(c["comparison"]["mismatched"].get<std::int64_t>(), c["comparison"]["total"].get<std::int64_t>() / 2)
        << c["name"];
  }
}

// --devices: two workers sharing the one device (and "all": one per device there is) report what
// one process reports, in case order, each case naming the device that ran it.
TEST_F(Gpu, WorkersPerDeviceReportWhatOneProcessReports) {
  const std::vector<std::string> base{"run",
                                      testing::source_path("cases/public.json"),
                                      testing::source_path("cases/guard.json"),
                                      "--filter",
                                      "public-t3-*",
                                      "--filter",
                                      "seed*"};
  const BinaryRun single = run_binary(base);
  ASSERT_EQ(single.exit_code, kExitOk) << single.output;
  for (const char* devices : {"0,0", "all"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--devices", devices});
    const BinaryRun spread = run_binary(args);
    EXPECT_EQ(spread.exit_code, kExitOk) << spread.output;
    ASSERT_EQ(spread.report["cases"].size(), single.report["cases"].size()) << spread.output;
    for (std::size_t i = 0; i < single.report["cases"].size(); ++i) {
      nlohmann::json a = single.report["cases"][i], b = spread.report["cases"][i];
      for (const char* varying : {"seconds", "timings"}) {
        a.erase(varying);
        b.erase(varying);
      }
      EXPECT_EQ(a, b) << devices;
    }
    EXPECT_EQ(spread.report["device"], single.report["device"]) << devices;
  }
  const BinaryRun missing = run_binary({"run", testing::source_path("cases/guard.json"), "--devices", "0,7"});
  EXPECT_EQ(missing.exit_code, kExitBadInput) << missing.output;
  EXPECT_NE(missing.output.find("--device 7: this process sees"), std::string::npos) << missing.output;
}

// The nine public T=17 cases on a CUDA test plugin that goes wrong on every call with 3 blocks:
// that case is an error whose detail `check_detail` judges, the other eight pass, in case order.
void expect_only_the_three_block_case_lost(const std::string& plugin, const std::vector<std::string>& more_arguments,
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

TEST_F(Gpu, AnIllegalAddressCostsOnlyItsCase) {
  expect_only_the_three_block_case_lost("faults", {}, [](const std::string& detail) {
    EXPECT_NE(detail.find("illegal memory access"), std::string::npos) << detail;
  });
}

// SIGKILL ends a worker whose kernel never finishes; the driver tears its context down, and the
// next worker's context runs the remaining cases.
TEST_F(Gpu, AKernelThatHangsCostsOnlyItsCase) {
  expect_only_the_three_block_case_lost("hangs", {"--timeout", "10"}, [](const std::string& detail) {
    EXPECT_EQ(detail,
              "no answer within 10 s (--timeout): the worker process running this case was killed; a new worker "
              "runs the remaining cases");
  });
}

// explore on the GPU with a plugin that faults on 3 blocks (and, as vLLM's op, refuses padded rows,
// which it declares): the illegal address is a finding (each trial that loses its context gets a
// fresh worker), shrunk, and bundled from a new worker.
TEST_F(Gpu, ExploreShrinksAnIllegalAddressIntoABundle) {
  testing::TempDir dir;
  const std::string bundle = (dir.path() / "found").string();
  const BinaryRun run = run_binary({"explore", "--kernel", cuda_plugin("faults"), "--profile", "vllm-op", "--budget",
                                    "60", "--seed", "3", "--max-hidden", "256", "--out", bundle});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  const nlohmann::json result = nlohmann::json::parse(read_file(bundle + "/result.json"));
  EXPECT_EQ(result["disposition"], "error") << run.output;
  EXPECT_NE(result["detail"].get<std::string>().find("illegal memory access"), std::string::npos) << result["detail"];
  EXPECT_EQ(nlohmann::json::parse(read_file(bundle + "/case.json"))["num_blocks"], 3);
  EXPECT_TRUE(std::filesystem::exists(bundle + "/inputs.safetensors")) << run.output;
}

TEST_F(Gpu, TorchOpBridgeOnDeviceTensors) {
  if (!ATTNRES_HAVE_TORCH_BRIDGE) GTEST_SKIP() << "CMake found no Torch: the torch-op bridge is not built";
  const BinaryRun vllm = run_binary(
      {"run", testing::source_path("cases/public.json"), testing::source_path("cases/guard.json"), "--kernel",
       "torch-op:attnres_test::kimi_k3_attn_res", "--torch-library", ATTNRES_TORCH_TEST_OPS, "--profile", "vllm-op"});
  EXPECT_EQ(vllm.exit_code, kExitOk) << vllm.output;
  EXPECT_EQ(vllm.report["summary"]["by_disposition"]["passed"], 6);
  EXPECT_EQ(vllm.report["summary"]["by_disposition"]["rejected-as-expected"], 3);
  EXPECT_EQ(find_case(vllm.report, "seed-repro-prefix-stride-7175")["rejection"],
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168");
  const BinaryRun full =
      run_binary({"run", testing::source_path("cases/public.json"), "--kernel", "torch-op:attnres_test::attn_res_full",
                  "--torch-library", ATTNRES_TORCH_TEST_OPS});
  EXPECT_EQ(full.exit_code, kExitOk) << full.output;
  EXPECT_EQ(full.report["summary"]["by_disposition"]["passed"], 36);
  const BinaryRun seed = run_binary({"run", testing::source_path("cases/guard.json"), "--filter", "seed*", "--kernel",
                                     "torch-op:attnres_test::kimi_k3_attn_res_hardcoded", "--torch-library",
                                     ATTNRES_TORCH_TEST_OPS, "--profile", "vllm-op"});
  EXPECT_EQ(seed.report["cases"][0]["disposition"], "not-rejected") << seed.output;
}

TEST_F(Gpu, PythonBridgeOnDeviceTensors) {
  if (!ATTNRES_HAVE_PYTHON_BRIDGE)
    GTEST_SKIP() << "CMake found no Python development files: the Python bridge is not built";
  for (const char* function : {"attn_res_eager", "attn_res_triton"}) {
    const BinaryRun run =
        run_binary({"run", testing::source_path("cases/public.json"), testing::source_path("cases/guard.json"),
                    "--kernel", std::string("python:attnres_python_test:") + function, "--profile", "vllm-op"});
    EXPECT_EQ(run.exit_code, kExitOk) << function << run.output;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["passed"], 37) << function;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["rejected-as-expected"], 3) << function;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["skipped"], 1) << function;  // a padded output
  }
  // Kernels that take every stride, gated as vLLM's dispatch and FlashInfer's API: every bundled
  // case computed (or skipped where the signature returns a fresh output).
  for (const auto& [function, preset] :
       {std::pair<std::string, std::string>{"attn_res_triton_any_stride", "vllm-dispatch"},
        {"attn_res_eager_any_stride", "vllm-dispatch"},
        {"attn_res_flashinfer", "flashinfer"}}) {
    std::vector<std::string> args{"run",       testing::source_path("cases"),
                                  "--kernel",  "python:attnres_python_test:" + function,
                                  "--profile", preset};
    if (preset == "flashinfer") args.insert(args.end(), {"--signature", "flashinfer"});
    const BinaryRun run = run_binary(args);
    EXPECT_EQ(run.exit_code, kExitOk) << function << run.output;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["rejected-as-expected"], 0) << function;
  }
  // The seed's dispatch without the op-existence check, on a torch without vLLM's op.
  const BinaryRun missing =
      run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-b1-norm", "--kernel",
                  "python:attnres_python_test:attn_res_without_op_check"});
  EXPECT_EQ(missing.report["cases"][0]["disposition"], "error") << missing.output;
  EXPECT_NE(missing.report["cases"][0]["detail"].get<std::string>().find("AttributeError"), std::string::npos)
      << missing.report["cases"][0]["detail"];
}

TEST_F(Gpu, CasesOverTheDeviceBudgetAreNotRun) {
  CaseSpec spec = default_case("budget", 320, 7168, 8, 4);
  RunOptions options;
  options.budget.device_bytes = 1 << 20;
  const CaseResult r = run_case(spec, *backend_, options);
  EXPECT_EQ(r.disposition, Disposition::not_run);
  EXPECT_NE(r.detail.find("of device memory; the budget is 1048576 bytes"), std::string::npos) << r.detail;
  // The tensors, and the reference's float64 buffers beside them; nothing on the host.
  const CaseFootprint need = case_footprint(spec, *backend_, false);
  EXPECT_GT(need.device_bytes.value(), *case_storage_bytes(spec.shape, spec.strides) + 320 * 7168 * 8);
  EXPECT_EQ(need.host_bytes, 0);
  // Without a budget, the device's free memory decides.
  CaseSpec huge = default_case("huge", std::int64_t(1) << 24, 7168, 8, 8);
  const CaseResult h = run_case(huge, *backend_, RunOptions{});
  EXPECT_EQ(h.disposition, Disposition::not_run);
  EXPECT_NE(h.detail.find("of device memory; the budget is"), std::string::npos) << h.detail;
  EXPECT_NE(h.detail.find("(the device's free memory; --max-device-memory sets it)"), std::string::npos) << h.detail;
}

}  // namespace
}  // namespace attnres
