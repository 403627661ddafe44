#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/casefile/safetensors.h"
#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/report/error_map_image.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

using testing::read_file;
using testing::run_cli;

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

// The seed repro's shape at a size that runs in a blink: the bug needs only padded prefix rows.
std::string padded_case(const TempDir& dir) {
  return dir.file("bug.json", json{{"schema_version", 1},
                                   {"name", "bug"},
                                   {"T", 24},
                                   {"H", 512},
                                   {"max_blocks", 8},
                                   {"num_blocks", 4},
                                   {"seed", 5},
                                   {"kernel", "native"},
                                   {"tensors", {{"prefix", {{"row_stride", 519}}}}},
                                   {"expect", {{"verdict", "reject"}}}}
                                  .dump());
}

TEST(Safetensors, WritesWhatItReadsBack) {
  TempDir dir;
  SafetensorsFile file;
  file.metadata["k"] = "v";
  file.tensors.push_back({"a", "BF16", {2, 3}, std::vector<unsigned char>(12, 7)});
  file.tensors.push_back({"b", "F64", {1}, std::vector<unsigned char>(8, 1)});
  const std::string path = (dir.path() / "t.safetensors").string();
  write_safetensors(path, file);
  const SafetensorsFile back = read_safetensors(path);
  EXPECT_EQ(back.metadata.at("k"), "v");
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.find("a")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(back.find("a")->bytes, file.tensors[0].bytes);
  EXPECT_EQ(back.find("b")->dtype, "F64");
  const std::string raw = read_file(path);
  std::uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= std::uint64_t(static_cast<unsigned char>(raw[std::size_t(i)])) << (8 * i);
  EXPECT_EQ((8 + header) % 8, 0u);  // data starts 8-byte aligned
}

std::string error_of(const std::string& path) {
  try {
    read_safetensors(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Safetensors, MalformedFilesAreClearErrors) {
  TempDir dir;
  SafetensorsFile file;
  file.tensors.push_back({"a", "BF16", {4}, std::vector<unsigned char>(8, 0)});
  const std::string good = (dir.path() / "good.safetensors").string();
  write_safetensors(good, file);
  const std::string raw = read_file(good);
  auto variant = [&](const std::string& name, const std::string& bytes) { return dir.file(name, bytes); };
  const std::string tiny = variant("tiny", raw.substr(0, 5));
  EXPECT_EQ(error_of(tiny), tiny + ": truncated: 5 bytes, shorter than the 8-byte header length");
  const std::string cut = variant("cut", raw.substr(0, raw.size() - 3));
  EXPECT_NE(error_of(cut).find("/a/data_offsets: [0, 8] lies outside the 5-byte data (file truncated?)"),
            std::string::npos);
  std::string huge = raw;
  huge[7] = char(0x7f);
  EXPECT_NE(error_of(variant("huge", huge)).find("does not fit"), std::string::npos);
  std::string garbled = raw;
  garbled[8] = '[';
  garbled[9] = '[';
  EXPECT_NE(error_of(variant("garbled", garbled)).find("header is not valid JSON"), std::string::npos);
  std::string header = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[0,8]}}";
  std::string wrong_size(8, '\0');
  wrong_size[0] = char(header.size());
  EXPECT_NE(error_of(variant("size", wrong_size + header + std::string(8, '\0')))
                .find("/a/data_offsets: 8 bytes for shape [5] of BF16"),
            std::string::npos);
  EXPECT_EQ(error_of((dir.path() / "missing").string()),
            (dir.path() / "missing").string() + ": cannot open: No such file or directory");
}

