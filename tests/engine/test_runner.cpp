#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "app/engine/runner.h"
#include "kernels/builtin/builtin_kernels.h"
#include "kernels/common/cuda_check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/cuda_test_support.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

// A modelled H200 whose "kernel" is any function: the CPU stand-in, or one that misbehaves.
class FakeBackend : public Backend {
 public:
  explicit FakeBackend(std::function<void(CaseTensors&)> kernel) : kernel_(std::move(kernel)) {
    register_builtin_kernels(kernels_, OperandPlace::host, native_images());
  }
  std::string name() const override { return "fake"; }
  DeviceDescription device() const override { return {true, "fake H200", 9, 0}; }
  NativeImages native_images() const override { return {true, true}; }
  OperandPlace operand_place() const override { return OperandPlace::host; }
  std::unique_ptr<CaseWorkspace> prepare(const CaseSpec& spec, const InputSource* inputs, bool) override {
    const HostExecutor run = [this](KernelEntry&, const LaunchOptions&, CaseTensors& t) { kernel_(t); };
    return make_host_workspace(inputs ? inputs->make() : make_case_tensors(spec), run);
  }
  bool usable() const override { return usable_; }
  CaseFootprint footprint(const AttnResShape& shape, const AttnResStrides& strides, bool, bool) const override {
    return {host_workspace_bytes(shape, strides), case_storage_bytes(shape, strides)};
  }
  std::optional<std::int64_t> free_device_bytes() const override { return free_device_bytes_; }
  bool usable_ = true;
  std::int64_t free_device_bytes_ = std::int64_t(1) << 40;

 private:
  std::function<void(CaseTensors&)> kernel_;
};

void correct(CaseTensors& t) { cpu_portable_kernel(t.args()); }

CaseSpec small_case(std::string name = "small") {
  CaseSpec spec = default_case(std::move(name), 5, 512, 4, 3);
  spec.seed = testing::fresh_seed();
  spec.shape.block_write_idx = 1;
  return spec;
}

TEST(Runner, BundledCasesMeetTheirExpectationsOnTheCpuStandIns) {
  const LoadedCases loaded =
      load_cases({testing::source_path("cases/public.json"), testing::source_path("cases/guard.json"),
                  testing::source_path("cases/fallback.json"), testing::source_path("cases/portable-padded.json")});
  ASSERT_TRUE(loaded.errors.empty());
  auto backend = make_cpu_backend(*parse_device_model("sm_90"), NativeImages{true, true});
  int rejected = 0, portable = 0;
  for (const CaseSpec& spec : loaded.cases) {
    const CaseResult r = run_case(spec, *backend, RunOptions{});
    EXPECT_TRUE(meets_expectation(r.disposition)) << spec.name << ": " << to_string(r.disposition) << ": " << r.detail;
    rejected += r.disposition == Disposition::rejected_as_expected;
    portable += r.kernel == "portable";
    if (r.comparison) {
      EXPECT_EQ(r.comparison->nan_count, 0);
      EXPECT_TRUE(r.comparison->exact_state());
    }
  }
  EXPECT_EQ(rejected, 4);
  EXPECT_GE(portable, 16);
}

// An empty serving batch is a legal call: every kernel returns without writing, and passes.
TEST(Runner, EmptyBatchPassesOnEveryKernelAndSaysSo) {
  auto backend = make_cpu_backend(*parse_device_model("sm_90"), NativeImages{true, true});
  for (const KernelChoice choice : {KernelChoice::automatic, KernelChoice::native, KernelChoice::portable}) {
    CaseSpec spec = default_case("empty", 0, 7168, 8, 4);
    spec.shape.block_write_idx = 4;
    spec.kernel = choice;
    const CaseResult r = run_case(spec, *backend, RunOptions{});
    ASSERT_EQ(r.disposition, Disposition::passed) << to_string(choice) << ": " << r.detail;
    EXPECT_EQ(r.detail,
              "T = 0 (an empty batch): nothing to compute, and the kernel wrote nothing: guard regions, padding "
              "and inputs unchanged");
    ASSERT_TRUE(r.comparison);
    EXPECT_EQ(r.comparison->total, 0);
  }
}

