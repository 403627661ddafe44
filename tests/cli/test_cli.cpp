#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fstream>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/report/git_revision.h"
#include "kernels/external/kernel_spec.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

using testing::read_file;
using testing::run_cli;

using nlohmann::json;
using testing::TempDir;

std::string case_text(const std::string& name, int T = 2, int padding = 0, const std::string& extra = "") {
  return json{{"schema_version", 1},
              {"name", name},
              {"T", T},
              {"H", 512},
              {"max_blocks", 2},
              {"num_blocks", 2},
              {"tensors", {{"prefix", {{"row_padding", padding}}}}}}
      .dump()
      .insert(1, extra);
}

TEST(Cli, ParsesRunOptions) {
  const Invocation inv =
      parse({"run", "cases", "more.json", "--json", "r.json", "--junit", "r.xml", "--filter", "public-*", "--filter",
             "seed*", "--shard", "2/3", "--no-layout-guard", "--backend", "cpu", "--device-model", "sm_100"});
  EXPECT_EQ(inv.command, Command::run);
  EXPECT_EQ(inv.run.paths, (std::vector<std::string>{"cases", "more.json"}));
  EXPECT_EQ(inv.run.filters.size(), 2u);
  EXPECT_EQ(inv.run.shard, "2/3");
  EXPECT_TRUE(inv.run.no_layout_guard);
  EXPECT_EQ(inv.backend.backend, "cpu");
  EXPECT_EQ(inv.backend.device_model, "sm_100");
}