TEST(Repro, BundleHoldsEverythingToReplay) {
  TempDir dir;
  const std::string bug = padded_case(dir);
  const fs::path bundle = dir.path() / "bundle";
  const CommandOutput out = run_cli({"repro", bug, "--out", bundle.string(), "--backend", "cpu", "--no-layout-guard"});
  EXPECT_EQ(out.exit_code, kExitUnmet);  // the unguarded kernel ran although a rejection was expected
  EXPECT_NE(out.text.find("bug: not-rejected"), std::string::npos) << out.text;
  for (const char* f : {"REPORT.md", "case.json", "inputs.safetensors", "outputs.safetensors", "environment.json",
                        "result.json", "replay.sh", "repro.py", "attnres_binding.py"})
    EXPECT_TRUE(fs::exists(bundle / f)) << f;

  const std::string report = read_file(bundle / "REPORT.md");
  EXPECT_NE(report.find("# AttnRes: `bug` is not-rejected"), std::string::npos);
  if (can_write_png()) {  // the picture of |out - ref|: a PNG of 128 x 24 cells
    const std::string png = read_file(bundle / "error-map.png");
    ASSERT_GT(png.size(), 24u);
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    const auto be32 = [&](std::size_t at) {
      return (std::uint32_t(std::uint8_t(png[at])) << 24) | (std::uint32_t(std::uint8_t(png[at + 1])) << 16) |
             (std::uint32_t(std::uint8_t(png[at + 2])) << 8) | std::uint32_t(std::uint8_t(png[at + 3]));
    };
    EXPECT_EQ(be32(16), 128u * 8u);  // width: 128 cells of 8 pixels
    EXPECT_EQ(be32(20), 24u * 21u);  // height: 24 cells (T=24) of 512 / 24 pixels
    EXPECT_NE(report.find("(error-map.png)"), std::string::npos);
  } else {
    EXPECT_NE(out.notes.find("error-map.png not written: this build has no libpng"), std::string::npos) << out.notes;
  }
  EXPECT_NE(report.find("Mismatched elements:"), std::string::npos);
  EXPECT_NE(report.find("NaN in output: 0, Inf in output: 0; no CUDA fault"), std::string::npos);
  EXPECT_NE(report.find("prefix: padding canary overwritten"), std::string::npos);
  EXPECT_NE(report.find("attnres-check run case.json --backend cpu --device-model sm_90 --no-layout-guard"),
            std::string::npos);
  const json env = json::parse(read_file(bundle / "environment.json"));
  EXPECT_TRUE(env.contains("git_revision"));
  EXPECT_TRUE(env.contains("cuda_runtime"));
  EXPECT_EQ(env["native_images_in_build"].size(), compiled_native_images().size());

  const SafetensorsFile inputs = read_safetensors((bundle / "inputs.safetensors").string());
  EXPECT_EQ(inputs.metadata.at("prefix.shape"), "[24,512]");
  EXPECT_EQ(inputs.metadata.at("prefix.stride"), "[519,1]");
  EXPECT_EQ(inputs.metadata.at("blocks.stride"), "[4096,512,1]");
  EXPECT_EQ(inputs.find("prefix")->shape, (std::vector<std::int64_t>{24 * 519}));
  const SafetensorsFile outputs = read_safetensors((bundle / "outputs.safetensors").string());
  EXPECT_EQ(outputs.find("reference_output")->dtype, "F64");
  EXPECT_EQ(outputs.find("output")->shape, (std::vector<std::int64_t>{24 * 512}));

  // The bundle's case regenerates the same inputs; replaying the captured tensors agrees too.
  const std::string json_a = (dir.path() / "a.json").string(), json_b = (dir.path() / "b.json").string();
  run_cli({"run", (bundle / "case.json").string(), "--backend", "cpu", "--no-layout-guard", "--json", json_a});
  run_cli({"run", (bundle / "case.json").string(), "--inputs", (bundle / "inputs.safetensors").string(), "--backend",
           "cpu", "--no-layout-guard", "--json", json_b});
  const json a = json::parse(read_file(json_a)), b = json::parse(read_file(json_b));
  EXPECT_EQ(a["cases"][0]["input_checksums"], b["cases"][0]["input_checksums"]);
  EXPECT_EQ(a["cases"][0]["input_checksums"]["prefix"], inputs.metadata.at("checksum.prefix"));
  EXPECT_EQ(a["cases"][0]["disposition"], "not-rejected");
  EXPECT_EQ(b["cases"][0]["disposition"], "not-rejected");
  EXPECT_EQ(a["cases"][0]["comparison"]["max_abs_error"], b["cases"][0]["comparison"]["max_abs_error"]);
  // Guarded, the replay is refused like the original.
  EXPECT_EQ(run_cli({"run", (bundle / "case.json").string(), "--inputs", (bundle / "inputs.safetensors").string(),
                     "--backend", "cpu"})
                .exit_code,
            kExitOk);
}