TEST(Runner, EmptyBatchKernelThatWritesAnywayIsAMemoryViolation) {
  FakeBackend backend([](CaseTensors& t) { t.output.storage[0] = 0; });  // the guard region before the output
  CaseSpec spec = default_case("empty", 0, 512, 2, 2);
  const CaseResult r = run_case(spec, backend, RunOptions{});
  EXPECT_EQ(r.disposition, Disposition::memory_violation) << r.detail;
  EXPECT_EQ(r.detail,
            fmt::format("output: guard region before the allocation overwritten at offset -{} (1 elements); no "
                        "output elements to compare (T = 0)",
                        kMinGuardElements));
}

TEST(Runner, PassedCarriesMetricsAndChecksums) {
  FakeBackend backend(correct);
  const CaseResult r = run_case(small_case(), backend, RunOptions{});
  ASSERT_EQ(r.disposition, Disposition::passed) << r.detail;
  ASSERT_TRUE(r.comparison);
  EXPECT_EQ(r.comparison->reference, "cpu-float64");
  EXPECT_EQ(r.comparison->total, 5 * 512);
  EXPECT_GT(r.comparison->max_abs_error, 0.0);  // bf16 output: never bit-equal to float64
  EXPECT_LT(r.comparison->max_abs_error, 0.05);
  EXPECT_EQ(r.input_checksums.size(), 6u);  // output has none
  EXPECT_EQ(r.kernel, "native");
}

TEST(Runner, UnwrittenOutputIsAMemoryViolation) {
  FakeBackend backend([](CaseTensors& t) {
    correct(t);
    t.output.at(3, 100) = kPoisonBits;
  });
  const CaseResult r = run_case(small_case(), backend, RunOptions{});
  ASSERT_EQ(r.disposition, Disposition::memory_violation);
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].to_string(),
            "output: output element not written (still poison) at row 3 col 100 (1 elements)");
  EXPECT_EQ(r.comparison->nan_count, 1);
}

TEST(Runner, PaddingGuardAndInputDamageAreLocated) {
  CaseSpec spec = small_case();
  spec.kernel = KernelChoice::portable;  // padded output rows: the native entry would refuse
  spec.strides.output = 520;
  FakeBackend backend([](CaseTensors& t) {
    correct(t);
    t.output.at(2, 515) = 0;                            // row padding
    t.blocks.storage[t.blocks.storage.size() - 1] = 0;  // guard region after blocks
    t.delta.at(4, 7) ^= 1;                              // an input that must not change
    t.blocks.at(0 * 4 + 3, 0) ^= 1;                     // an unused block
    t.prefix.base()[-192] = 0;                          // 192 elements before prefix
    t.output.row(5)[3] = 0;                             // one row past the output's last
  });
  const CaseResult r = run_case(spec, backend, RunOptions{});
  ASSERT_EQ(r.disposition, Disposition::memory_violation);
  std::vector<std::string> texts;
  for (const auto& v : r.violations) texts.push_back(v.to_string());
  // Guards of 64 KiB at least: a stray write a row past a tensor is blamed on it.
  const std::vector<std::string> expected = {
      "prefix: guard region before the allocation overwritten at offset -192 (1 elements)",
      "delta: input modified at row 4 col 7 (1 elements)",
      "blocks: guard region after the allocation overwritten at offset " +
          std::to_string(5 * 4 * 512 + kMinGuardElements - 1) + " (1 elements)",
      "blocks: input modified at row 3 col 0 (1 elements)",
      "output: guard region after the allocation overwritten at offset " + std::to_string(5 * 520 + 3) +
          " (1 elements)",
      "output: padding canary overwritten at row 2 col 515 (1 elements)"};
  EXPECT_EQ(texts, expected);
}

