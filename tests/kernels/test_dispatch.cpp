#include <algorithm>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "app/casefile/host_tensors.h"
#include "app/engine/backend.h"
#include "kernels/builtin/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/native/launch_native.h"
#include "kernels/native/native_limits.h"
#include "kernels/native/native_plan.h"
#include "kernels/registry/layout_guard.h"

namespace attnres {
namespace {

const DeviceDescription kH200{true, "NVIDIA H200", 9, 0};
const DeviceDescription kB200{true, "NVIDIA B200", 10, 0};
const DeviceDescription kA10{true, "NVIDIA A10", 8, 6};
const NativeImages kBoth{true, true};

DispatchRequest kimi(std::int64_t prefix_stride = 7168, std::int64_t delta_stride = 7168,
                     std::int64_t output_stride = 7168) {
  DispatchRequest r;
  r.shape.tokens = 320;
  r.shape.hidden = 7168;
  r.shape.max_blocks = 8;
  r.shape.num_blocks = 4;
  r.shape.has_delta = true;
  r.shape.has_output_norm = true;
  r.strides = {prefix_stride, delta_stride, output_stride, 8 * 7168, 7168};
  return r;
}

TEST(LayoutGuard, ExactMessage) {
  const DispatchRequest r = kimi(7175);
  EXPECT_EQ(dense_rows_violation(r.shape, r.strides).value(),
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168");
  const DispatchRequest out = kimi(7168, 7168, 7176);
  EXPECT_EQ(dense_rows_violation(out.shape, out.strides).value(),
            "Kimi K3 AttnRes requires densely packed rows; got strides 7168, 7168, 7176 for hidden_size 7168");
  DispatchRequest no_delta = kimi(7168, 9999);
  no_delta.shape.has_delta = false;
  EXPECT_FALSE(dense_rows_violation(no_delta.shape, no_delta.strides));
  no_delta.strides.prefix = 7169;
  EXPECT_EQ(dense_rows_violation(no_delta.shape, no_delta.strides).value(),
            "Kimi K3 AttnRes requires densely packed rows; got strides 7169, none, 7168 for hidden_size 7168");
  const DispatchRequest dense = kimi();
  EXPECT_FALSE(dense_rows_violation(dense.shape, dense.strides));
  EXPECT_THROW(require_dense_rows(r.shape, r.strides), LayoutError);
}

// launch_native checks the shape before any CUDA call, so this runs without a GPU: a direct
// caller that skipped the dispatcher gets the dispatcher's reason, not an out-of-range kernel.
TEST(NativeLaunch, UnsupportedShapesAreRefusedBeforeAnyCudaCall) {
  AttnResArgs args;
  DispatchRequest request = kimi();
  request.shape.max_blocks = request.shape.num_blocks = 12;
  request.strides.blocks_token = 12 * 7168;
  args.shape = request.shape;
  args.strides = request.strides;
  try {
    launch_native(args, NativeLaunchOptions{}, nullptr);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "native kernel supports num_blocks <= 8, got 12");
  }
  args.shape = kimi().shape;
  args.shape.hidden = args.strides.prefix = args.strides.delta = args.strides.output = 1000;
  EXPECT_THROW(launch_native(args, NativeLaunchOptions{}, nullptr), std::invalid_argument);
  args.shape = kimi().shape;
  args.strides = kimi(7175).strides;  // the layout guard comes first
  EXPECT_THROW(launch_native(args, NativeLaunchOptions{}, nullptr), LayoutError);
}

// A plan the kernel cannot run is refused with its reason, before any CUDA call.
TEST(NativeLaunch, IllegalPlansAreRefusedBeforeAnyCudaCall) {
  AttnResArgs args;
  args.shape = kimi().shape;
  args.strides = kimi().strides;
  NativeLaunchOptions options;
  options.plan = native::Plan{native::Variant::split, 3, 1};
  try {
    launch_native(args, options, nullptr);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "split clusters are 1, 2, 4 or 8 CTAs, got 3");
  }
}

TEST(NativePlan, PolicyTablePicksTheMeasuredPlans) {
  const auto pick = [](std::int64_t tokens, int blocks) {
    return native::to_string(native::choose_plan(tokens, blocks, 7168));
  };
  EXPECT_EQ(pick(1, 0), "split/8x1");
  EXPECT_EQ(pick(1, 8), "split/8x1");
  EXPECT_EQ(pick(16, 4), "split/8x1");
  EXPECT_EQ(pick(17, 4), "split/4x2");
  EXPECT_EQ(pick(32, 5), "split/8x1");
  EXPECT_EQ(pick(33, 4), "split/2x2");
  EXPECT_EQ(pick(64, 8), "split/2x1");
  EXPECT_EQ(pick(33, 5), "split/1x2");
  EXPECT_EQ(pick(128, 5), "split/1x2");
  EXPECT_EQ(pick(64, 6), "split/2x1");
  EXPECT_EQ(pick(65, 8), "split/1x2");
  EXPECT_EQ(pick(96, 6), "split/1x2");
  EXPECT_EQ(pick(128, 7), "split/1x2");
  EXPECT_EQ(pick(129, 8), "ring/cp.async");
  EXPECT_EQ(pick(64, 1), "split/2x2");
  EXPECT_EQ(pick(65, 1), "split/1x2");
  EXPECT_EQ(pick(100, 2), "split/1x2");
  EXPECT_EQ(pick(100, 3), "split/1x2");
  EXPECT_EQ(pick(128, 4), "split/1x2");
  EXPECT_EQ(pick(129, 4), "split/2x2");
  EXPECT_EQ(pick(129, 0), "split/2x2");
  EXPECT_EQ(pick(192, 4), "split/2x2");
  EXPECT_EQ(pick(193, 4), "ring/cp.async");
  EXPECT_EQ(pick(320, 2), "split/1x2");
  EXPECT_EQ(pick(321, 2), "ring/cp.async");
  EXPECT_EQ(pick(512, 0), "split/2x2");
  EXPECT_EQ(pick(513, 0), "ring");
  EXPECT_EQ(pick(16384, 1), "split/1x2");
  EXPECT_EQ(pick(std::int64_t(1) << 40, 1), "ring/cp.async");
  EXPECT_EQ(pick(129, 5), "ring/cp.async");
  EXPECT_EQ(pick(4096, 7), "ring/cp.async");
  EXPECT_EQ(pick(4096, 0), "ring");
  EXPECT_EQ(pick(320, 3), "ring/cp.async");
  EXPECT_EQ(pick(1024, 3), "ring/cp.async");
  EXPECT_EQ(pick(1025, 3), "ring/cp.async");
  EXPECT_EQ(pick(std::int64_t(1) << 40, 3), "ring/cp.async");
  EXPECT_EQ(pick(320, 8), "ring/cp.async");
  EXPECT_EQ(pick(std::int64_t(1) << 40, 8), "ring/cp.async");
  EXPECT_EQ(pick(std::int64_t(1) << 40, 6), "ring/cp.async");
}

// The cp.async copy path was measured faster only at H=7168; other sizes keep the bulk copies.
TEST(NativePlan, CopyPathChoiceIsLimitedToTheMeasuredHiddenSize) {
  for (const int hidden : {4096, 6144, 7680})
    for (const int blocks : {2, 4, 6, 7, 8}) {
      EXPECT_EQ(native::to_string(native::choose_plan(16384, blocks, hidden)), "ring") << hidden << " " << blocks;
      EXPECT_EQ(native::to_string(native::choose_plan(1, blocks, hidden)), "split/8x1") << hidden << " " << blocks;
    }
}

// Below H=4096 the ring's CTA has too few threads: one row per CTA at every T the split grid holds.
TEST(NativePlan, SmallHiddenSizesTakeOneRowPerCta) {
  const auto pick = [](std::int64_t tokens, int blocks, int hidden) {
    return native::to_string(native::choose_plan(tokens, blocks, hidden));
  };
  for (const int hidden : {512, 1024, 1536, 2048}) {
    EXPECT_EQ(pick(16384, 1, hidden), "split/1x2") << hidden;
    EXPECT_EQ(pick(1000, 4, hidden), "split/1x2") << hidden;
    EXPECT_EQ(pick(16384, 5, hidden), "split/1x1") << hidden;
    EXPECT_EQ(pick(320, 8, hidden), "split/1x1") << hidden;
    EXPECT_EQ(pick(1, 8, hidden), "split/8x1") << hidden;  // the decode rows come first
  }
  EXPECT_EQ(pick(4096, 1, 3072), "split/1x2");
  EXPECT_EQ(pick(4096, 3, 2560), "split/2x2");
  EXPECT_EQ(pick(4096, 8, 3072), "ring");
  EXPECT_EQ(pick(4096, 1, 4096), "split/2x2");
  EXPECT_EQ(pick(4096, 2, 4096), "ring");
  // A split grid is tokens x cluster CTAs, at most INT_MAX: past the table's bound, the ring.
  const std::int64_t split_bound = std::numeric_limits<int>::max() / native::kSplitMaxCluster;
  EXPECT_EQ(pick(split_bound, 8, 1024), "split/1x1");
  EXPECT_EQ(pick(split_bound + 1, 8, 1024), "ring");
  EXPECT_EQ(pick(std::int64_t(1) << 40, 1, 512), "ring");
}

// Whatever the problem, the policy's plan is one the kernel can run: whole warps, at most 512
// threads, at most 32 partial slots per row, and the slices of a row tile H exactly.
TEST(NativePlan, EveryChoiceFitsEverySupportedShape) {
  for (int hidden = native::kHiddenMultiple; hidden <= native::kMaxHidden; hidden += native::kHiddenMultiple)
    for (std::int64_t tokens = 0; tokens <= 1100; tokens += tokens < 600 ? 1 : 100)
      for (int blocks = 0; blocks <= native::kMaxBlocks; ++blocks) {
        const native::Plan plan = native::choose_plan(tokens, blocks, hidden);
        ASSERT_FALSE(native::plan_unsupported_reason(plan, hidden)) << native::to_string(plan) << " H=" << hidden;
        if (plan.variant != native::Variant::split) continue;
        const int threads = native::split_threads(plan, hidden);
        EXPECT_EQ(threads % 32, 0);
        EXPECT_LE(threads, native::kSplitMaxThreads);
        EXPECT_LE(native::split_slots(plan, hidden), 32);
        const int owners = hidden / native::kElementsPerVector / plan.cluster / plan.vectors_per_thread;
        EXPECT_GT(threads, owners - 32);
        EXPECT_EQ(owners * plan.vectors_per_thread * plan.cluster * native::kElementsPerVector, hidden);
      }
}

TEST(NativePlan, IllegalPlansAreNamed) {
  using native::Plan;
  using native::Variant;
  EXPECT_EQ(native::plan_unsupported_reason(Plan{Variant::split, 16, 1}, 7168).value(),
            "split clusters are 1, 2, 4 or 8 CTAs, got 16");
  EXPECT_EQ(native::plan_unsupported_reason(Plan{Variant::split, 2, 3}, 7168).value(),
            "split threads load 1 or 2 vectors per source, got 3");
  EXPECT_EQ(native::plan_unsupported_reason(Plan{Variant::split, 1, 1}, 7680).value(),
            "split/1x1: hidden_size 7680 needs 960 threads per CTA, more than 512");
  EXPECT_EQ(native::plan_unsupported_reason(Plan{Variant::split, 8, 1}, 96).value(),
            "split/8x1: hidden_size 96 does not split evenly");
  EXPECT_EQ(native::split_threads(Plan{Variant::split, 8, 1}, 7168), 128);  // 112 own vectors
  EXPECT_EQ(native::split_slots(Plan{Variant::split, 8, 1}, 7168), 32);
  std::vector<std::string> names;
  for (const Plan& plan : native::all_plans(7168)) names.push_back(native::to_string(plan));
  EXPECT_EQ(names, (std::vector<std::string>{"ring", "ring/cp.async", "split/1x2", "split/2x1", "split/2x2",
                                             "split/4x1", "split/4x2", "split/8x1", "split/8x2"}));
  EXPECT_EQ(native::all_plans(512).size(), 10u);  // split/1x1 fits there too
}

// The ring's shared-memory layout on an H200 (132 SMs, 227 KiB opt-in, of which 8 KiB are kept for
// the kernel's static part): at H=7168 a stage is 14 KiB and a stashed mix 28 KiB. "RxS": R rows per
// iteration, S stages.
std::string h200_ring_layout(std::int64_t tokens, int blocks, bool delta, int hidden) {
  const std::optional<native::RingLayout> l = native::ring_layout(tokens, blocks, delta, hidden, 132, 232448);
  if (!l) return "none";
  return std::to_string(l->rows_per_iteration) + "x" + std::to_string(l->stages);
}

TEST(NativePlan, RingPairsRowsOnlyWithFewSourcesAndStagesToSpare) {
  EXPECT_EQ(h200_ring_layout(4096, 1, true, 7168), "2x11");   // 3 loads a row, 6 for two: 5 of 11 stages free
  EXPECT_EQ(h200_ring_layout(4096, 2, true, 7168), "2x11");   // 8 for two: 3 free
  EXPECT_EQ(h200_ring_layout(4096, 3, true, 7168), "1x13");   // 10 for two would leave 1 free
  EXPECT_EQ(h200_ring_layout(4096, 3, false, 7168), "2x11");  // without delta: 8, 3 free
  EXPECT_EQ(h200_ring_layout(4096, 4, false, 7168), "1x13");  // 5 sources: one row holding its blocks
  EXPECT_EQ(h200_ring_layout(4096, 8, true, 7168), "1x13");
  EXPECT_EQ(h200_ring_layout(132, 1, true, 7168), "1x13");  // one row per CTA: nothing to pair
  EXPECT_EQ(h200_ring_layout(133, 1, true, 7168), "2x11");
  EXPECT_EQ(h200_ring_layout(4096, 3, true, 4096), "2x16");  // 4 sources, 10 loads of 16 stages
  EXPECT_EQ(h200_ring_layout(4096, 4, true, 4096), "1x16");  // 5 sources
  EXPECT_EQ(h200_ring_layout(4096, 6, true, 4096), "1x16");
  EXPECT_EQ(h200_ring_layout(4096, 8, true, 7168 + 512), "1x12");
  EXPECT_EQ(h200_ring_layout(600, 1, true, 7168 + 512), "2x10");  // cases/ring.json: a lone last row
  EXPECT_FALSE(native::ring_layout(4096, 8, true, 7168, 132, 158192).has_value());  // 10 loads, 8 stages
}

// The ring's grid evens out the rows: the busiest CTA has as many rows as on a grid of every SM,
// and one CTA fewer would give some CTA more.
TEST(NativePlan, RingGridGivesEveryCtaTheSameRowCount) {
  EXPECT_EQ(native::ring_grid(4096, 132), 128);  // 32 rows each, not 31 and a 32nd on 4 CTAs
  EXPECT_EQ(native::ring_grid(16384, 132), 132);
  EXPECT_EQ(native::ring_grid(320, 132), 107);  // 3 rows each (the last CTA 2)
  EXPECT_EQ(native::ring_grid(133, 132), 67);
  EXPECT_EQ(native::ring_grid(132, 132), 132);
  EXPECT_EQ(native::ring_grid(1, 132), 1);
  for (const int sms : {1, 78, 132, 148})
    for (std::int64_t tokens = 1; tokens <= 5000; ++tokens) {
      const std::int64_t grid = native::ring_grid(tokens, sms);
      const std::int64_t busiest = (tokens + grid - 1) / grid;
      ASSERT_LE(grid, std::min<std::int64_t>(tokens, sms)) << tokens << " rows on " << sms << " SMs";
      ASSERT_EQ(busiest, (tokens + sms - 1) / sms) << tokens << " rows on " << sms << " SMs";
      if (grid > 1) ASSERT_GT((tokens + grid - 2) / (grid - 1), busiest) << tokens << " rows on " << sms << " SMs";
    }
}

TEST(Dispatch, Sm90WithItsImageGoesNative) {
  const DispatchDecision d = dispatch(kH200, kBoth, kimi());
  EXPECT_EQ(d.path, KernelPath::native);
  EXPECT_FALSE(d.rejection);
  EXPECT_EQ(d.reason, "sm_90 device and the build holds its sm_90a native image");
}

TEST(Dispatch, Sm100WithoutItsImageFallsBackInsteadOfCrashing) {
  const DispatchDecision d = dispatch(kB200, NativeImages{true, false}, kimi());
  EXPECT_EQ(d.path, KernelPath::portable);
  EXPECT_EQ(d.reason, "this build holds no sm_100a image of the native kernel for this sm_100 device");
  EXPECT_EQ(dispatch(kB200, kBoth, kimi()).path, KernelPath::native);
  // sm_103 is SM100-family: it wants the sm_100a image and falls back without it.
  const DeviceDescription b300{true, "B300", 10, 3};
  EXPECT_EQ(dispatch(b300, NativeImages{true, false}, kimi()).path, KernelPath::portable);
}

TEST(Dispatch, PaddedRowsOnTheNativePathAreRejectedWithTheMessage) {
  const DispatchDecision d = dispatch(kH200, kBoth, kimi(7175));
  EXPECT_EQ(d.path, KernelPath::native);
  EXPECT_EQ(d.rejection.value(),
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168");
  EXPECT_EQ(d.reason, "sm_90 device and the build holds its sm_90a native image; layout guard rejects the strides");
}

TEST(Dispatch, NoGpuMeansNothingRuns) {
  const DispatchDecision d = dispatch(DeviceDescription{}, kBoth, kimi());
  EXPECT_EQ(d.path, KernelPath::none);
  EXPECT_EQ(d.reason, "no CUDA device");
}

TEST(Dispatch, OtherFamiliesAndUnsupportedShapesGoPortable) {
  EXPECT_EQ(dispatch(kA10, kBoth, kimi()).reason,
            "sm_86 (NVIDIA A10) has no native kernel (native targets sm_90 and sm_100 families)");
  EXPECT_EQ(dispatch(kA10, kBoth, kimi(7175)).path, KernelPath::portable);  // portable honours strides
  DispatchRequest odd = kimi();
  odd.shape.hidden = 1000;
  EXPECT_EQ(dispatch(kH200, kBoth, odd).reason,
            "native kernel supports hidden_size multiples of 512 up to 7680, got 1000");
  DispatchRequest many = kimi();
  many.shape.num_blocks = many.shape.max_blocks = 9;
  EXPECT_EQ(dispatch(kH200, kBoth, many).path, KernelPath::portable);
  DispatchRequest misaligned = kimi();
  misaligned.strides.blocks_row = 7171;
  misaligned.strides.blocks_token = 8 * 7171;
  EXPECT_EQ(dispatch(kH200, kBoth, misaligned).path, KernelPath::portable);
  DispatchRequest unaligned_base = kimi();
  unaligned_base.operands_16b_aligned = false;
  EXPECT_EQ(dispatch(kH200, kBoth, unaligned_base).path, KernelPath::portable);
}

TEST(Dispatch, ForcedChoices) {
  DispatchRequest portable = kimi(7175);
  portable.choice = KernelChoice::portable;
  EXPECT_EQ(dispatch(kH200, kBoth, portable).path, KernelPath::portable);
  EXPECT_FALSE(dispatch(kH200, kBoth, portable).rejection);
  DispatchRequest native = kimi();
  native.choice = KernelChoice::native;
  const DispatchDecision d = dispatch(kA10, kBoth, native);
  EXPECT_EQ(d.path, KernelPath::none);
  EXPECT_EQ(d.reason,
            "case requires the native kernel, but sm_86 (NVIDIA A10) has no native kernel (native targets sm_90 and "
            "sm_100 families)");
}

TEST(Dispatch, UnguardedRunsTheNativeKernelOrReplaysItsStride) {
  DispatchRequest r = kimi(7175);
  r.layout_guard = false;
  const DispatchDecision native = dispatch(kH200, kBoth, r);
  EXPECT_EQ(native.path, KernelPath::native);
  EXPECT_FALSE(native.rejection);
  EXPECT_FALSE(native.hard_coded_row_stride);
  const DispatchDecision replay = dispatch(kA10, kBoth, r);
  EXPECT_EQ(replay.path, KernelPath::portable);
  EXPECT_TRUE(replay.hard_coded_row_stride);
}

TEST(Dispatch, DeviceModelsParse) {
  EXPECT_EQ(parse_device_model("sm_90")->cc_major, 9);
  EXPECT_EQ(parse_device_model("sm_100")->cc_major, 10);
  EXPECT_EQ(parse_device_model("sm_103")->cc_minor, 3);
  EXPECT_FALSE(parse_device_model("none")->present);
  EXPECT_FALSE(parse_device_model("gfx90a"));
  EXPECT_FALSE(parse_device_model("sm_"));
}

TEST(CpuNativeKernel, GuardRefusesBeforeTouchingAnything) {
  CaseSpec spec = default_case("g", 3, 64, 2, 1);
  spec.strides.prefix = 65;
  CaseTensors t = make_case_tensors(spec);
  const CaseTensors before = t;
  try {
    cpu_native_kernel(t.args(), true);
    FAIL() << "no LayoutError";
  } catch (const LayoutError& e) {
    EXPECT_STREQ(e.what(), "Kimi K3 AttnRes requires densely packed rows; got strides 65, 64, 64 for hidden_size 64");
  }
  EXPECT_EQ(t.prefix.storage, before.prefix.storage);
  EXPECT_EQ(t.output.storage, before.output.storage);
}

}  // namespace
}  // namespace attnres