// An empty batch (T = 0) makes a bundle without an error map, whose tensors replay.
// run --repro-dir: the run itself bundles each case that did not meet its expectation, with its
// flags, and each bundle replays to the same verdict; within --repro-max-bytes or listed.
TEST(Repro, RunBundlesEachCaseThatFailedAndEachBundleReplays) {
  testing::TempDir tmp;
  const std::string dir = (tmp.path() / "repro").string();
  const std::vector<std::string> failing{"run",
                                         testing::source_path("cases/guard.json"),
                                         "--filter",
                                         "guard-delta*",
                                         "--filter",
                                         "guard-output*",
                                         "--backend",
                                         "cpu",
                                         "--no-layout-guard"};
  std::vector<std::string> with_bundles = failing;
  with_bundles.insert(with_bundles.end(), {"--repro-dir", dir});
  EXPECT_EQ(run_cli(with_bundles).exit_code, kExitUnmet);
  const nlohmann::json index = nlohmann::json::parse(testing::read_file(dir + "/index.json"));
  ASSERT_EQ(index["bundles"].size(), 2u) << index.dump(2);
  EXPECT_TRUE(index["left_out"].empty());
  for (const auto& bundle : index["bundles"]) {
    const std::string at = dir + "/" + bundle["dir"].get<std::string>();
    EXPECT_EQ(bundle["disposition"], "not-rejected");
    EXPECT_EQ(bundle["bundle_disposition"], "not-rejected");
    EXPECT_NE(testing::read_file(at + "/replay.sh").find("--no-layout-guard"), std::string::npos);
    const std::string report = (tmp.path() / "replayed.json").string();
    const CommandOutput replay = run_cli({"run", at + "/case.json", "--inputs", at + "/inputs.safetensors", "--backend",
                                          "cpu", "--no-layout-guard", "--json", report});
    EXPECT_EQ(replay.exit_code, kExitUnmet);
    EXPECT_EQ(nlohmann::json::parse(testing::read_file(report))["cases"][0]["disposition"], "not-rejected");
  }
  // A directory holding anything is refused before anything runs.
  EXPECT_NE(testing::usage_error(with_bundles).find("holds files already"), std::string::npos);
  // Over the byte budget: nothing written, every case listed with the reason.
  const std::string small = (tmp.path() / "small").string();
  std::vector<std::string> budgeted = failing;
  budgeted.insert(budgeted.end(), {"--repro-dir", small, "--repro-max-bytes", "1M"});
  EXPECT_EQ(run_cli(budgeted).exit_code, kExitUnmet);
  const nlohmann::json listed = nlohmann::json::parse(testing::read_file(small + "/index.json"));
  EXPECT_TRUE(listed["bundles"].empty());
  ASSERT_EQ(listed["left_out"].size(), 2u);
  EXPECT_NE(listed["left_out"][0]["reason"].get<std::string>().find("would pass --repro-max-bytes"), std::string::npos);
  // Cases that meet their expectations leave an empty index.
  const std::string clean = (tmp.path() / "clean").string();
  EXPECT_EQ(run_cli({"run", testing::source_path("cases/guard.json"), "--filter", "guard-delta*", "--backend", "cpu",
                     "--repro-dir", clean})
                .exit_code,
            kExitOk);
  EXPECT_TRUE(nlohmann::json::parse(testing::read_file(clean + "/index.json"))["bundles"].empty());
  EXPECT_NE(testing::usage_error({"run", "cases", "--repro-dir", small + "3", "--repro-max-bytes", "3Q"})
                .find("--repro-max-bytes: expected a byte count"),
            std::string::npos);
  EXPECT_NE(testing::usage_error({"run", "cases", "--repro-max-bytes", "1G"}).find("goes with --repro-dir"),
            std::string::npos);
  EXPECT_NE(testing::usage_error({"run", "cases", "--repro-dir", small + "2", "--inputs", "x.safetensors"})
                .find("--inputs replays a bundle already"),
            std::string::npos);
}

TEST(Repro, EmptyBatchBundleReplays) {
  TempDir dir;
  const fs::path bundle = dir.path() / "bundle";
  const CommandOutput out = run_cli({"repro", testing::source_path("cases/empty.json"), "--case",
                                     "empty-batch-b4-write", "--out", bundle.string(), "--backend", "cpu"});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text << out.notes;
  EXPECT_FALSE(fs::exists(bundle / "error-map.png"));
  EXPECT_EQ(read_safetensors((bundle / "inputs.safetensors").string()).metadata.at("prefix.shape"), "[0,7168]");
  const CommandOutput replay = run_cli({"run", (bundle / "case.json").string(), "--inputs",
                                        (bundle / "inputs.safetensors").string(), "--backend", "cpu"});
  EXPECT_EQ(replay.exit_code, kExitOk) << replay.text << replay.notes;
  EXPECT_NE(replay.text.find("1 case, 1 passed"), std::string::npos) << replay.text;
}