TEST(Runner, OutOfToleranceAndInexactStateFail) {
  FakeBackend off([](CaseTensors& t) {
    correct(t);
    for (int h = 0; h < 10; ++h) t.output.at(1, h) = float_to_bf16(bf16_to_float(t.output.at(1, h)) + 0.5f);
  });
  const CaseResult r = run_case(small_case(), off, RunOptions{});
  ASSERT_EQ(r.disposition, Disposition::failed);
  EXPECT_EQ(r.comparison->mismatched, 10);
  EXPECT_EQ(r.comparison->mismatch_summary(), "Mismatched elements: 10 / 2560 (0.4%)");
  EXPECT_EQ(r.comparison->worst_token, 1);
  EXPECT_GT(r.comparison->max_abs_error, 0.4);
  EXPECT_FALSE(r.error_map);  // only where asked for (run --html)
  RunOptions with_maps;
  with_maps.error_maps = true;
  const CaseResult mapped = run_case(small_case(), off, with_maps);
  ASSERT_TRUE(mapped.error_map);
  const ErrorMap& map = *mapped.error_map;
  EXPECT_EQ(map.rows, 5);  // T=5 rows of 512: one cell per token, 128 cells of 4 columns
  EXPECT_EQ(map.columns, 128);
  // The ten bad elements are token 1's columns 0..9: cells 0, 1 (4 each) and 2 (2).
  std::vector<std::int64_t> expected(5 * 128, 0);
  expected[128 + 0] = 4;
  expected[128 + 1] = 4;
  expected[128 + 2] = 2;
  EXPECT_EQ(map.mismatched, expected);
  EXPECT_GT(map.max_error[128], 0.4);
  EXPECT_LT(map.max_error[0], 0.05);

  FakeBackend stale_block([](CaseTensors& t) {
    correct(t);
    t.blocks.at(2 * 4 + 1, 5) ^= 1;  // the written block of token 2
  });
  const CaseResult s = run_case(small_case(), stale_block, RunOptions{});
  ASSERT_EQ(s.disposition, Disposition::failed);
  EXPECT_EQ(s.comparison->blocks_mismatches, 1);
  EXPECT_NE(s.detail.find("written block not bit-exact in 1 elements (first row 2 col 5"), std::string::npos)
      << s.detail;
}

TEST(Runner, RejectionExpectations) {
  CaseSpec padded = small_case();
  padded.strides.prefix = 513;
  FakeBackend backend(correct);
  // No expectation in the case: the native kernel's declaration says it must refuse, and with what.
  const CaseResult declared = run_case(padded, backend, RunOptions{});
  EXPECT_EQ(declared.disposition, Disposition::rejected_as_expected);
  const std::string message =
      "Kimi K3 AttnRes requires densely packed rows; got strides 513, 512, 512 for hidden_size 512";
  EXPECT_EQ(declared.rejection.value(), message);
  EXPECT_EQ(declared.expectation,
            "refuse with \"" + message + "\": the built-in native kernel declares it must refuse where rows_not_dense");

  // The case file's own expectation wins.
  padded.expectation_written = true;
  const CaseResult unexpected = run_case(padded, backend, RunOptions{});
  EXPECT_EQ(unexpected.disposition, Disposition::unexpected_rejection);
  EXPECT_EQ(unexpected.expectation, "compute: the case file says so");
  padded.expect = Expectation::reject;
  padded.expected_message = message;
  EXPECT_EQ(run_case(padded, backend, RunOptions{}).disposition, Disposition::rejected_as_expected);
  padded.expected_message = "something else";
  const CaseResult other = run_case(padded, backend, RunOptions{});
  EXPECT_EQ(other.disposition, Disposition::unexpected_rejection);
  EXPECT_NE(other.detail.find("expected \"something else\""), std::string::npos);

  CaseSpec dense = small_case();
  dense.expectation_written = true;
  dense.expect = Expectation::reject;
  EXPECT_EQ(run_case(dense, backend, RunOptions{}).disposition, Disposition::not_rejected);
}

TEST(Runner, UnguardedSeedReproCorruptsSilently) {
  auto backend = make_cpu_backend(*parse_device_model("sm_90"), NativeImages{true, true});
  EXPECT_EQ(testing::expect_unguarded_seed_repro_corrupts_silently(*backend).kernel, "native");
}

TEST(Runner, NoDeviceIsNotRun) {
  auto backend = make_cpu_backend(DeviceDescription{}, NativeImages{});
  const CaseResult r = run_case(small_case(), *backend, RunOptions{});
  EXPECT_EQ(r.disposition, Disposition::not_run);
  EXPECT_EQ(r.detail, "no CUDA device");
  EXPECT_FALSE(meets_expectation(r.disposition));
}

