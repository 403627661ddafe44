#include <gtest/gtest.h>

#include "app/backend.h"
#include "app/host_tensors.h"
#include "kernels/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/layout_guard.h"

namespace attnres {
namespace {

const DeviceDescription kH200{true, "NVIDIA H200", 9, 0};
const DeviceDescription kB200{true, "NVIDIA B200", 10, 0};
const DeviceDescription kA10{true, "NVIDIA A10", 8, 6};
const NativeImages kBoth{true, true};

DispatchRequest kimi(std::int64_t prefix_stride = 7168, std::int64_t delta_stride = 7168, std::int64_t output_stride = 7168) {
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
    launch_native(args, true, nullptr);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "native kernel supports num_blocks <= 8, got 12");
  }
  args.shape = kimi().shape;
  args.shape.hidden = args.strides.prefix = args.strides.delta = args.strides.output = 1000;
  EXPECT_THROW(launch_native(args, true, nullptr), std::invalid_argument);
  args.shape = kimi().shape;
  args.strides = kimi(7175).strides;  // the layout guard comes first
  EXPECT_THROW(launch_native(args, true, nullptr), LayoutError);
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
  EXPECT_EQ(dispatch(kH200, kBoth, odd).reason, "native kernel supports hidden_size multiples of 512 up to 7680, got 1000");
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
  EXPECT_EQ(d.reason, "case requires the native kernel, but sm_86 (NVIDIA A10) has no native kernel (native targets sm_90 and sm_100 families)");
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
