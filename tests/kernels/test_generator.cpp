#include <gtest/gtest.h>

#include <cmath>

#include "app/casefile/case_spec.h"
#include "app/casefile/host_tensors.h"
#include "kernels/common/host_generator.h"
#include "kernels/common/philox.h"
#include "tests/cuda_test_support.h"

namespace attnres {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_FLOAT_EQ(bf16_to_float(kCanaryBits), 5.15625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(kPoisonBits)));
}

// Known-answer vectors of Random123's kat_vectors for philox4x32-10.
TEST(Philox, MatchesRandom123KnownAnswers) {
  const Philox4x32 zero = philox4x32_10(Philox4x32{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const Philox4x32 ones = philox4x32_10(Philox4x32{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
}

// A power-of-two scale commutes with bf16 rounding, so a scaled block must hold exactly the
// unscaled block's values times its scale; blocks past the list are unscaled.
TEST(Generator, BlockScalesScaleEachBlockOfEveryToken) {
  CaseSpec plain = default_case("scales", 5, 64, 4, 4);
  plain.seed = 9;
  CaseSpec scaled = plain;
  scaled.distributions[int(InputTensor::blocks)].block_scales = {2.0, 0.0, 0.5};
  const CaseTensors a = make_case_tensors(plain), b = make_case_tensors(scaled);
  const float scale[4] = {2.0f, 0.0f, 0.5f, 1.0f};
  for (std::int64_t t = 0; t < 5; ++t)
    for (int block = 0; block < 4; ++block)
      for (std::int64_t h = 0; h < 64; ++h) {
        const std::int64_t row = t * 4 + block;
        ASSERT_EQ(bf16_to_float(b.blocks.at(row, h)), scale[block] * bf16_to_float(a.blocks.at(row, h)))
            << t << " " << block;
      }
  EXPECT_EQ(a.prefix.storage, b.prefix.storage);  // only the blocks carry scales
}

// The host's run generator (eight elements per AVX2 Philox where the CPU has it) gives
// generate_bf16's bits: every distribution kind, block scales, runs of every length mod 8, and
// indices whose low word wraps inside a run.
TEST(Generator, RunsGiveTheBitsOfOneElementAtATime) {
  ResolvedDistribution scaled{DistributionKind::normal, 0.25, 3.0};
  scaled.block_period = 3;
  scaled.row_length = 5;
  scaled.block_scale[0] = 2.0;
  scaled.block_scale[1] = 0.0;
  scaled.block_scale[2] = 0.5;
  const ResolvedDistribution distributions[] = {{DistributionKind::normal, 0.0, 1.0},
                                                {DistributionKind::uniform, -1.0, 2.0},
                                                {DistributionKind::constant, 0.75, 0.0},
                                                scaled};
  const std::uint64_t starts[] = {0, 7, 1000003, (std::uint64_t(1) << 32) - 13, (std::uint64_t(5) << 32) - 3};
  for (const ResolvedDistribution& dist : distributions)
    for (const std::uint64_t first : starts)
      for (const std::int64_t count : {0, 1, 7, 8, 9, 63, 200}) {
        const GeneratorKey key = make_generator_key(first * 31 + std::uint64_t(count), "blocks");
        std::vector<bf16_bits> run(std::size_t(count) + 1, kCanaryBits);
        generate_bf16_run(key, dist, first, count, run.data());
        for (std::int64_t i = 0; i < count; ++i)
          ASSERT_EQ(run[std::size_t(i)], generate_bf16(key, dist, first + std::uint64_t(i)))
              << "kind " << int(dist.kind) << " first " << first << " count " << count << " i " << i;
        EXPECT_EQ(run[std::size_t(count)], kCanaryBits) << "wrote past the run";
      }
}

TEST(Generator, SameSeedSameBitsOtherTensorOtherBits) {
  const ResolvedDistribution normal{DistributionKind::normal, 0.0, 1.0};
  const GeneratorKey a = make_generator_key(42, "prefix"), b = make_generator_key(42, "delta");
  int same = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(generate_bf16(a, normal, i), generate_bf16(make_generator_key(42, "prefix"), normal, i));
    same += generate_bf16(a, normal, i) == generate_bf16(b, normal, i);
  }
  EXPECT_LT(same, 50);
}

TEST(Generator, NormalHasUnitMomentsAndBoundedTails) {
  const ResolvedDistribution normal{DistributionKind::normal, 0.5, 2.0};
  const GeneratorKey key = make_generator_key(7, "blocks");
  double sum = 0, squares = 0, extreme = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double v = bf16_to_float(generate_bf16(key, normal, std::uint64_t(i)));
    sum += v;
    squares += (v - 0.5) * (v - 0.5);
    extreme = std::fmax(extreme, std::fabs(v - 0.5));
  }
  EXPECT_NEAR(sum / n, 0.5, 0.02);
  EXPECT_NEAR(std::sqrt(squares / n), 2.0, 0.02);
  EXPECT_LE(extreme, 2.0 * 3.4642 + 0.05);  // Irwin-Hall(4) is bounded at sqrt(12)
}

TEST(Generator, UniformAndConstant) {
  const GeneratorKey key = make_generator_key(1, "x");
  const ResolvedDistribution uniform{DistributionKind::uniform, -1.0, 3.0};  // [-1, 2)
  for (int i = 0; i < 10000; ++i) {
    const float v = bf16_to_float(generate_bf16(key, uniform, std::uint64_t(i)));
    EXPECT_GE(v, -1.0f);
    EXPECT_LE(v, 2.0f);
  }
  EXPECT_EQ(generate_bf16(key, {DistributionKind::constant, 0.25, 0.0}, 99), float_to_bf16(0.25f));
}

TEST(Generator, LogicalValuesDoNotDependOnPaddingAndPaddingHoldsCanaries) {
  CaseSpec dense = default_case("d", 5, 64, 3, 2);
  dense.seed = 99;
  CaseSpec padded = dense;
  padded.strides.prefix = 71;
  set_token_major_blocks(padded.strides, padded.shape.max_blocks, 80);
  padded.strides.output = 65;
  const CaseTensors a = make_case_tensors(dense), b = make_case_tensors(padded);
  for (std::int64_t t = 0; t < 5; ++t) {
    for (std::int64_t h = 0; h < 64; ++h) {
      EXPECT_EQ(a.prefix.at(t, h), b.prefix.at(t, h));
      EXPECT_EQ(b.output.at(t, h), kPoisonBits);
    }
    for (std::int64_t h = 64; h < 71; ++h) EXPECT_EQ(b.prefix.at(t, h), kCanaryBits);
    EXPECT_EQ(b.output.at(t, 64), kCanaryBits);
  }
  for (std::int64_t row = 0; row < 15; ++row)
    for (std::int64_t h = 0; h < 64; ++h) EXPECT_EQ(a.blocks.at(row, h), b.blocks.at(row, h));
  EXPECT_EQ(checksum(a.prefix), checksum(b.prefix));
  EXPECT_EQ(checksum(a.blocks), checksum(b.blocks));
  EXPECT_NE(checksum(a.prefix), checksum(a.delta));
  // Guards of at least 64 KiB, and at least a row wide.
  EXPECT_GE(b.prefix.guard(), kMinGuardElements);
  EXPECT_GE(b.prefix.guard(), b.prefix.outer_stride);
  for (std::int64_t k = 0; k < b.prefix.guard(); ++k) {
    EXPECT_EQ(b.prefix.storage[std::size_t(k)], kCanaryBits);
    EXPECT_EQ(b.prefix.storage[b.prefix.storage.size() - 1 - std::size_t(k)], kCanaryBits);
  }
}

TEST(Generator, QkWeightIsScaledByInverseSqrtHidden) {
  const CaseSpec spec = default_case("q", 1, 4096, 1, 1);
  const CaseTensors t = make_case_tensors(spec);
  double squares = 0;
  for (std::int64_t h = 0; h < 4096; ++h) squares += std::pow(bf16_to_float(t.qk_weight.at(0, h)), 2);
  EXPECT_NEAR(std::sqrt(squares / 4096), 1.0 / 64.0, 0.001);
}

// On the GPU (ctest label gpu).

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

}  // namespace
}  // namespace attnres