TEST(Runner, DeviceErrorsAreTheirCaseOnlyUntilTheContextIsLost) {
  FakeBackend backend([](CaseTensors&) { throw CudaError("x.cu:1: launch failed: an illegal memory access", true); });
  const CaseResult first = run_case(small_case(), backend, RunOptions{});
  EXPECT_EQ(first.disposition, Disposition::error);
  EXPECT_EQ(first.detail, "x.cu:1: launch failed: an illegal memory access");
  backend.usable_ = false;
  const CaseResult next = run_case(small_case(), backend, RunOptions{});
  EXPECT_EQ(next.disposition, Disposition::error);
  EXPECT_EQ(next.detail, "not attempted: an earlier fault left the CUDA context unusable");
}

TEST(Runner, AReferenceThatIsNotFiniteIsTheCasesFaultNotAPass) {
  // eps 0 on an all-zero row: rsqrt(0) times a zero dot product is NaN in float64 too.
  CaseSpec spec = default_case("zero-rows", 2, 64, 0, 0);
  spec.shape.has_delta = false;
  spec.eps = 0;
  spec.shape.eps = 0;
  spec.distributions[int(InputTensor::prefix)].kind = DistributionKind::constant;
  spec.distributions[int(InputTensor::prefix)].value = 0;
  FakeBackend backend(correct);
  const CaseResult r = run_case(spec, backend, RunOptions{});
  EXPECT_EQ(r.disposition, Disposition::error);
  EXPECT_EQ(r.detail.rfind("reference is not finite at [0, 0] (NaN)", 0), 0u) << r.detail;
}

TEST(Compare, NonFiniteValuesMismatchUnlessEqual) {
  TensorLayout layout;
  layout.name = "output";
  layout.outer = 1;
  layout.outer_stride = layout.columns = 4;
  HostTensor out = make_tensor(layout);
  out.at(0, 0) = float_to_bf16(1.0f);
  out.at(0, 1) = float_to_bf16(NAN);
  out.at(0, 2) = float_to_bf16(INFINITY);
  out.at(0, 3) = float_to_bf16(INFINITY);
  const Comparison c = compare_output(out, {1.0, 1.0, 1.0, INFINITY}, 0.0, 0.0);
  EXPECT_EQ(c.mismatched, 2);
  EXPECT_EQ(c.nan_count, 1);
  EXPECT_EQ(c.inf_count, 2);
  EXPECT_TRUE(std::isinf(c.max_abs_error));
  EXPECT_EQ(c.worst_column, 1);
}

// Properties (run --check): each test kernel below is within tolerance on every call, and wrong
// in one property only.

RunOptions checking(std::vector<CaseProperty> properties) {
  RunOptions options;
  options.properties = std::move(properties);
  return options;
}

const PropertyResult& property_of(const CaseResult& r, CaseProperty property) {
  for (const PropertyResult& p : r.properties)
    if (p.property == property) return p;
  throw std::logic_error(std::string("no result for ") + to_string(property));
}

// One bit of element [t, column] flipped in every row: far inside the tolerance.
void flip_low_bit(CaseTensors& t, std::int64_t token, std::int64_t column) { t.output.at(token, column) ^= 1u; }

TEST(Properties, ACorrectKernelHasEveryProperty) {
  FakeBackend backend(correct);
  const CaseResult r =
      run_case(small_case(), backend, checking({std::begin(kAllCaseProperties), std::end(kAllCaseProperties)}));
  ASSERT_EQ(r.disposition, Disposition::passed) << r.detail;
  ASSERT_EQ(r.properties.size(), 6u);
  for (const PropertyResult& p : r.properties) {
    const bool on_device =
        p.property == CaseProperty::stream || p.property == CaseProperty::graph || p.property == CaseProperty::pdl;
    EXPECT_EQ(p.disposition, on_device ? Disposition::skipped : Disposition::passed) << p.detail;
  }
  EXPECT_EQ(property_of(r, CaseProperty::stream).detail,
            "the CPU backend's kernels take host operands, and have no streams");
  EXPECT_EQ(property_of(r, CaseProperty::graph).detail,
            "the CPU backend's kernels take host operands, and have no CUDA graphs");
  EXPECT_EQ(property_of(r, CaseProperty::pdl).detail,
            "the CPU backend's kernels take host operands, and have no programmatic dependent launch");
  EXPECT_EQ(property_of(r, CaseProperty::determinism).detail,
            "3 more calls on the same inputs gave the judged call's bits");
  // Both sides of T, of vLLM's rms_norm bound, and of each native plan bound for 3 blocks at H=512.
  const std::string& invariance = property_of(r, CaseProperty::batch_invariance).detail;
  EXPECT_NE(invariance.find("batches of 1, 2, 4, 6, 16, 17, 32, 33, 192, 193, 256, 257 tokens"), std::string::npos)
      << invariance;
  EXPECT_NE(invariance.find("the first 5 rows moved 1 and 3 rows later"), std::string::npos) << invariance;
}