TEST(Cli, DevicesListsOrAllAndExcludesWhatCannotSpread) {
  const Invocation pair = parse({"run", "cases", "--devices", "0,0,3"});
  EXPECT_EQ(pair.run.devices, (std::vector<int>{0, 0, 3}));
  EXPECT_FALSE(pair.run.all_devices);
  const Invocation all = parse({"run", "cases", "--devices", "all"});
  EXPECT_TRUE(all.run.all_devices);
  EXPECT_EQ(all.run.devices, std::vector<int>{0});
  EXPECT_TRUE(parse({"run", "cases"}).run.devices.empty());
  for (const char* bad : {"", "0,", "x", "-1", "1,,2", "0x1", "all,1"}) {
    try {
      parse({"run", "cases", "--devices", bad});
      ADD_FAILURE() << "--devices " << bad << " parsed";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--devices: expected all or device ordinals such as 0,1"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(parse({"run", "cases", "--devices", "0,1", "--device", "1"}), UsageError);
  EXPECT_THROW(parse({"run", "cases", "--devices", "0,1", "--backend", "cpu"}), UsageError);
  EXPECT_THROW(parse({"run", "cases", "--devices", "0,1", "--in-process"}), UsageError);
  // A replay's tensors are read before the workers start, so each worker can replay them.
  EXPECT_EQ(parse({"run", "cases", "--devices", "1", "--inputs", "x.safetensors"}).run.inputs, "x.safetensors");
}

TEST(Cli, LibraryPathsAreHeldAbsoluteSoBundlesNameTheSameFileFromElsewhere) {
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_EQ(parse({"run", "cases", "--kernel", "so:build/../libk.so"}).backend.kernel, "so:" + cwd + "/libk.so");
  EXPECT_EQ(parse({"run", "cases", "--kernel", "so:libk.so:my_entry"}).backend.kernel,
            "so:" + cwd + "/libk.so:my_entry");
  EXPECT_EQ(parse({"run", "cases", "--kernel", "so:/opt/k/libk.so"}).backend.kernel, "so:/opt/k/libk.so");
  const Invocation op =
      parse({"repro", "c.json", "--kernel", "torch-op:_C::kimi_k3_attn_res", "--torch-library", "vllm/_C.abi3.so"});
  EXPECT_EQ(op.backend.kernel, "torch-op:_C::kimi_k3_attn_res");
  EXPECT_EQ(op.backend.torch_library, cwd + "/vllm/_C.abi3.so");
}

// A bridge's own option goes with that bridge's --kernel only, and the error says which form.
TEST(Cli, ABridgesOwnOptionGoesWithItsKernel) {
  try {
    parse({"run", "cases", "--kernel", "python:m:f", "--torch-library", "x.so"});
    ADD_FAILURE() << "--torch-library with a python: kernel was taken";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--torch-library goes with --kernel torch-op:NAMESPACE::OP");
  }
  EXPECT_THROW(parse({"run", "cases", "--torch-library", "x.so"}), UsageError);
  EXPECT_TRUE(parse_kernel_spec("torch-op:a::b").takes_option("--torch-library"));
  EXPECT_FALSE(parse_kernel_spec("torch-op:a::b").takes_option("--signature"));
  EXPECT_TRUE(parse_kernel_spec("python:m:f").takes_option("--signature"));
  EXPECT_TRUE(parse_kernel_spec("python:m:f").takes_option("--arg"));
  EXPECT_FALSE(parse_kernel_spec("torch-op:a::b").takes_option("--arg"));
  EXPECT_FALSE(parse_kernel_spec("so:/k.so").takes_option("--signature"));
  EXPECT_FALSE(parse_kernel_spec("native").takes_option("--torch-library"));
}

TEST(Cli, UsageErrors) {
  EXPECT_THROW(parse({}), UsageError);
  // No case argument: the bundled cases (installed beside the binary, else ./cases), where there are any.
  const std::optional<std::string> bundled = bundled_cases_directory();
  EXPECT_EQ(parse({"run"}).run.paths, bundled ? std::vector<std::string>{*bundled} : std::vector<std::string>{});
  EXPECT_THROW(parse({"run", "x", "--bogus"}), UsageError);
  EXPECT_THROW(parse({"run", "x", "--backend", "tpu"}), UsageError);
  EXPECT_THROW(parse({"bench", "--tokens", "0"}), UsageError);
  EXPECT_THROW(parse({"bench", "--tokens", "2147483649"}), UsageError);
  EXPECT_THROW(parse({"bench", "--tokens", "99999999999999999999"}), UsageError);
  EXPECT_EQ(parse({"bench", "--tokens", "2147483648"}).bench.request.tokens,
            std::vector<std::int64_t>{std::int64_t(1) << 31});
  EXPECT_THROW(parse({"bench", "--hidden", "65544"}), UsageError);
  EXPECT_FALSE(parse({"run", "--help"}).help.empty());
  EXPECT_THROW(run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--shard", "3/2"}),
               UsageError);
  // --shard is read as merge reads a report's shard: whole numbers, nothing around them.
  for (const char* bad : {" 1/2", "+1/2", "1/2 ", "99999999999/1", "1/99999999999", "1/", "/2", "0/2", "1-2"})
    EXPECT_THROW(run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--shard", bad}),
                 UsageError)
        << bad;
  EXPECT_THROW(run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--device-model", "x"}),
               UsageError);
}

TEST(Cli, CheckTakesPropertyNamesOrAll) {
  EXPECT_EQ(parse({"run", "x", "--check", "garbage,determinism"}).properties,
            (std::vector<CaseProperty>{CaseProperty::determinism, CaseProperty::garbage}));
  EXPECT_EQ(parse({"run", "x", "--check", "batch-invariance", "--check", "all"}).properties,
            (std::vector<CaseProperty>{std::begin(kAllCaseProperties), std::end(kAllCaseProperties)}));
  EXPECT_EQ(parse({"repro", "x", "--check", "determinism"}).properties,
            std::vector<CaseProperty>{CaseProperty::determinism});
  EXPECT_EQ(testing::usage_error({"run", "x", "--check", "determinism,speed"}),
            "--check: \"speed\" is no check; the checks are determinism, batch-invariance, garbage, stream, pdl, "
            "graph, or all");
  EXPECT_EQ(testing::usage_error({"run", "x", "--check", "graph,offsets"})
                .rfind("--check: offsets is no check of each "
                       "case but a set of cases: run cases/scale",
                       0),
            0u);
}

// Numbers are taken whole and in range, and a bad one is named in words (not CLI11's range of
// 0 to 1.8e308); a NaN percentage would have made --fail-under never fail.
TEST(Cli, NumericOptionsSayWhatTheyExpect) {
  const auto message = [](std::vector<std::string> args) {
    try {
      parse(args);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  for (const char* bad : {"-1", "x", "1.5", "", "2147483648"}) {
    EXPECT_NE(message({"run", "x", "--device", bad}).find("--device: expected a CUDA device ordinal (0, 1, ...), got"),
              std::string::npos)
        << bad;
    EXPECT_NE(message({"mutants", "--device", bad}).find("expected a CUDA device ordinal"), std::string::npos) << bad;
  }
  EXPECT_EQ(parse({"run", "x", "--device", "3"}).backend.device, 3);
  for (const char* bad : {"-1", "nan", "inf", "-inf", "abc", "1s", ""})
    EXPECT_NE(message({"run", "x", "--timeout", bad}).find("--timeout: expected seconds >= 0 (0: no limit), got"),
              std::string::npos)
        << bad;
  EXPECT_EQ(parse({"run", "x", "--timeout", "0"}).backend.timeout_seconds, 0.0);
  EXPECT_EQ(parse({"shrink", "x", "--timeout", "2.5"}).backend.timeout_seconds, 2.5);
  for (const char* bad : {"nan", "-0.5", "100.5", "inf", "50%"})
    EXPECT_NE(message({"mutants", "--fail-under", bad}).find("--fail-under: expected a percentage from 0 to 100, got"),
              std::string::npos)
        << bad;
  EXPECT_EQ(parse({"mutants", "--fail-under", "100"}).mutants.fail_under, 100.0);
  EXPECT_EQ(message({"run", "x", "--device", "x"}).find("179769"), std::string::npos);
}

// A command's output, or "" when it failed.
std::string output_of(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return "";
  std::string out;
  char chunk[256];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) out.append(chunk, n);
  return pclose(pipe) == 0 ? out : "";
}

// Bundles and reports name the revision the binary was built from, read at build time (a
// configure-time revision goes stale with every commit built without re-running CMake).
TEST(Cli, VersionNamesTheRevisionItWasBuiltFrom) {
  const std::string git = "git -C '" + testing::source_path("") + "' ";
  std::string head = output_of(git + "rev-parse --short=12 HEAD 2>/dev/null");
  if (head.empty()) GTEST_SKIP() << "the source tree is not a git checkout";
  head.pop_back();  // the newline
  const bool clean = std::system((git + "diff --quiet HEAD -- 2>/dev/null").c_str()) == 0;
  EXPECT_EQ(std::string(kGitRevision), clean ? head : head + "+dirty");
  EXPECT_NE(parse({"--version"}).help.find("(git " + std::string(kGitRevision) + ";"), std::string::npos);
}

TEST(Cli, BadCaseFileExitsTwoNamingFileAndPointerAndKeepsOtherCases) {
  TempDir dir;
  dir.file("good.json", case_text("good"));
  const std::string bad = dir.file("bad.json", case_text("bad", 2, -3));
  const CommandOutput out = run_cli({"run", dir.path().string(), "--backend", "cpu"});
  EXPECT_EQ(out.exit_code, kExitBadInput);
  EXPECT_NE(out.text.find(bad + ": /tensors/prefix/row_padding: must be in [0, 2^20], got -3"), std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("passed"), std::string::npos);
  EXPECT_NE(out.text.find("good"), std::string::npos);
}

TEST(Cli, ExitCodeFollowsExpectations) {
  TempDir dir;
  const std::string good = dir.file("good.json", case_text("good"));
  EXPECT_EQ(run_cli({"run", good, "--backend", "cpu"}).exit_code, kExitOk);
  const std::string padded = dir.file("padded.json", case_text("padded", 2, 1));
  EXPECT_EQ(run_cli({"run", padded, "--backend", "cpu"}).exit_code,
            kExitOk);  // the native kernel refuses it, as it declares
  EXPECT_EQ(run_cli({"run", padded, "--backend", "cpu", "--device-model", "sm_86"}).exit_code,
            kExitOk);  // portable computes it
  // A case file's own expectation wins over the kernel's declaration.
  const std::string must_pass =
      dir.file("must-pass.json", case_text("must-pass", 2, 1, R"("expect":{"verdict":"pass"},)"));
  EXPECT_EQ(run_cli({"run", must_pass, "--backend", "cpu"}).exit_code, kExitUnmet);  // unexpected rejection
  const CommandOutput none = run_cli({"run", good, "--backend", "cpu", "--device-model", "none"});
  EXPECT_EQ(none.exit_code, kExitUnmet);
  EXPECT_NE(none.text.find("not-run"), std::string::npos);
  // --allow-not-run lets not-run cases pass beside judged ones, never a run that judged nothing.
  const CommandOutput judged_nothing =
      run_cli({"run", good, "--backend", "cpu", "--device-model", "none", "--allow-not-run"});
  EXPECT_EQ(judged_nothing.exit_code, kExitNoCases);
  EXPECT_NE(judged_nothing.notes.find("every case is not-run: nothing was judged"), std::string::npos)
      << judged_nothing.notes;
  const std::string native = dir.file("native.json", case_text("native", 2, 0, R"("kernel":"native",)"));
  EXPECT_EQ(run_cli({"run", good, native, "--backend", "cpu", "--device-model", "sm_86", "--allow-not-run"}).exit_code,
            kExitOk);
}

TEST(Cli, InterestingnessTestByDisposition) {
  TempDir dir;
  const std::string padded = dir.file("padded.json", case_text("padded", 2, 1));
  EXPECT_EQ(run_cli({"run", padded, "--backend", "cpu", "--interesting", "rejected-as-expected"}).exit_code, kExitOk);
  EXPECT_EQ(run_cli({"run", padded, "--backend", "cpu", "--interesting", "passed"}).exit_code, kExitUnmet);
  EXPECT_THROW(run_cli({"run", padded, "--backend", "cpu", "--interesting", "nope"}), UsageError);
}

TEST(Cli, FilterShardAndReports) {
  TempDir dir;
  const std::string cases = testing::source_path("cases/guard.json");
  const std::string json_path = (dir.path() / "r.json").string(), junit_path = (dir.path() / "r.xml").string();
  const CommandOutput out = run_cli({"run", cases, "--backend", "cpu", "--filter", "guard-*", "--shard", "1/2",
                                     "--json", json_path, "--junit", junit_path});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  json report;
  std::ifstream(json_path) >> report;
  ASSERT_EQ(report["cases"].size(), 2u);  // guard-* matches 4; shard 1 of 2 keeps the 1st and 3rd
  EXPECT_EQ(report["cases"][0]["name"], "guard-delta-stride");
  EXPECT_EQ(report["cases"][1]["name"], "guard-no-delta-prefix-stride");
  std::ifstream junit(junit_path);
  const std::string xml((std::istreambuf_iterator<char>(junit)), std::istreambuf_iterator<char>());
  EXPECT_NE(xml.find("tests=\"2\""), std::string::npos);
}

TEST(Cli, FilterIsASubstringUnlessItIsAGlobAndNothingSelectedIsItsOwnExit) {
  const std::string cases = testing::source_path("cases/public.json");
  const CommandOutput substring = run_cli({"run", cases, "--backend", "cpu", "--filter", "t1-b0", "--list"});
  EXPECT_EQ(substring.exit_code, kExitOk);
  EXPECT_NE(substring.text.find("public-t1-b0 "), std::string::npos) << substring.text;
  EXPECT_EQ(std::count(substring.text.begin(), substring.text.end(), '\n'), 1) << substring.text;
  const CommandOutput glob = run_cli({"run", cases, "--backend", "cpu", "--filter", "*-t3-b[01]*", "--list"});
  EXPECT_EQ(std::count(glob.text.begin(), glob.text.end(), '\n'), 2) << glob.text;
  const CommandOutput none = run_cli({"run", cases, "--backend", "cpu", "--filter", "t1-b9"});
  EXPECT_EQ(none.exit_code, kExitNoCases);
  EXPECT_EQ(none.notes, "no case selected: 36 cases loaded, none matched --filter/--shard\n");
}

TEST(Cli, EachCaseIsStreamedAsSoonAsItIsJudged) {
  std::vector<std::string> chunks;
  const CommandOutput out = execute(parse({"run", testing::source_path("cases/guard.json"), "--backend", "cpu"}),
                                    nullptr, [&](const std::string& text) { chunks.push_back(text); });
  ASSERT_EQ(chunks.size(), 1u + 5u);  // the header, then one chunk per case, in case order
  EXPECT_EQ(chunks[0].rfind("backend cpu, device modelled sm_90 (sm_90)", 0), 0u) << chunks[0];
  EXPECT_EQ(chunks[1].rfind("rejected-as-expected  seed-repro-prefix-stride-7175", 0), 0u) << chunks[1];
  EXPECT_EQ(out.text, "5 cases, 1 passed, 4 rejected-as-expected: every case met its expectation\n");
}

TEST(Cli, SeedOverridesAndRepeatsRecordTheirSeeds) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--filter",
                                     "padded-blocks", "--seed", "7", "--repeat", "3", "--json", report});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  json r;
  std::ifstream(report) >> r;
  ASSERT_EQ(r["cases"].size(), 3u);
  EXPECT_EQ(r["cases"][0]["name"], "guard-padded-blocks-ok");
  EXPECT_EQ(r["cases"][0]["seed"], 7u);
  EXPECT_EQ(r["cases"][2]["name"], "guard-padded-blocks-ok#3");
  EXPECT_NE(r["cases"][1]["seed"], r["cases"][2]["seed"]);
  // Another seed is other inputs.
  EXPECT_NE(r["cases"][0]["input_checksums"]["prefix"], r["cases"][1]["input_checksums"]["prefix"]);
  EXPECT_THROW(parse({"run", "x", "--repeat", "0"}), UsageError);
  // The largest seed a report can print is taken exactly; nothing is wrapped or saturated.
  EXPECT_EQ(parse({"run", "x", "--seed", "18446744073709551615"}).run.seed, 18446744073709551615u);
  EXPECT_EQ(parse({"explore", "--seed", "0"}).explore.seed, 0u);
  for (const char* bad : {"-1", "18446744073709551616", "99999999999999999999", "1e3", "0x10", "7 ", ""}) {
    EXPECT_THROW(parse({"run", "x", "--seed", bad}), UsageError) << bad;
    EXPECT_THROW(parse({"explore", "--seed", bad}), UsageError) << bad;
  }
}

