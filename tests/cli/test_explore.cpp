#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "app/cli/commands/explore.h"
#include "tests/cuda_test_support.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

namespace fs = std::filesystem;

TEST(Explore, DrawsLegalCasesOfEveryKindAndReplaysTheSameOnesFromASeed) {
  std::mt19937_64 a(7), b(7);
  const ExploreLimits limits;
  int empty = 0, single = 0, odd_padding = 0, native_hidden = 0, other_hidden = 0, scaled = 0, zero_slot = 0,
      writes = 0, no_delta = 0, no_norm = 0, past_native_blocks = 0, block_major = 0, odd_offset = 0, distinct_eps = 0,
      small_rms = 0, denormal = 0;
  for (int i = 0; i < 500; ++i) {
    const CaseSpec spec = draw_case(a, i, limits);
    const CaseSpec again = draw_case(b, i, limits);
    ASSERT_EQ(case_to_json(spec), case_to_json(again));
    // Legal: the case file it would be parses back to the same case.
    const CaseSpec parsed = parse_case(case_to_json(spec), "drawn", "");
    ASSERT_EQ(case_to_json(parsed), case_to_json(spec));
    const AttnResShape& s = spec.shape;
    EXPECT_LE(s.tokens, limits.max_tokens);
    EXPECT_LE(s.hidden, limits.max_hidden);
    empty += s.tokens == 0;
    single += s.tokens == 1;
    for (std::int64_t stride : {spec.strides.prefix, spec.strides.delta, spec.strides.output, spec.strides.blocks_row})
      odd_padding += (stride - s.hidden) % 2 == 1;
    (s.hidden % 512 == 0 ? native_hidden : other_hidden)++;
    const std::vector<double>& scales = spec.distributions[int(InputTensor::blocks)].block_scales;
    scaled += !scales.empty();
    zero_slot += std::count(scales.begin(), scales.end(), 0.0) > 0;
    writes += s.block_write_idx >= 0;
    no_delta += !s.has_delta;
    no_norm += !s.has_output_norm;
    past_native_blocks += s.num_blocks > 8;
    block_major += spec.strides.blocks_token < spec.strides.blocks_row;
    odd_offset += std::count_if(std::begin(spec.strides.storage_offset), std::end(spec.strides.storage_offset),
                                [](std::int64_t offset) { return offset % 2 == 1; }) > 0;
    distinct_eps += spec.eps != spec.output_norm_eps;
    const double prefix_std = spec.distributions[int(InputTensor::prefix)].std;
    small_rms += prefix_std == 0.01;
    denormal += prefix_std < 1.1754943508222875e-38;
  }
  for (int count : {empty, single, odd_padding, native_hidden, other_hidden, scaled, zero_slot, writes, no_delta,
                    no_norm, past_native_blocks, block_major, odd_offset, distinct_eps, small_rms, denormal})
    EXPECT_GT(count, 5);
}

TEST(Explore, OutcomesOfATrial) {
  CaseResult r;
  r.disposition = Disposition::passed;
  EXPECT_EQ(classify_trial(r), TrialOutcome::passed);
  r.disposition = Disposition::rejected_as_expected;
  EXPECT_EQ(classify_trial(r), TrialOutcome::refused);
  r.disposition = Disposition::skipped;
  EXPECT_EQ(classify_trial(r), TrialOutcome::skipped);
  r.disposition = Disposition::not_run;
  EXPECT_EQ(classify_trial(r), TrialOutcome::not_run);
  // A refusal the kernel did not declare is a finding.
  for (Disposition d :
       {Disposition::unexpected_rejection, Disposition::failed, Disposition::memory_violation, Disposition::error})
    EXPECT_EQ(classify_trial(CaseResult{"", "", 0, d}), TrialOutcome::finding);
}

// Without its guard the native kernel (its CPU stand-in here) takes padded rows as H apart: the
// explorer must find that, shrink it and write a bundle whose case still shows it.
TEST(Explore, FindsTheSeedsBugClassUnguardedAndShrinksIt) {
  testing::TempDir dir;
  const fs::path out = dir.path() / "finding";
  const CommandOutput run = testing::run_cli(
      {"explore", "--backend", "cpu", "--budget", "200", "--seed", "3", "--no-layout-guard", "--out", out.string()});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.text;
  EXPECT_NE(run.text.find("went wrong"), std::string::npos) << run.text;
  ASSERT_TRUE(fs::exists(out / "case.json")) << run.text;
  ASSERT_TRUE(fs::exists(out / "original-case.json"));
  const CaseSpec shrunk = load_single_case((out / "case.json").string(), "");
  const CaseSpec drawn = load_single_case((out / "original-case.json").string(), "");
  EXPECT_LE(shrunk.shape.tokens, drawn.shape.tokens);
  EXPECT_GE(shrunk.shape.tokens, 2);  // one row cannot show a row stride
  const bool padded = shrunk.strides.prefix != shrunk.shape.hidden || shrunk.strides.delta != shrunk.shape.hidden ||
                      shrunk.strides.output != shrunk.shape.hidden;
  EXPECT_TRUE(padded) << "the bug needs a padded prefix, delta or output";
  // The bundle replays: the shrunk case still goes wrong without the guard.
  EXPECT_EQ(testing::run_cli({"run", (out / "case.json").string(), "--backend", "cpu", "--no-layout-guard"}).exit_code,
            kExitUnmet);
}

