// Every PyTorch layout a case can give: stride lists, storage offsets, block-major blocks.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "app/casefile/case_layout.h"
#include "app/casefile/safetensors.h"
#include "app/engine/checks.h"
#include "kernels/builtin/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "reference/cpu_reference.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

using nlohmann::json;
using testing::TempDir;

StridedLayout layout_of(std::int64_t outer, std::int64_t outer_stride, std::int64_t inner, std::int64_t inner_stride,
                        std::int64_t columns, std::int64_t offset) {
  StridedLayout l;
  l.outer = outer;
  l.outer_stride = outer_stride;
  l.inner = inner;
  l.inner_stride = inner_stride;
  l.columns = columns;
  l.offset = offset;
  return l;
}

// locate() and for_each_storage_run() against the element set a layout defines, element by
// element, over random legal layouts: token-major, block-major, padded, offset, size-1 dims.
TEST(StridedLayout, LocateAndStorageRunsAgreeWithTheElementsALayoutDefines) {
  std::mt19937_64 rng(testing::fresh_seed());
  auto pick = [&](std::int64_t low, std::int64_t high) {
    return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
  };
  int checked = 0;
  while (checked < 300) {
    const std::int64_t columns = 8 * pick(1, 3), outer = pick(0, 5), inner = pick(1, 4);
    const std::int64_t minor_stride = columns + pick(0, 3) * pick(0, 1);
    const bool outer_major = pick(0, 1);
    const std::int64_t minor_count = outer_major ? inner : outer;
    const std::int64_t major_stride = std::max<std::int64_t>(minor_count, 1) * minor_stride + pick(0, 5) * pick(0, 1);
    StridedLayout l = outer_major ? layout_of(outer, major_stride, inner, minor_stride, columns, pick(0, 9))
                                  : layout_of(outer, minor_stride, inner, major_stride, columns, pick(0, 9));
    if (pick(0, 4) == 0) l.outer_stride = pick(0, 50) * (l.outer <= 1);  // a size-1 dimension's stride is anything
    if (!l.overlap_free()) continue;
    ++checked;
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> elements;  // storage element -> (row, col)
    for (std::int64_t row = 0; row < l.rows(); ++row)
      for (std::int64_t col = 0; col < columns; ++col)
        ASSERT_TRUE(elements.emplace(l.offset + l.row_start(row) + col, std::make_pair(row, col)).second);
    const std::int64_t span = l.span();
    for (const auto& [element, where] : elements) ASSERT_LT(element, span);
    std::int64_t next = 0;
    for_each_storage_run(l, 0, l.nesting().major,
                         [&](std::int64_t begin, std::int64_t end, std::int64_t row, bool logical) {
                           ASSERT_EQ(begin, next) << "runs tile the storage in order";
                           next = end;
                           for (std::int64_t e = begin; e < end; ++e) {
                             const StridedLayout::Location at = l.locate(e);
                             const auto it = elements.find(e);
                             ASSERT_EQ(at.logical, it != elements.end()) << e;
                             ASSERT_EQ(logical, at.logical) << e;
                             ASSERT_EQ(row, at.row) << e;
                             if (at.logical)
                               ASSERT_EQ(std::make_pair(at.row, at.col), it->second) << e;
                             else if (at.row >= 0)
                               ASSERT_GE(at.col, columns) << "row padding lies past the row's elements";
                           }
                         });
    ASSERT_EQ(next, span);
  }
}

TEST(StridedLayout, OverlappingStridesAreFound) {
  EXPECT_FALSE(layout_of(4, 8, 3, 8, 8, 0).overlap_free());   // blocks [4, 3, 8] with both strides 8
  EXPECT_FALSE(layout_of(4, 16, 3, 8, 8, 0).overlap_free());  // a token holds 3 rows of 8: 24 apart at least
  EXPECT_TRUE(layout_of(4, 24, 3, 8, 8, 0).overlap_free());   // token-major, dense
  EXPECT_TRUE(layout_of(4, 8, 3, 32, 8, 0).overlap_free());   // block-major, dense
  EXPECT_FALSE(layout_of(4, 8, 3, 31, 8, 0).overlap_free());  // block-major one short
  EXPECT_FALSE(layout_of(2, 7, 1, 0, 8, 0).overlap_free());   // rows closer than H
  EXPECT_TRUE(layout_of(1, 0, 1, 0, 8, 5).overlap_free());    // T = 1: its stride is never stepped
}

