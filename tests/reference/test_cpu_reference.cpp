// The float64 reference against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "app/casefile/host_tensors.h"
#include "kernels/cpu/cpu_kernels.h"
#include "reference/cpu_reference.h"
#include "tests/cuda_test_support.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

constexpr int kH = 8;

// A case whose every tensor is set by hand (all generated values overwritten).
struct Manual {
  CaseTensors t;
  explicit Manual(int num_blocks, int max_blocks = 4, bool delta = false, bool norm = false) {
    CaseSpec spec = default_case("manual", 1, kH, max_blocks, num_blocks);
    spec.shape.has_delta = delta;
    spec.shape.has_output_norm = norm;
    t = make_case_tensors(spec);
    for (int h = 0; h < kH; ++h) {
      t.norm_weight.at(0, h) = float_to_bf16(1.0f);
      t.qk_weight.at(0, h) = float_to_bf16(0.0f);
      if (norm) t.output_norm_weight.at(0, h) = float_to_bf16(1.0f);
    }
  }
  void set(HostTensor& tensor, std::int64_t row, std::vector<float> values) {
    for (int h = 0; h < kH; ++h) tensor.at(row, h) = float_to_bf16(values[std::size_t(h)]);
  }
  std::vector<double> run() { return cpu_reference(t.args()); }
};

TEST(CpuReference, NoBlocksGivesRmsNormOfPrefix) {
  Manual m(0, 1, false, true);
  m.set(m.t.prefix, 0, {1, -1, 2, -2, 3, -3, 0.5, 0});
  m.set(m.t.output_norm_weight, 0, {1, 2, 1, 2, 1, 2, 1, 2});
  m.t.shape.output_norm_eps = 0.0f;
  const std::vector<double> out = m.run();
  // mean square = (1+1+4+4+9+9+0.25+0)/8 = 3.53125
  const double inv_rms = 1.0 / std::sqrt(3.53125);
  const double expected[kH] = {1, -2, 2, -4, 3, -6, 0.5, 0};
  for (int h = 0; h < kH; ++h) EXPECT_DOUBLE_EQ(out[std::size_t(h)], expected[h] * inv_rms);
}

TEST(CpuReference, EqualLogitsGiveThePlainMean) {
  // The logit is scale-invariant (dot / rms), so v, 2v and 3v tie: weights 1/3 each.
  Manual m(2);
  const std::vector<float> v = {1, 2, -1, 0.5, 0, 3, -2, 1};
  for (int h = 0; h < kH; ++h) m.t.qk_weight.at(0, h) = float_to_bf16(0.25f * float(h + 1));
  std::vector<float> v2, v3;
  for (float x : v) {
    v2.push_back(2 * x);
    v3.push_back(3 * x);
  }
  m.set(m.t.blocks, 0, v2);
  m.set(m.t.blocks, 1, v3);
  m.set(m.t.prefix, 0, v);
  m.t.shape.eps = 0.0f;
  const std::vector<double> out = m.run();
  for (int h = 0; h < kH; ++h) EXPECT_NEAR(out[std::size_t(h)], 2.0 * v[std::size_t(h)], 1e-12);
}

TEST(CpuReference, OneDominantLogitPicksThatSource) {
  Manual m(1);
  m.t.qk_weight.at(0, 0) = float_to_bf16(100.0f);
  m.set(m.t.blocks, 0, {1, 0, 0, 0, 0, 0, 0, 0});   // logit 100 / sqrt(1/8) = 282.8
  m.set(m.t.prefix, 0, {-1, 0, 0, 0, 0, 0, 0, 0});  // logit -282.8
  const std::vector<double> out = m.run();
  EXPECT_DOUBLE_EQ(out[0], 1.0 - 2.0 / (1.0 + std::exp(2 * 100.0 / std::sqrt(1.0 / 8 + 1e-6))));
  EXPECT_NEAR(out[0], 1.0, 1e-200);
}

