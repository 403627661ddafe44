#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "app/casefile/case_layout.h"
#include "app/casefile/case_spec.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

using nlohmann::json;
using testing::TempDir;

json minimal() {
  return json{{"schema_version", 1}, {"name", "c"}, {"T", 4}, {"H", 64}, {"max_blocks", 4}, {"num_blocks", 2}};
}

std::string error_of(const json& value, const std::string& file = "cases/x.json") {
  try {
    parse_case(value, file, "");
  } catch (const CaseParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CaseSpec, DefaultsFollowTheSchema) {
  const CaseSpec c = parse_case(minimal(), "f.json", "");
  EXPECT_EQ(c.shape.tokens, 4);
  EXPECT_EQ(c.shape.hidden, 64);
  EXPECT_EQ(c.shape.block_write_idx, -1);
  EXPECT_TRUE(c.shape.has_delta);
  EXPECT_TRUE(c.shape.has_output_norm);
  EXPECT_DOUBLE_EQ(c.atol, 8e-2);
  EXPECT_DOUBLE_EQ(c.rtol, 3e-2);
  EXPECT_EQ(c.strides.prefix, 64);
  EXPECT_EQ(c.strides.blocks_token, 4 * 64);
  EXPECT_EQ(c.expect, Expectation::pass);
  EXPECT_EQ(c.kernel, KernelChoice::automatic);
  EXPECT_TRUE(c.distributions[int(InputTensor::qk_weight)].divide_by_sqrt_hidden);
  EXPECT_DOUBLE_EQ(c.distributions[int(InputTensor::norm_weight)].mean, 1.0);
}

TEST(CaseSpec, RowStrideBelowHiddenNamesFileAndPointer) {
  json c = minimal();
  c["H"] = 7168;
  c["tensors"] = {{"prefix", {{"row_stride", 7000}}}};
  EXPECT_EQ(error_of(c), "cases/x.json: /tensors/prefix/row_stride: must be in [hidden_size (7168), 2^40], got 7000");
}

TEST(CaseSpec, PaddingAndStrideAreExclusiveAndPaddingSetsStride) {
  json c = minimal();
  c["tensors"] = {{"blocks", {{"row_padding", 7}}}, {"output", {{"row_stride", 72}}}};
  const CaseSpec spec = parse_case(c, "f", "");
  EXPECT_EQ(spec.strides.blocks_row, 71);
  EXPECT_EQ(spec.strides.output, 72);
  EXPECT_EQ(spec.strides.blocks_token, 4 * 71);
  c["tensors"] = {{"prefix", {{"row_padding", 1}, {"row_stride", 65}}}};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/prefix/row_padding: give one of stride, row_stride or row_padding");
  c["tensors"] = {{"delta", {{"row_padding", -1}}}};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/delta/row_padding: must be in [0, 2^20], got -1");
}

TEST(CaseSpec, UnknownKeysAreErrorsAtTheirPath) {
  json c = minimal();
  c["num_block"] = 3;
  EXPECT_EQ(error_of(c, "f"), "f: /num_block: unknown key");
  c = minimal();
  c["tensors"] = {{"prefix", {{"dist", {{"kind", "normal"}, {"sigma", 2}}}}}};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/prefix/dist/sigma: unknown key");
  c = minimal();
  c["tensors"] = {{"weights", json::object()}};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/weights: unknown key");
}

TEST(CaseSpec, WrongTypesAndMissingKeys) {
  json c = minimal();
  c["T"] = "4";
  EXPECT_EQ(error_of(c, "f"), "f: /T: must be an integer, got string");
  c = minimal();
  c["T"] = 4.5;
  EXPECT_EQ(error_of(c, "f"), "f: /T: must be an integer, got a number");
  c = minimal();
  c["has_delta"] = 1;
  EXPECT_EQ(error_of(c, "f"), "f: /has_delta: must be true or false, got an integer");
  c = minimal();
  c.erase("H");
  EXPECT_EQ(error_of(c, "f"), "f: /H: required key is missing");
  EXPECT_EQ(error_of(json::array(), "f"), "f: must be an object, got array");
}

TEST(CaseSpec, ImpossibleShapes) {
  json c = minimal();
  c["num_blocks"] = 5;
  EXPECT_EQ(error_of(c, "f"), "f: /num_blocks: must be in [0, max_blocks (4)], got 5");
  c = minimal();
  c["block_write_idx"] = 4;
  EXPECT_EQ(error_of(c, "f"), "f: /block_write_idx: must be -1 (no write) or in [0, max_blocks (4)), got 4");
  c = minimal();
  c["H"] = 60;
  EXPECT_EQ(error_of(c, "f"), "f: /H: must be a multiple of 8 in [8, 65536], got 60");
  c = minimal();
  c["T"] = 2000000000;
  c["H"] = 65536;
  c["max_blocks"] = 64;
  EXPECT_EQ(error_of(c, "f"),
            "f: /T: tensor sizes overflow: prefix needs more than 2^40 elements of storage with T = 2000000000");
  c = minimal();
  c["eps"] = -1e-6;
  EXPECT_EQ(error_of(c, "f"), "f: /eps: must be finite and >= 0, got -1e-06");
  c = minimal();
  c["tensors"]["output_norm_weight"]["dist"] = {{"kind", "constant"}, {"value", 1e39}};
  EXPECT_EQ(error_of(c, "f"),
            "f: /tensors/output_norm_weight/dist/value: values up to 1e+39 do not fit bf16 (largest finite value "
            "3.38953e+38)");
  c = minimal();
  c["tensors"]["prefix"]["dist"] = {{"kind", "normal"}, {"std", 1e38}};
  EXPECT_EQ(error_of(c, "f"),
            "f: /tensors/prefix/dist/std: values up to 3.4641e+38 do not fit bf16 (largest finite value 3.38953e+38)");
  c = minimal();
  c["tensors"]["blocks"]["dist"] = {{"kind", "uniform"}, {"low", -4e38}, {"high", 1}};
  EXPECT_EQ(error_of(c, "f"),
            "f: /tensors/blocks/dist/low: values up to 4e+38 do not fit bf16 (largest finite value 3.38953e+38)");
  c = minimal();
  c["dtype"] = "fp16";
  EXPECT_EQ(error_of(c, "f"), "f: /dtype: must be one of \"bf16\", got \"fp16\"");
}

TEST(CaseSpec, BlockScalesBelongToBlocksAndFitMaxBlocksAndBf16) {
  json c = minimal();
  c["tensors"]["blocks"]["dist"] = {{"kind", "normal"}, {"block_scales", {0.5, 0, 4}}};
  EXPECT_EQ(parse_case(c, "f", "").distributions[int(InputTensor::blocks)].block_scales,
            (std::vector<double>{0.5, 0, 4}));
  c["tensors"]["blocks"]["dist"]["block_scales"] = {1, 1, 1, 1, 1};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/blocks/dist/block_scales: has 5 entries, but max_blocks is 4");
  c["tensors"]["blocks"]["dist"]["block_scales"] = {1, -1};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/blocks/dist/block_scales: entry 1 must be a finite number >= 0, got -1");
  c["tensors"]["blocks"]["dist"]["block_scales"] = json::array();
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/blocks/dist/block_scales: must be a list of 1 to 64 numbers, one per block");
  c["tensors"]["blocks"]["dist"] = {{"kind", "normal"}, {"std", 1e36}, {"block_scales", {1, 100}}};
  EXPECT_EQ(error_of(c, "f"),
            "f: /tensors/blocks/dist/std: values up to 3.4641e+38 do not fit bf16 (largest finite value 3.38953e+38)");
  c = minimal();
  c["tensors"]["prefix"]["dist"] = {{"kind", "normal"}, {"block_scales", {2}}};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/prefix/dist/block_scales: only the blocks' distribution has block_scales");
}

TEST(CaseSpec, TensorsOfAbsentInputsAreErrors) {
  json c = minimal();
  c["has_delta"] = false;
  c["tensors"] = {{"delta", {{"row_padding", 1}}}};
  EXPECT_EQ(error_of(c, "f"), "f: /tensors/delta: given, but has_delta is false");
}

TEST(CaseSpec, ExpectationAndMessage) {
  json c = minimal();
  c["expect"] = {{"verdict", "reject"}, {"message", "m"}};
  const CaseSpec spec = parse_case(c, "f", "");
  EXPECT_EQ(spec.expect, Expectation::reject);
  EXPECT_EQ(spec.expected_message, "m");
  c["expect"] = {{"verdict", "pass"}, {"message", "m"}};
  EXPECT_EQ(error_of(c, "f"), "f: /expect/message: only a \"reject\" expectation has a message");
}

TEST(CaseSpec, RoundTripsThroughJson) {
  json c = minimal();
  c["block_write_idx"] = 3;
  c["seed"] = 18446744073709551615ull;
  c["tensors"] = {{"prefix", {{"row_padding", 3}, {"dist", {{"kind", "uniform"}, {"low", -2}, {"high", 3}}}}},
                  {"qk_weight", {{"dist", {{"kind", "constant"}, {"value", 0.5}}}}},
                  {"blocks", {{"dist", {{"kind", "normal"}, {"block_scales", {0.25, 3}}}}}}};
  const CaseSpec a = parse_case(c, "f", "");
  const CaseSpec b = parse_case(case_to_json(a), "f", "");
  EXPECT_EQ(case_to_json(a), case_to_json(b));
  EXPECT_EQ(b.seed, 18446744073709551615ull);
  EXPECT_EQ(b.strides.prefix, 67);
  EXPECT_EQ(b.distributions[int(InputTensor::prefix)].kind, DistributionKind::uniform);
  EXPECT_EQ(b.distributions[int(InputTensor::qk_weight)].kind, DistributionKind::constant);
  EXPECT_EQ(b.distributions[int(InputTensor::blocks)].block_scales, (std::vector<double>{0.25, 3}));
}

TEST(CaseSpec, ChecksAreNamedPropertiesKeptInOneOrder) {
  json c = minimal();
  c["checks"] = {"garbage", "determinism", "garbage"};
  const CaseSpec spec = parse_case(c, "f", "");
  EXPECT_EQ(spec.checks, (std::vector<CaseProperty>{CaseProperty::determinism, CaseProperty::garbage}));
  EXPECT_EQ(case_to_json(spec)["checks"], (json{"determinism", "garbage"}));
  EXPECT_EQ(parse_case(case_to_json(spec), "f", "").checks, spec.checks);
  EXPECT_FALSE(case_to_json(parse_case(minimal(), "f", "")).contains("checks"));
  c["checks"] = {"determinism", "speed"};
  EXPECT_EQ(error_of(c, "f"),
            "f: /checks/1: must be one of determinism, batch-invariance, garbage, stream, pdl, graph, got \"speed\"");
  c["checks"] = "determinism";
  EXPECT_EQ(error_of(c, "f"), "f: /checks: must be a list of names, got string");
}

TEST(CaseSpec, ABadCaseInAListLosesNoOtherCase) {
  TempDir dir;
  json good = minimal(), bad = minimal(), also_good = minimal();
  bad["name"] = "bad";
  bad["num_blocks"] = 9;
  also_good["name"] = "d";
  const std::string file = dir.file("sub/list.json", json::array({good, bad, also_good}).dump());
  dir.file("broken.json", "{\"schema_version\": 1,");
  const LoadedCases loaded = load_cases({dir.path().string()});
  ASSERT_EQ(loaded.cases.size(), 2u);
  EXPECT_EQ(loaded.cases[0].name, "c");
  EXPECT_EQ(loaded.cases[1].name, "d");
  EXPECT_EQ(loaded.cases[1].location(), file + "#/2");
  ASSERT_EQ(loaded.errors.size(), 2u);
  EXPECT_NE(loaded.errors[0].to_string().find("broken.json: not valid JSON"), std::string::npos);
  EXPECT_EQ(loaded.errors[1].to_string(), file + ": /1/num_blocks: must be in [0, max_blocks (4)], got 9");
}

TEST(CaseSpec, DuplicateNamesAndMissingPaths) {
  TempDir dir;
  const std::string a = dir.file("a.json", minimal().dump());
  const std::string b = dir.file("b.json", minimal().dump());
  const LoadedCases loaded = load_cases({a, b, (dir.path() / "nope.json").string()});
  ASSERT_EQ(loaded.cases.size(), 1u);
  ASSERT_EQ(loaded.errors.size(), 2u);
  EXPECT_EQ(loaded.errors[0].to_string(), (dir.path() / "nope.json").string() + ": no such file or directory");
  EXPECT_EQ(loaded.errors[1].to_string(), b + ": /name: duplicate case name \"c\" (also at " + a + ")");
}

// cases/scale holds an OPT-IN marker: `run cases` leaves it out, saying why; naming it runs its
// cases, whose largest element offsets straddle 2^31 - 1 and 2^32 - 1.
TEST(CaseSpec, AnOptInDirectoryIsReadOnlyWhereNamed) {
  const std::string scale = testing::source_path("cases/scale");
  const LoadedCases all = load_cases({testing::source_path("cases")});
  for (const CaseSpec& c : all.cases) EXPECT_NE(c.file.rfind(scale, 0), 0u) << c.name;
  ASSERT_EQ(all.opted_out.size(), 1u);
  EXPECT_EQ(all.opted_out[0].rfind(scale + ": not read: its cases run only when the directory is named (Element "
                                           "offsets past 2^31 - 1 and 2^32 - 1",
                                   0),
            0u)
      << all.opted_out[0];
  const LoadedCases named = load_cases({scale});
  EXPECT_TRUE(named.errors.empty());
  EXPECT_TRUE(named.opted_out.empty());
  std::int64_t int32_max = 0, uint32_max = 0;
  for (const CaseSpec& c : named.cases) {
    std::int64_t largest = 0;  // the offset of the last element from the first, in any tensor
    for (const TensorLayout& layout : case_layouts(c.shape, c.strides))
      if (!layout.empty()) largest = std::max(largest, layout.row_start(layout.rows() - 1) + layout.columns - 1);
    int32_max += largest > INT32_MAX;
    uint32_max += largest > UINT32_MAX;
  }
  EXPECT_EQ(named.cases.size(), 7u);
  EXPECT_EQ(int32_max, 6);   // one dense case is just below
  EXPECT_EQ(uint32_max, 1);  // the dense case just above 2^32 - 1
}

TEST(CaseSpec, BundledCasesAllLoad) {
  const LoadedCases loaded = load_cases({testing::source_path("cases")});
  EXPECT_TRUE(loaded.errors.empty()) << loaded.errors.front().to_string();
  EXPECT_GE(loaded.cases.size(), 50u);
  bool seed_repro = false;
  for (const CaseSpec& c : loaded.cases)
    if (c.name == "seed-repro-prefix-stride-7175") {
      seed_repro = true;
      EXPECT_EQ(c.shape.tokens, 320);
      EXPECT_EQ(c.shape.hidden, 7168);
      EXPECT_EQ(c.shape.num_blocks, 4);
      EXPECT_EQ(c.strides.prefix, 7175);
      EXPECT_FALSE(c.expectation_written);  // the native kernel's declaration gives it
    }
  EXPECT_TRUE(seed_repro);
}

}  // namespace
}  // namespace attnres