TEST(Repro, ReplayOfDenseTensorsWithoutMetadata) {
  // Tensors saved straight from a model run: dense, no strides in __metadata__.
  TempDir dir;
  const std::string case_path = dir.file("c.json", json{{"schema_version", 1},
                                                        {"name", "replay"},
                                                        {"T", 1},
                                                        {"H", 8},
                                                        {"max_blocks", 1},
                                                        {"num_blocks", 1},
                                                        {"has_output_norm", false}}
                                                       .dump());
  auto bf16s = [](std::vector<float> values) {
    std::vector<unsigned char> bytes;
    for (float v : values) {
      const bf16_bits b = float_to_bf16(v);
      bytes.push_back(static_cast<unsigned char>(b));
      bytes.push_back(static_cast<unsigned char>(b >> 8));
    }
    return bytes;
  };
  SafetensorsFile file;
  file.tensors.push_back({"prefix", "BF16", {1, 8}, bf16s({1, 1, 1, 1, 1, 1, 1, 1})});
  file.tensors.push_back({"blocks", "BF16", {1, 1, 8}, bf16s({3, 3, 3, 3, 3, 3, 3, 3})});
  file.tensors.push_back({"norm_weight", "BF16", {8}, bf16s({1, 1, 1, 1, 1, 1, 1, 1})});
  file.tensors.push_back({"qk_weight", "BF16", {8}, bf16s({0, 0, 0, 0, 0, 0, 0, 0})});
  const std::string path = (dir.path() / "captured.safetensors").string();
  write_safetensors(path, file);
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", case_path, "--inputs", path, "--backend", "cpu", "--json", report});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  const json r = json::parse(read_file(report));
  EXPECT_EQ(r["cases"][0]["disposition"], "passed");
  EXPECT_DOUBLE_EQ(r["cases"][0]["comparison"]["worst_reference"].get<double>(), 2.0);  // mean of 1 and 3

  file.tensors[1].shape = {1, 8};  // blocks must be [T, MAXB, H]
  write_safetensors(path, file);
  const CommandOutput bad = run_cli({"run", case_path, "--inputs", path, "--backend", "cpu", "--json", report});
  EXPECT_EQ(bad.exit_code, kExitBadInput);
  EXPECT_NE(bad.notes.find(path + ": blocks: expected shape [1, MAXB, 8], got [1, 8]"), std::string::npos) << bad.notes;
  const json bad_report = json::parse(read_file(report));
  EXPECT_EQ(bad_report["load_errors"][0]["file"], path);
  EXPECT_EQ(bad_report["cases"].size(), 0u);
}

TEST(Shrink, KeepsTheVerdictAndShrinksTheCase) {
  TempDir dir;
  const std::string bug = padded_case(dir);
  const std::string out_path = (dir.path() / "small.json").string();
  const CommandOutput out = run_cli({"shrink", bug, "--out", out_path, "--backend", "cpu", "--no-layout-guard"});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  const json small = json::parse(read_file(out_path));
  EXPECT_LT(small["T"].get<int>(), 24);
  EXPECT_LE(small["num_blocks"].get<int>(), 1);
  EXPECT_GT(small["tensors"]["prefix"]["row_stride"].get<int>(), small["H"].get<int>());  // the bug needs the padding
  const CommandOutput again =
      run_cli({"run", out_path, "--backend", "cpu", "--no-layout-guard", "--interesting", "not-rejected"});
  EXPECT_EQ(again.exit_code, kExitOk) << again.text;
  EXPECT_EQ(run_cli({"shrink", bug, "--backend", "cpu", "--verdict", "passed"}).exit_code, kExitUnmet);
}