TEST(Properties, ARowWhoseBitsDependOnTheBatchSizeFailsBatchInvarianceOnly) {
  FakeBackend backend([](CaseTensors& t) {
    correct(t);
    if (t.shape.tokens >= 100)
      for (std::int64_t token = 0; token < t.shape.tokens; ++token) flip_low_bit(t, token, 7);
  });
  const CaseResult r =
      run_case(small_case(), backend, checking({std::begin(kAllCaseProperties), std::end(kAllCaseProperties)}));
  EXPECT_EQ(r.disposition, Disposition::failed);
  EXPECT_EQ(r.detail.rfind("batch-invariance: row 0 of the case's batch of 5 differs when computed in a batch of 192: "
                           "5 elements of the 5 rows compared differ; first at column 7: ",
                           0),
            0u)
      << r.detail;
  EXPECT_EQ(property_of(r, CaseProperty::batch_invariance).disposition, Disposition::failed);
  EXPECT_EQ(property_of(r, CaseProperty::determinism).disposition, Disposition::passed);
  EXPECT_EQ(property_of(r, CaseProperty::garbage).disposition, Disposition::passed);
  EXPECT_NE(r.detail.find("; the call itself passed: max-abs error"), std::string::npos) << r.detail;
}

TEST(Properties, ARowWhoseBitsDependOnItsPlaceInTheBatchFailsBatchInvariance) {
  FakeBackend backend([](CaseTensors& t) {
    correct(t);
    for (std::int64_t token = 1; token < t.shape.tokens; token += 2) flip_low_bit(t, token, 3);
  });
  const CaseResult r = run_case(small_case(), backend, checking({CaseProperty::batch_invariance}));
  const PropertyResult& invariance = property_of(r, CaseProperty::batch_invariance);
  EXPECT_EQ(invariance.disposition, Disposition::failed);
  EXPECT_EQ(invariance.detail.rfind("row 0 of the case's batch of 5 differs when it is row 1 of a batch of 6", 0), 0u)
      << invariance.detail;
}

TEST(Properties, ABatchWideSumLeaksGarbageRowsIntoEveryRow) {
  // As a batch-wide amax for a quantization scale: 1 + 0 * sum is 1, unless a row holds NaN or Inf.
  FakeBackend backend([](CaseTensors& t) {
    float sum = 0;
    for (std::int64_t token = 0; token < t.shape.tokens; ++token)
      for (std::int64_t h = 0; h < t.shape.hidden; ++h) sum += std::fabs(bf16_to_float(t.prefix.at(token, h)));
    correct(t);
    for (std::int64_t token = 0; token < t.shape.tokens; ++token)
      for (std::int64_t h = 0; h < t.shape.hidden; ++h)
        t.output.at(token, h) = float_to_bf16(bf16_to_float(t.output.at(token, h)) * (1 + 0 * sum));
  });
  const CaseResult r =
      run_case(small_case(), backend, checking({std::begin(kAllCaseProperties), std::end(kAllCaseProperties)}));
  EXPECT_EQ(r.disposition, Disposition::failed);
  const PropertyResult& garbage = property_of(r, CaseProperty::garbage);
  EXPECT_EQ(garbage.disposition, Disposition::failed);
  EXPECT_EQ(garbage.detail.rfind("with NaN, ±Inf and ±3.0e38 in rows 0, 6 and 7 of a batch of 8, in every padding "
                                 "element and in the blocks past num_blocks, rows 1..5 (the case's first 5) change: "
                                 "2560 of their elements differ from the same batch with generated values there; "
                                 "first at [1, 0]: ",
                                 0),
            0u)
      << garbage.detail;
  EXPECT_NE(garbage.detail.find(" with generated values, 0x7fc0 with garbage"), std::string::npos) << garbage.detail;
  EXPECT_EQ(property_of(r, CaseProperty::determinism).disposition, Disposition::passed);
  EXPECT_EQ(property_of(r, CaseProperty::batch_invariance).disposition, Disposition::passed);
}