json layout_case() {
  return json{{"schema_version", 1}, {"name", "views"},     {"T", 4}, {"H", 64}, {"max_blocks", 3},
              {"num_blocks", 2},     {"block_write_idx", 2}};
}

std::string error_of(const json& value) {
  try {
    parse_case(value, "v.json", "");
  } catch (const CaseParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CaseSpec, StrideListsAndStorageOffsetsDescribeViews) {
  json c = layout_case();
  c["tensors"] = {{"prefix", {{"stride", {65, 1}}, {"storage_offset", 1}}},  // base[T, 65][:, 1:]
                  {"blocks", {{"stride", {72, 4 * 72, 1}}}},                 // [MAXB, T, 72] storage, transposed
                  {"norm_weight", {{"storage_offset", 3}}},
                  {"output", {{"stride", {64, 1}}, {"storage_offset", 8}}}};
  const CaseSpec spec = parse_case(c, "v.json", "");
  EXPECT_EQ(spec.strides.prefix, 65);
  EXPECT_EQ(spec.strides.blocks_token, 72);
  EXPECT_EQ(spec.strides.blocks_row, 288);
  EXPECT_EQ(spec.strides.storage_offset[int(Operand::prefix)], 1);
  EXPECT_EQ(spec.strides.storage_offset[int(Operand::norm_weight)], 3);
  EXPECT_EQ(spec.strides.storage_offset[int(Operand::output)], 8);
  EXPECT_EQ(spec.strides.storage_offset[int(Operand::blocks)], 0);
  const CaseSpec again = parse_case(case_to_json(spec), "v.json", "");
  EXPECT_EQ(case_to_json(again), case_to_json(spec));
  EXPECT_EQ(case_to_json(spec)["tensors"]["blocks"]["stride"], json({72, 288, 1}));
  EXPECT_EQ(
      describe_strides(spec.shape, spec.strides),
      "prefix [65, 1], delta [64, 1], output [64, 1], blocks [72, 288, 1]; storage offsets prefix 1, norm_weight 3, "
      "output 8");
  // Blocks' storage is [MAXB, T, 72]: 3 * 4 * 72 elements.
  EXPECT_EQ(case_layouts(spec.shape, spec.strides)[int(Operand::blocks)].span(), 3 * 4 * 72);
}

TEST(CaseSpec, LayoutsThatAreNotViewsAreErrorsAtTheirField) {
  auto with = [](json tensors) {
    json c = layout_case();
    c["tensors"] = std::move(tensors);
    return c;
  };
  EXPECT_EQ(error_of(with({{"prefix", {{"stride", {64, 2}}}}})),
            "v.json: /tensors/prefix/stride/1: must be 1, got 2: elements along H are contiguous in every operand this "
            "tool makes (its kernels, references and checks take no other hidden stride)");
  EXPECT_EQ(
      error_of(with({{"blocks", {{"stride", {128, 64, 1}}}}})),
      "v.json: /tensors/blocks/stride: blocks: its strides make logical elements share storage (a dimension of size "
      "> 1 must step past all that the smaller strides reach, and a row is 64 elements)");
  EXPECT_EQ(
      error_of(with({{"prefix", {{"stride", {63, 1}}}}})).find("v.json: /tensors/prefix/stride: prefix: its strides"),
      0u);
  EXPECT_EQ(error_of(with({{"prefix", {{"stride", {64, 1}}, {"row_padding", 1}}}})),
            "v.json: /tensors/prefix/stride: give one of stride, row_stride or row_padding");
  EXPECT_EQ(error_of(with({{"blocks", {{"stride", {64, 1}}}}})),
            "v.json: /tensors/blocks/stride: must be a list of 3 integers, got 2 items");
  EXPECT_EQ(error_of(with({{"prefix", {{"stride", {-64, 1}}}}})),
            "v.json: /tensors/prefix/stride/0: must be in [0, 2^40], got -64");
  EXPECT_EQ(error_of(with({{"qk_weight", {{"storage_offset", -1}}}})),
            "v.json: /tensors/qk_weight/storage_offset: must be in [0, 2^40], got -1");
  EXPECT_EQ(error_of(with({{"qk_weight", {{"row_stride", 64}}}})),
            "v.json: /tensors/qk_weight/row_stride: unknown key");
  // One token: its row stride is never stepped, so any is a view (PyTorch's own contiguity ignores it).
  json one = with({{"prefix", {{"stride", {0, 1}}}}});
  one["T"] = 1;
  EXPECT_EQ(error_of(one), "no error");
}

TEST(Dispatch, AMisalignedStorageOffsetKeepsTheNativeKernelOut) {
  DispatchRequest request;
  request.shape.tokens = 16;
  request.shape.hidden = 7168;
  request.shape.max_blocks = request.shape.num_blocks = 4;
  request.strides.prefix = request.strides.delta = request.strides.output = 7168;
  set_token_major_blocks(request.strides, 4, 7168);
  const DeviceDescription h200{true, "NVIDIA H200", 9, 0};
  EXPECT_EQ(dispatch(h200, {true, true}, request).path, KernelPath::native);
  request.strides.storage_offset[int(Operand::qk_weight)] = 8;  // 16 bytes: still aligned
  EXPECT_EQ(dispatch(h200, {true, true}, request).path, KernelPath::native);
  request.strides.storage_offset[int(Operand::blocks)] = 3;
  const DispatchDecision decision = dispatch(h200, {true, true}, request);
  EXPECT_EQ(decision.path, KernelPath::portable);
  EXPECT_EQ(decision.reason,
            "native kernel needs 16-byte aligned operands; blocks starts at storage offset 3 (elements)");
  // Block-major blocks whose strides are multiples of 8 are the native kernel's.
  request.strides.storage_offset[int(Operand::blocks)] = 0;
  request.strides.blocks_token = 7168;
  request.strides.blocks_row = 16 * 7168;
  EXPECT_EQ(dispatch(h200, {true, true}, request).path, KernelPath::native);
}

CaseSpec view_case(std::uint64_t seed) {
  CaseSpec spec = default_case("views", 6, 64, 4, 3);
  spec.seed = seed;
  spec.shape.block_write_idx = 3;
  spec.strides.prefix = 65;
  spec.strides.blocks_token = 72;  // block-major, rows padded by 8
  spec.strides.blocks_row = 6 * 72 + 5;
  spec.strides.output = 67;
  for (int i = 0; i < kOperandCount; ++i) spec.strides.storage_offset[i] = 2 * i + 1;
  return spec;
}

// The same logical inputs in any layout: same checksums, same float64 reference, and the kernels
// (CPU stand-ins) pass on every layout with the same output.
TEST(Layouts, ViewsHoldTheSameValuesAndGiveTheSameResult) {
  const CaseSpec views = view_case(testing::fresh_seed());
  CaseSpec dense = default_case("dense", 6, 64, 4, 3);
  dense.seed = views.seed;
  dense.shape.block_write_idx = 3;
  CaseTensors a = make_case_tensors(dense), b = make_case_tensors(views);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(checksum(*a.all()[i]), checksum(*b.all()[i])) << i;
  // Every element outside the logical ones holds the canary.
  for (const HostTensor* t : b.all()) {
    std::int64_t canaries = 0;
    for (bf16_bits bits : t->storage) canaries += bits == kCanaryBits;
    if (t->name != "output") EXPECT_EQ(canaries, t->storage_elements() - t->rows() * t->columns) << t->name;
  }
  EXPECT_EQ(cpu_reference(a.args()), cpu_reference(b.args()));

  TempDir dir;
  CaseSpec written = views;
  written.kernel = KernelChoice::automatic;
  const std::string file = dir.file("views.json", case_to_json(written).dump());
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = testing::run_cli({"run", file, "--backend", "cpu", "--json", report});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  const json result = json::parse(testing::read_file(report))["cases"][0];
  EXPECT_EQ(result["disposition"], "passed") << result.dump();
  // The prefix's rows are padded: the guarded native stand-in refuses them, so the portable one runs.
  EXPECT_EQ(result["kernel"], "portable") << result.dump();
}

// Damage in the storage before a view's first element, in a block-major row's padding, and to
// the written block: each named where it is.
TEST(Layouts, DamageOutsideTheRowsOfAViewIsLocated) {
  const CaseSpec spec = view_case(testing::fresh_seed());
  CaseTensors tensors = make_case_tensors(spec);
  CaseTensors expected = expected_after_run(tensors);
  cpu_portable_kernel(tensors.args());
  EXPECT_TRUE(check_after_run(tensors, expected).violations.empty());
  tensors.prefix.base()[0] = 0;                          // before the prefix's storage offset (1)
  tensors.blocks.row(2 * 4 + 1)[64 + 3] = 0;             // token 2, block 1: its row's padding
  tensors.blocks.row(5 * 4 + 3)[10] ^= 1;                // token 5's written block
  tensors.output.base()[tensors.output.span() + 4] = 0;  // past the output's storage
  const ExactnessReport report = check_after_run(tensors, expected);
  std::vector<std::string> texts;
  for (const Violation& v : report.violations) texts.push_back(v.to_string());
  const TensorLayout& blocks = tensors.blocks;
  const std::int64_t padded_element = blocks.offset + blocks.row_start(2 * 4 + 1) + 64 + 3;
  EXPECT_EQ(blocks.locate(padded_element).row, 9);
  EXPECT_EQ(texts, (std::vector<std::string>{"prefix: padding canary overwritten at offset 0 (1 elements)",
                                             "blocks: padding canary overwritten at row 9 col 67 (1 elements)",
                                             "output: guard region after the allocation overwritten at offset " +
                                                 std::to_string(tensors.output.span() + 4) + " (1 elements)"}));
  EXPECT_EQ(report.blocks_mismatches, 1);
  EXPECT_EQ(report.first_blocks_mismatch.find("row 5 col 10: got "), 0u) << report.first_blocks_mismatch;
  EXPECT_NE(report.first_blocks_mismatch.find("(block 3)"), std::string::npos) << report.first_blocks_mismatch;
}

// A captured view goes into inputs.safetensors with its strides and storage offset and comes
// back as the same layout and the same bits.
TEST(Layouts, SafetensorsCarryStridesAndStorageOffsets) {
  const CaseSpec spec = view_case(testing::fresh_seed());
  const CaseTensors tensors = make_case_tensors(spec);
  TempDir dir;
  const std::string path = (dir.path() / "inputs.safetensors").string();
  write_safetensors(path, inputs_file(spec, tensors));
  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata.at("blocks.stride"), "[72,437,1]");
  EXPECT_EQ(file.metadata.at("blocks.storage_offset"), "5");
  EXPECT_EQ(file.metadata.at("qk_weight.storage_offset"), "9");
  CaseSpec replayed = default_case("views", 6, 64, 4, 3);
  replayed.shape.block_write_idx = 3;
  replayed.strides.output = 67;
  replayed.strides.storage_offset[int(Operand::output)] = 13;
  const ReplayInputs inputs(file, path, replayed, true);
  for (int i = 0; i < kOperandCount; ++i)
    EXPECT_EQ(replayed.strides.storage_offset[i], spec.strides.storage_offset[i]) << i;
  EXPECT_EQ(replayed.strides.blocks_token, 72);
  EXPECT_EQ(replayed.strides.blocks_row, 437);
  EXPECT_EQ(replayed.strides.prefix, 65);
  const CaseTensors back = inputs.tensors();
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(back.all()[i]->storage, tensors.all()[i]->storage) << i;
}

}  // namespace
}  // namespace attnres
