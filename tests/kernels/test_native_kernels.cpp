// The native and portable kernels on the GPU, each plan of the native kernel forced, against
// the float64 reference (ctest label gpu).
#include "tests/cuda_test_support.h"
#include "tests/kernels/native_pack_probe.h"

namespace attnres {
namespace {

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

}  // namespace
}  // namespace attnres