// A kernel that refuses every call computes nothing: explore names its message and fails.
TEST(Explore, AKernelThatRefusesEverythingIsNotClean) {
  const std::string kernel = std::string("so:") + ATTNRES_PLUGIN_DIR + "/libattnres_plugin_test_refuses_everything.so";
  testing::TempDir dir;
  // Undeclared, the first refusal is a finding.
  const CommandOutput undeclared = testing::run_cli({"explore", "--backend", "cpu", "--kernel", kernel, "--budget",
                                                     "40", "--seed", "4", "--out", (dir.path() / "found").string()});
  EXPECT_EQ(undeclared.exit_code, kExitUnmet) << undeclared.text;
  EXPECT_NE(undeclared.text.find("trial 0 went wrong: unexpected-rejection"), std::string::npos) << undeclared.text;
  // Declared (it may refuse anything), every refusal is the kernel's word, and nothing was judged.
  const std::filesystem::path profile = dir.path() / "profile.json";
  std::ofstream(profile)
      << R"({"schema_version": 1, "refuses": [{"when": "hidden_above", "value": 1, "mode": "may"}]})";
  const CommandOutput run = testing::run_cli({"explore", "--backend", "cpu", "--kernel", kernel, "--profile",
                                              profile.string(), "--budget", "40", "--seed", "4"});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.text;
  EXPECT_NE(run.text.find("0 passed, 40 refused as the kernel declares it may or must"), std::string::npos) << run.text;
  EXPECT_NE(run.text.find("  refused 40 times: \"test plugin: not implemented\""), std::string::npos) << run.text;
  EXPECT_NE(run.notes.find("no trial was computed and judged"), std::string::npos) << run.notes;
}

// Each property asked has a line: what it came to over the trials. On the CPU backend the
// device checks are skipped; the built-in stand-ins have the others wherever they compute.
TEST(Explore, EachCheckAskedHasALineOfCounts) {
  const CommandOutput run = testing::run_cli(
      {"explore", "--backend", "cpu", "--budget", "12", "--seed", "4", "--max-tokens", "40", "--check", "all"});
  EXPECT_EQ(run.exit_code, kExitOk) << run.text;
  for (const char* device_check : {"stream", "graph", "pdl"})
    EXPECT_NE(run.text.find(fmt::format("  check {}: ", device_check)), std::string::npos) << run.text;
  for (const char* host_check : {"determinism", "batch-invariance", "garbage"}) {
    const std::size_t line = run.text.find(fmt::format("  check {}: ", host_check));
    ASSERT_NE(line, std::string::npos) << run.text;
    const std::string counts = run.text.substr(line, run.text.find('\n', line) - line);
    EXPECT_NE(counts.find(" passed"), std::string::npos) << counts;
    EXPECT_EQ(counts.find(" failed"), std::string::npos) << counts;
  }
}

TEST(Explore, GuardedKernelsGoWrongNowhere) {
  const CommandOutput run = testing::run_cli({"explore", "--backend", "cpu", "--budget", "500", "--seed", "4"});
  EXPECT_EQ(run.exit_code, kExitOk) << run.text;
  EXPECT_NE(run.text.find("500 trials, nothing went wrong"), std::string::npos) << run.text;
}

// On the GPU (ctest label gpu).

// explore on the GPU with a plugin that faults on 3 blocks (and, as vLLM's op, refuses padded rows,
// which it declares): the illegal address is a finding (each trial that loses its context gets a
// fresh worker), shrunk, and bundled from a new worker.
TEST_F(Gpu, ExploreShrinksAnIllegalAddressIntoABundle) {
  testing::TempDir dir;
  const std::string bundle = (dir.path() / "found").string();
  const BinaryRun run = run_binary({"explore", "--kernel", cuda_plugin("faults"), "--profile", "vllm-op", "--budget",
                                    "60", "--seed", "3", "--max-hidden", "256", "--out", bundle});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  const nlohmann::json result = nlohmann::json::parse(testing::read_file(bundle + "/result.json"));
  EXPECT_EQ(result["disposition"], "error") << run.output;
  EXPECT_NE(result["detail"].get<std::string>().find("illegal memory access"), std::string::npos) << result["detail"];
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(bundle + "/case.json"))["num_blocks"], 3);
  EXPECT_TRUE(std::filesystem::exists(bundle + "/inputs.safetensors")) << run.output;
}

}  // namespace
}  // namespace attnres