TEST(CpuReference, EpsEdgeCases) {
  {  // A zero source with eps > 0 has logit 0; with logits 0 and 0 the mix is the mean.
    Manual m(1);
    m.set(m.t.blocks, 0, {0, 0, 0, 0, 0, 0, 0, 0});
    m.set(m.t.prefix, 0, {2, 2, 2, 2, 2, 2, 2, 2});
    const std::vector<double> out = m.run();
    for (int h = 0; h < kH; ++h) EXPECT_DOUBLE_EQ(out[std::size_t(h)], 1.0);
  }
  {  // eps = 0 and a zero source: 0 / sqrt(0) is NaN, and NaN must reach the output.
    Manual m(1);
    m.t.shape.eps = 0.0f;
    m.set(m.t.blocks, 0, {0, 0, 0, 0, 0, 0, 0, 0});
    m.set(m.t.prefix, 0, {2, 2, 2, 2, 2, 2, 2, 2});
    EXPECT_TRUE(std::isnan(m.run()[0]));
  }
  {  // A huge eps flattens every logit to ~0: the plain mean again.
    Manual m(1);
    m.t.shape.eps = 1e30f;
    m.t.qk_weight.at(0, 0) = float_to_bf16(100.0f);
    m.set(m.t.blocks, 0, {4, 0, 0, 0, 0, 0, 0, 0});
    m.set(m.t.prefix, 0, {0, 4, 0, 0, 0, 0, 0, 0});
    const std::vector<double> out = m.run();
    EXPECT_NEAR(out[0], 2.0, 1e-9);
    EXPECT_NEAR(out[1], 2.0, 1e-9);
  }
  {  // output_norm_eps dominates a tiny mix: out = mixed / sqrt(eps_out).
    Manual m(0, 1, false, true);
    m.t.shape.output_norm_eps = 1.0f;
    m.set(m.t.prefix, 0, {0.0078125, 0, 0, 0, 0, 0, 0, 0});
    const double mean_square = 0.0078125 * 0.0078125 / 8;
    EXPECT_DOUBLE_EQ(m.run()[0], 0.0078125 / std::sqrt(mean_square + 1.0));
  }
}

TEST(CpuReference, PrefixSumIsOneBf16RoundingAndBlockWriteFeedsTheSources) {
  Manual m(2, 4, true);
  m.t.shape.block_write_idx = 1;
  m.t.qk_weight.at(0, 0) = float_to_bf16(1.0f);
  m.set(m.t.prefix, 0, {1, 1, 1, 1, 1, 1, 1, 1});
  m.set(m.t.delta, 0, {0.00390625f, 0.005859375f, 0, 0, 0, 0, 0, 0});  // 2^-8: a tie; 1.5 * 2^-8: above it
  m.set(m.t.blocks, 0, {8, 8, 8, 8, 8, 8, 8, 8});
  m.set(m.t.blocks, 1, {-100, -100, -100, -100, -100, -100, -100, -100});  // overwritten before it is read
  const std::vector<double> out = m.run();
  EXPECT_EQ(m.t.prefix.at(0, 0), 0x3f80);  // 1 + 2^-8 ties to even: 1.0
  EXPECT_EQ(m.t.prefix.at(0, 1), 0x3f81);  // 1.0078125
  for (int h = 0; h < kH; ++h) EXPECT_EQ(m.t.blocks.at(1, h), m.t.prefix.at(0, h));
  // Sources: 8*ones (logit 8/8=1) and p twice (logit ~1); weights all ~1/3.
  const double p0 = 1.0, p1 = 1.0078125;
  const double rms_p = std::sqrt((p0 * p0 + p1 * p1 + 6) / 8 + 1e-6);
  const double l8 = 8.0 / std::sqrt(64 + 1e-6), lp = p0 / rms_p;
  const double w8 = 1.0 / (1.0 + 2.0 * std::exp(lp - l8)), wp = (1.0 - w8) / 2;
  EXPECT_NEAR(out[0], 8 * w8 + 2 * wp * p0, 1e-6);
  EXPECT_NEAR(out[1], 8 * w8 + 2 * wp * p1, 1e-6);
}

TEST(CpuReference, HonoursEveryStride) {
  CaseSpec dense = default_case("d", 6, 64, 4, 3);
  dense.seed = testing::fresh_seed();
  dense.shape.block_write_idx = 2;
  CaseSpec padded = dense;
  padded.strides.prefix = 65;
  padded.strides.delta = 72;
  padded.strides.output = 70;
  set_token_major_blocks(padded.strides, padded.shape.max_blocks, 67);
  CaseTensors a = make_case_tensors(dense), b = make_case_tensors(padded);
  const std::vector<double> ra = cpu_reference(a.args()), rb = cpu_reference(b.args());
  EXPECT_EQ(ra, rb);
  for (std::int64_t t = 0; t < 6; ++t)
    for (std::int64_t h = 0; h < 64; ++h) EXPECT_EQ(a.prefix.at(t, h), b.prefix.at(t, h));
}

TEST(CpuKernels, Float32StandInsMatchTheReferenceOnFreshInputs) {
  for (int trial = 0; trial < 3; ++trial) {
    CaseSpec spec = default_case("k", 9, 512, 8, trial * 3 + 1);
    spec.seed = testing::fresh_seed();
    spec.shape.block_write_idx = trial;
    CaseTensors ref_in = make_case_tensors(spec), run_in = ref_in;
    const std::vector<double> ref = cpu_reference(ref_in.args());
    cpu_native_kernel(run_in.args(), true);
    for (std::int64_t t = 0; t < 9; ++t)
      for (std::int64_t h = 0; h < 512; ++h) {
        const double want = ref[std::size_t(t * 512 + h)];
        EXPECT_NEAR(bf16_to_float(run_in.output.at(t, h)), want, 8e-2 + 3e-2 * std::fabs(want)) << "seed " << spec.seed;
      }
  }
}

// On the GPU (ctest label gpu).

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

}  // namespace
}  // namespace attnres