// A view (block-major padded blocks, storage offsets) with the bug (unguarded, the odd offsets send
// it to the portable kernel replaying the hard-coded row stride): shrinking keeps every layout
// legal, drops what the bug does not need (offsets, the blocks' layout) and keeps the padding.
TEST(Shrink, ViewsShrinkToLegalLayoutsThatKeepTheBug) {
  TempDir dir;
  const std::string bug =
      dir.file("view-bug.json", json{{"schema_version", 1},
                                     {"name", "view-bug"},
                                     {"T", 12},
                                     {"H", 512},
                                     {"max_blocks", 4},
                                     {"num_blocks", 3},
                                     {"block_write_idx", 3},
                                     {"seed", 9},
                                     {"tensors",
                                      {{"prefix", {{"row_stride", 520}, {"storage_offset", 3}}},
                                       {"blocks", {{"stride", {520, 12 * 520 + 8, 1}}, {"storage_offset", 5}}},
                                       {"qk_weight", {{"storage_offset", 1}}}}}}
                                    .dump());
  const std::string out_path = (dir.path() / "small.json").string();
  const CommandOutput out = run_cli({"shrink", bug, "--out", out_path, "--backend", "cpu", "--no-layout-guard"});
  ASSERT_EQ(out.exit_code, kExitOk) << out.text;
  const CaseSpec small = parse_case(json::parse(read_file(out_path)), out_path, "");  // legal
  for (const std::int64_t offset : small.strides.storage_offset) EXPECT_EQ(offset, 0) << out.text;
  EXPECT_EQ(small.strides.blocks_token, small.shape.max_blocks * small.strides.blocks_row) << out.text;
  EXPECT_GT(small.strides.prefix, small.shape.hidden) << out.text;
  EXPECT_LT(small.shape.tokens, 12);
  // The native kernel declares it must refuse padded rows: unguarded, it runs them.
  EXPECT_EQ(
      run_cli({"run", out_path, "--backend", "cpu", "--no-layout-guard", "--interesting", "not-rejected"}).exit_code,
      kExitOk);
}

// H = 8 x 219 has no half that is a multiple of 8: halves are rounded down, and H still shrinks to
// the smallest legal one (the unguarded bug does not depend on H).
TEST(Shrink, AnHiddenSizeOfEightTimesAnOddNumberShrinksToo) {
  TempDir dir;
  const std::string bug = dir.file("odd-h.json", json{{"schema_version", 1},
                                                      {"name", "odd-h"},
                                                      {"T", 4},
                                                      {"H", 1752},
                                                      {"max_blocks", 3},
                                                      {"num_blocks", 2},
                                                      {"tensors", {{"prefix", {{"row_stride", 1759}}}}}}
                                                     .dump());
  const std::string out_path = (dir.path() / "small.json").string();
  const CommandOutput out = run_cli({"shrink", bug, "--out", out_path, "--backend", "cpu", "--no-layout-guard"});
  ASSERT_EQ(out.exit_code, kExitOk) << out.text;
  EXPECT_NE(out.text.find("H 1752 -> 872"), std::string::npos) << out.text;
  const CaseSpec small = parse_case(json::parse(read_file(out_path)), out_path, "");
  EXPECT_EQ(small.shape.hidden, 8) << out.text;
  EXPECT_GT(small.strides.prefix, small.shape.hidden) << out.text;
  // The native kernel declares it must refuse padded rows: unguarded, it runs them.
  EXPECT_EQ(
      run_cli({"run", out_path, "--backend", "cpu", "--no-layout-guard", "--interesting", "not-rejected"}).exit_code,
      kExitOk);
}

TEST(Shrink, TheShrunkCasePassesItsOwnRegressionCheck) {
  // The seed repro's expectation is the native kernel's declaration, not written in the case: shrunk,
  // the layout is smaller, and the guarded kernel's refusal names the new strides.
  TempDir dir;
  const std::string out_path = (dir.path() / "s.json").string();
  const CommandOutput out =
      run_cli({"shrink", testing::source_path("cases/guard.json"), "--case", "seed-repro-prefix-stride-7175",
               "--no-layout-guard", "--backend", "cpu", "--out", out_path});
  ASSERT_EQ(out.exit_code, kExitOk) << out.text;
  const json small = json::parse(read_file(out_path));
  const std::int64_t hidden = small["H"], stride = small["tensors"]["prefix"]["row_stride"];
  ASSERT_LT(hidden, 7168);
  EXPECT_FALSE(small.contains("expect"));
  const CommandOutput again = run_cli({"run", out_path, "--backend", "cpu", "-v"});
  EXPECT_EQ(again.exit_code, kExitOk) << again.text;
  EXPECT_NE(again.text.find("rejected-as-expected"), std::string::npos) << again.text;
  EXPECT_NE(again.text.find(
                fmt::format("Kimi K3 AttnRes requires densely packed rows; got strides {}, {}, {} for hidden_size {}",
                            stride, small["has_delta"].get<bool>() ? std::to_string(hidden) : "none", hidden, hidden)),
            std::string::npos)
      << again.text;
}

}  // namespace
}  // namespace attnres