TEST(Cli, ListSaysWhatWouldRunEachCaseAndRunsNothing) {
  const CommandOutput out = run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--list"});
  EXPECT_EQ(out.exit_code, kExitOk);
  EXPECT_NE(out.text.find("seed-repro-prefix-stride-7175                rejected  "), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("guard-padded-blocks-ok                       native    "), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("passed"), std::string::npos);
  EXPECT_THROW(parse({"run", "x", "-q", "-v"}), UsageError);

  // A bad case-file entry is listed and fails the listing as it would fail the run.
  TempDir dir;
  dir.file("good.json", case_text("good"));
  const std::string bad = dir.file("bad.json", case_text("bad", 2, -3));
  const CommandOutput listed = run_cli({"run", dir.path().string(), "--backend", "cpu", "--list"});
  EXPECT_EQ(listed.exit_code, kExitBadInput);
  EXPECT_NE(listed.text.find("  good "), std::string::npos) << listed.text;
  EXPECT_NE(listed.text.find("bad case: " + bad + ": /tensors/prefix/row_padding: must be in [0, 2^20], got -3"),
            std::string::npos)
      << listed.text;
}

// Given no case, where there are no bundled cases either (not installed, no ./cases): run, info
// and mutants say so and where they looked, rather than "cases: no such file or directory".
TEST(Cli, WithoutCasesOrBundledCasesEachCommandSaysWhereItLooked) {
  TempDir dir;
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const bool bundled = bundled_cases_directory().has_value();  // an installed test binary would have them
  const CommandOutput run = run_cli({"run", "--backend", "cpu"});
  const CommandOutput info = run_cli({"info", "--backend", "cpu"});
  const CommandOutput mutants = run_cli({"mutants", "--backend", "cpu"});
  std::filesystem::current_path(previous);
  if (bundled) GTEST_SKIP() << "bundled cases beside the test binary";
  const std::string said =
      "no case files given, and no bundled cases here (share/attnres-check/cases beside an installed binary, "
      "or ./cases in a checkout)";
  EXPECT_EQ(run.exit_code, kExitNoCases);
  EXPECT_NE(run.notes.find(said), std::string::npos) << run.notes;
  EXPECT_EQ(info.exit_code, kExitOk);
  EXPECT_NE(info.notes.find(said), std::string::npos) << info.notes;
  EXPECT_NE(info.text.find("0 cases:"), std::string::npos) << info.text;
  EXPECT_EQ(mutants.exit_code, kExitNoCases);
  EXPECT_NE(mutants.notes.find(said), std::string::npos) << mutants.notes;
}

TEST(Cli, InfoReportsEveryDecisionForAModelledDevice) {
  const CommandOutput out = run_cli({"info", testing::source_path("cases/guard.json"), "--backend", "cpu",
                                     "--device-model", "sm_100", "--native-images", "sm_90a"});
  EXPECT_EQ(out.exit_code, kExitOk);
  EXPECT_NE(out.text.find("device: modelled sm_100 (sm_100)"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("dispatcher sees: sm_90a image yes, sm_100a image no"), std::string::npos);
  EXPECT_NE(out.text.find("guard-padded-blocks-ok"), std::string::npos);
  EXPECT_NE(out.text.find("portable  this build holds no sm_100a image of the native kernel for this sm_100 device"),
            std::string::npos);
  EXPECT_NE(out.text.find("not-run   case requires the native kernel, but this build holds no sm_100a image"),
            std::string::npos);
}

}  // namespace
}  // namespace attnres