TEST(Properties, AKernelThatReadsBlocksPastNumBlocksFailsGarbage) {
  // Its sources are right, but it scales by 1 + 0 * the first unused block's first element.
  FakeBackend backend([](CaseTensors& t) {
    const float unused = bf16_to_float(t.blocks.at(t.shape.num_blocks, 0));
    correct(t);
    for (std::int64_t token = 0; token < t.shape.tokens; ++token)
      t.output.at(token, 0) = float_to_bf16(bf16_to_float(t.output.at(token, 0)) * (1 + 0 * unused));
  });
  const CaseResult r = run_case(small_case(), backend, checking({CaseProperty::garbage}));
  EXPECT_EQ(property_of(r, CaseProperty::garbage).disposition, Disposition::failed);
  EXPECT_EQ(r.disposition, Disposition::failed);
}

TEST(Properties, AKernelThatChangesAfterItsSecondCallFailsDeterminism) {
  int calls = 0;
  FakeBackend backend([&calls](CaseTensors& t) {
    correct(t);
    if (++calls > 2) flip_low_bit(t, 4, 9);  // the probe call and the judged call are its first two
  });
  const CaseResult r = run_case(small_case(), backend, checking({CaseProperty::determinism}));
  const PropertyResult& determinism = property_of(r, CaseProperty::determinism);
  EXPECT_EQ(determinism.disposition, Disposition::failed);
  EXPECT_EQ(determinism.detail.rfind("call 1 of 3 more on the same inputs differs from the judged call in 1 of 2560 "
                                     "elements; first at [4, 9]",
                                     0),
            0u)
      << determinism.detail;
}

TEST(Properties, ACaseFilesChecksAreJudgedWithoutTheCommandLine) {
  FakeBackend backend(correct);
  CaseSpec spec = small_case();
  spec.checks = {CaseProperty::garbage};
  const CaseResult r = run_case(spec, backend, checking({CaseProperty::determinism}));
  ASSERT_EQ(r.properties.size(), 2u);
  EXPECT_EQ(r.properties[0].property, CaseProperty::determinism);
  EXPECT_EQ(r.properties[1].property, CaseProperty::garbage);
}

TEST(Properties, AreNotJudgedWhereTheCallItselfFailsOrNothingIsComputed) {
  FakeBackend wrong([](CaseTensors& t) {
    correct(t);
    t.output.at(0, 0) = float_to_bf16(100.0f);
  });
  const CaseResult failed = run_case(small_case(), wrong, checking({CaseProperty::determinism}));
  EXPECT_EQ(failed.disposition, Disposition::failed);
  ASSERT_EQ(failed.properties.size(), 1u);
  EXPECT_EQ(failed.properties[0].disposition, Disposition::skipped);
  EXPECT_EQ(failed.properties[0].detail, "not judged: the case is failed");

  FakeBackend backend(correct);
  const CaseResult empty = run_case(default_case("empty", 0, 512, 2, 2), backend, checking({CaseProperty::garbage}));
  EXPECT_EQ(empty.disposition, Disposition::passed);
  ASSERT_EQ(empty.properties.size(), 1u);
  EXPECT_EQ(empty.properties[0].disposition, Disposition::skipped);
  EXPECT_EQ(empty.properties[0].detail, "T = 0: no row to compute");
}

TEST(Properties, TheBuiltInStandInsOfEveryBundledLayoutHaveEveryProperty) {
  const LoadedCases loaded = load_cases({testing::source_path("cases/layouts.json")});
  ASSERT_TRUE(loaded.errors.empty());
  auto backend = make_cpu_backend(*parse_device_model("sm_90"), NativeImages{true, true});
  for (const CaseSpec& spec : loaded.cases) {
    const CaseResult r =
        run_case(spec, *backend, checking({std::begin(kAllCaseProperties), std::end(kAllCaseProperties)}));
    EXPECT_TRUE(meets_expectation(r.disposition)) << spec.name << ": " << r.detail;
    for (const PropertyResult& p : r.properties)
      EXPECT_TRUE(p.disposition == Disposition::passed || p.disposition == Disposition::skipped)
          << spec.name << " " << to_string(p.property) << ": " << p.detail;
  }
}

// On the GPU (ctest label gpu).

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
