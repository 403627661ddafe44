// External kernels run in a worker process: a kernel that kills its process costs only its own
// case, and results cross the process boundary without losing anything.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/report/result_json.h"
#include "app/workers/sanitizer.h"
#include "app/workers/worker.h"
#include "tests/cuda_test_support.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

using nlohmann::json;
using testing::read_file;
using testing::run_cli;
using testing::TempDir;

std::string plugin(const std::string& variant) {
  return std::string("so:") + ATTNRES_PLUGIN_DIR + "/libattnres_plugin_test_" + variant + ".so";
}

TEST(ResultJson, NonFiniteNumbersAreNamedStrings) {
  EXPECT_EQ(json_number(NAN), "NaN");
  EXPECT_EQ(json_number(INFINITY), "Infinity");
  EXPECT_EQ(json_number(-INFINITY), "-Infinity");
  EXPECT_EQ(json_number(0.25), 0.25);
  EXPECT_TRUE(std::isnan(number_from_json("NaN")));
  EXPECT_EQ(number_from_json("-Infinity"), -INFINITY);
  EXPECT_THROW(number_from_json("1.5"), std::invalid_argument);
}

TEST(ResultJson, AResultSurvivesTheRoundTrip) {
  CaseResult r;
  r.name = "c";
  r.location = "cases/x.json#/2";
  r.seed = 18446744073709551557ull;
  r.disposition = Disposition::memory_violation;
  r.detail = "prefix: padding canary overwritten";
  r.backend = "cpu";
  r.device = "modelled sm_90 (sm_90)";
  r.kernel = "so:/x.so";
  r.dispatch_reason = "--kernel so:/x.so";
  r.layout_guard = false;
  r.rejection = "no";
  r.kernel_context = "Traceback (most recent call last):";
  Comparison& c = r.comparison.emplace();
  c.reference = "cpu-float64";
  c.atol = 0.08;
  c.rtol = 0.03;
  c.max_abs_error = INFINITY;
  c.max_rel_error = 2.5;
  c.worst_token = 3;
  c.worst_column = 7;
  c.worst_value = NAN;
  c.worst_reference = -1.25;
  c.mismatched = 4;
  c.total = 100;
  c.nan_count = 1;
  c.inf_count = 2;
  c.prefix_mismatches = 5;
  c.first_prefix_mismatch = "row 0 col 1: got 0x3f80, expected 0x3f81";
  c.blocks_mismatches = 6;
  c.first_blocks_mismatch = "block 4 row 0 col 0";
  r.violations.push_back({"prefix", "padding canary overwritten", 2, 7170, 9});
  r.input_checksums.emplace_back("prefix", "fnv1a64:0123");
  r.seconds = 0.5;
  r.timings = {0.1, 0.2, 0.3, 0.04, 0.05, 0.006};
  r.error_map = ErrorMap{1, 2, 1, 2, {0.5, INFINITY}, {0, 7}};

  const CaseResult back = result_from_json(json::parse(result_json(r).dump()));
  EXPECT_EQ(result_json(back), result_json(r));
  ASSERT_TRUE(back.comparison);
  EXPECT_TRUE(std::isnan(back.comparison->worst_value));
  EXPECT_EQ(back.comparison->max_abs_error, INFINITY);
  ASSERT_TRUE(back.error_map);
  EXPECT_EQ(back.error_map->max_error[1], INFINITY);
  EXPECT_EQ(back.error_map->mismatched, (std::vector<std::int64_t>{0, 7}));
  EXPECT_EQ(back.timings.report, 0.006);
  EXPECT_EQ(back.disposition, Disposition::memory_violation);
  EXPECT_EQ(back.violations.at(0).to_string(), r.violations.at(0).to_string());
  EXPECT_THROW(result_from_json(json{{"name", "c"}}), json::exception);
}

// merge reads results from report files that may come from anywhere: an error map whose cells
// are not the ones this tool gives its output is refused before the HTML page walks them.
TEST(ResultJson, AnErrorMapOfAnotherShapeIsRefused) {
  CaseResult r;
  r.name = "c";
  r.error_map = empty_error_map(1000, 7168);  // 64 x 128 cells
  const json good = result_json(r);
  EXPECT_EQ(result_from_json(good).error_map->max_error.size(), 64u * 128u);
  auto with = [&](const char* key, const json& value) {
    json j = good;
    j["error_map"][key] = value;
    return j;
  };
  EXPECT_THROW(result_from_json(with("rows", std::int64_t(1) << 62)),
               std::invalid_argument);  // rows * columns overflows
  EXPECT_THROW(result_from_json(with("rows", -1)), std::invalid_argument);
  EXPECT_THROW(result_from_json(with("tokens", -5)), std::invalid_argument);
  EXPECT_THROW(result_from_json(with("hidden", 99999999999)), std::invalid_argument);
  EXPECT_THROW(result_from_json(with("max_error", json::array())), std::invalid_argument);
  json no_cells = with("rows", std::int64_t(1) << 62);
  no_cells["error_map"]["max_error"] = json::array();
  no_cells["error_map"]["mismatched"] = json::array();
  EXPECT_THROW(result_from_json(no_cells), std::invalid_argument);
}

TEST(Worker, AKernelThatKillsItsProcessCostsOnlyItsCase) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                     "--backend", "cpu", "--kernel", plugin("crashes"), "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet);
  const json r = json::parse(read_file(report));
  ASSERT_EQ(r["cases"].size(), 9u);  // every case judged, none lost, in case order
  EXPECT_EQ(r["backend"], "cpu");
  for (std::size_t i = 0; i < 9; ++i) {
    const json& c = r["cases"][i];
    EXPECT_EQ(c["name"].get<std::string>().rfind("public-t17-b" + std::to_string(i), 0), 0u) << c["name"];
    if (i != 3) {
      EXPECT_EQ(c["disposition"], "passed") << c["name"] << c["detail"];
      continue;
    }
    EXPECT_EQ(c["disposition"], "error");
    const std::string detail = c["detail"];
    EXPECT_NE(detail.find("the worker process running this case"), std::string::npos) << detail;
    EXPECT_NE(detail.find("a new worker runs the remaining cases"), std::string::npos) << detail;
#ifndef __SANITIZE_ADDRESS__  // AddressSanitizer turns the signal into its own report and exit
    EXPECT_NE(detail.find("was killed by signal 11 (Segmentation fault)"), std::string::npos) << detail;
#endif
  }
}

TEST(Worker, AKernelThatHangsCostsOnlyItsCase) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const auto start = std::chrono::steady_clock::now();
  const CommandOutput out =
      run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*", "--backend", "cpu",
               "--kernel", plugin("hangs"), "--timeout", "1.5", "--json", report});
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  EXPECT_EQ(out.exit_code, kExitUnmet);
  const json r = json::parse(read_file(report));
  ASSERT_EQ(r["cases"].size(), 9u);
  for (std::size_t i = 0; i < 9; ++i) {
    const json& c = r["cases"][i];
    if (i != 3) {
      EXPECT_EQ(c["disposition"], "passed") << c["name"] << c["detail"];
      continue;
    }
    EXPECT_EQ(c["disposition"], "error");
    EXPECT_EQ(c["detail"],
              "no answer within 1.5 s (--timeout): the worker process running this case was killed; a new "
              "worker runs the remaining cases");
    EXPECT_GE(c["seconds"].get<double>(), 1.5);
  }
  // A kernel that never gets as far as its first case is the run's error, not a wait per case.
  try {
    run_cli({"run", testing::source_path("cases/public.json"), "--backend", "cpu", "--kernel", plugin("hangs_on_load"),
             "--timeout", "1"});
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the worker process gave no answer within 1 s of starting (--timeout) and was killed");
  }
  EXPECT_THROW(parse({"run", "x", "--timeout", "-1"}), UsageError);
  // -v names each worker's process as it starts: the first, and the one after the hang.
  const CommandOutput verbose =
      run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-b[234]*", "--backend", "cpu",
               "--kernel", plugin("hangs"), "--timeout", "0.5", "-v"});
  const std::regex started("worker process [0-9]+ on modelled sm_90");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(verbose.text.begin(), verbose.text.end(), started), std::sregex_iterator()), 2)
      << verbose.text;
  EXPECT_EQ(parse({"run", "x"}).backend.timeout_seconds, 900);
}

// explore, shrink and repro put an external kernel in a worker process too: a crash is a finding
// that shrinks and gets its bundle (without outputs), not the end of the command.
TEST(Worker, ExploreShrinksAKernelCrashIntoABundle) {
  TempDir dir;
  const std::string bundle = (dir.path() / "found").string();
  const CommandOutput out =
      run_cli({"explore", "--backend", "cpu", "--kernel", plugin("crashes"), "--profile", "vllm-op", "--budget", "60",
               "--seed", "3", "--max-hidden", "256", "--out", bundle});
  EXPECT_EQ(out.exit_code, kExitUnmet) << out.text;
  EXPECT_NE(out.text.find("went wrong: error"), std::string::npos) << out.text;
  const json result = json::parse(read_file(bundle + "/result.json"));
  EXPECT_EQ(result["disposition"], "error");
  EXPECT_NE(result["detail"].get<std::string>().find("the worker process running this case"), std::string::npos)
      << result;
  const json shrunk = json::parse(read_file(bundle + "/case.json"));
  EXPECT_EQ(shrunk["num_blocks"], 3);  // the plugin crashes on 3 blocks, so shrinking keeps them
  EXPECT_EQ(shrunk["T"], 1);
  EXPECT_TRUE(std::filesystem::exists(bundle + "/inputs.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(bundle + "/outputs.safetensors"));
  // The bundle's own replay line reproduces it.
  const CommandOutput replay = run_cli(
      {"run", bundle + "/case.json", "--backend", "cpu", "--kernel", plugin("crashes"), "--profile", "vllm-op"});
  EXPECT_NE(replay.text.find("1 case, 1 error"), std::string::npos) << replay.text;
  // So does its second line, the replay of the stored inputs (in a worker too).
  const CommandOutput stored = run_cli({"run", bundle + "/case.json", "--inputs", bundle + "/inputs.safetensors",
                                        "--backend", "cpu", "--kernel", plugin("crashes"), "--profile", "vllm-op"});
  EXPECT_NE(stored.text.find("1 case, 1 error"), std::string::npos) << stored.text;
  EXPECT_NE(stored.text.find("the worker process running this case"), std::string::npos) << stored.text;
}

TEST(Worker, ShrinkAndReproOfAKernelThatHangs) {
  TempDir dir;
  const std::string cases = testing::source_path("cases/public.json");
  const std::string shrunk_path = (dir.path() / "shrunk.json").string();
  const CommandOutput shrink = run_cli({"shrink", cases, "--case", "public-t17-b3-delta-write1", "--backend", "cpu",
                                        "--kernel", plugin("hangs"), "--timeout", "0.5", "--out", shrunk_path});
  EXPECT_EQ(shrink.exit_code, kExitOk) << shrink.text;
  EXPECT_NE(shrink.text.find("keeping disposition error"), std::string::npos) << shrink.text;
  const json shrunk = json::parse(read_file(shrunk_path));
  EXPECT_EQ(shrunk["num_blocks"], 3);
  EXPECT_LT(shrunk["T"].get<int>(), 17);

  const std::string bundle = (dir.path() / "repro").string();
  const CommandOutput repro = run_cli({"repro", cases, "--case", "public-t17-b3-delta-write1", "--backend", "cpu",
                                       "--kernel", plugin("hangs"), "--timeout", "0.5", "--out", bundle});
  EXPECT_EQ(repro.exit_code, kExitUnmet) << repro.text;
  const json result = json::parse(read_file(bundle + "/result.json"));
  EXPECT_EQ(result["detail"],
            "the worker process running this case gave no answer within 0.5 s (--timeout) and was killed; "
            "a new worker runs the next case");
  EXPECT_TRUE(std::filesystem::exists(bundle + "/case.json"));
  // The killed worker sent no checksums: the bundle's are those of the inputs it holds, as a run
  // in process computes them.
  const std::string in_process = (dir.path() / "in-process").string();
  run_cli({"repro", cases, "--case", "public-t17-b3-delta-write1", "--backend", "cpu", "--kernel", "portable", "--out",
           in_process});
  const json expected = json::parse(read_file(in_process + "/result.json"))["input_checksums"];
  EXPECT_EQ(expected.size(), 5u) << expected.dump();  // no output norm weight in this case
  EXPECT_EQ(result["input_checksums"], expected);
  EXPECT_NE(read_file(bundle + "/REPORT.md").find(fmt::format("`prefix`: `{}`", expected["prefix"].get<std::string>())),
            std::string::npos);
  // A passing case's bundle, written in the worker, still has the kernel's outputs.
  const std::string passing = (dir.path() / "passing").string();
  const CommandOutput ok = run_cli({"repro", cases, "--case", "public-t17-b2-write2", "--backend", "cpu", "--kernel",
                                    plugin("hangs"), "--out", passing});
  EXPECT_EQ(ok.exit_code, kExitOk) << ok.text;
  EXPECT_TRUE(std::filesystem::exists(passing + "/outputs.safetensors"));
}

TEST(Worker, ResultsAreTheSameInAWorkerAndInProcess) {
  TempDir dir;
  json reports[2];
  for (int in_process = 0; in_process < 2; ++in_process) {
    const std::string report = (dir.path() / fmt::format("r{}.json", in_process)).string();
    std::vector<std::string> args{"run",
                                  testing::source_path("cases/guard.json"),
                                  testing::source_path("cases/public.json"),
                                  "--filter",
                                  "*t3-*",
                                  "--filter",
                                  "seed*",
                                  "--backend",
                                  "cpu",
                                  "--kernel",
                                  plugin("hardcoded"),
                                  "--profile",
                                  "vllm-op",
                                  "--json",
                                  report};
    if (in_process) args.push_back("--in-process");
    run_cli(args);
    reports[in_process] = json::parse(read_file(report));
  }
  ASSERT_EQ(reports[0]["cases"].size(), 10u);
  ASSERT_EQ(reports[0]["cases"].size(), reports[1]["cases"].size());
  for (std::size_t i = 0; i < reports[0]["cases"].size(); ++i) {
    json a = reports[0]["cases"][i], b = reports[1]["cases"][i];
    for (const char* timing : {"seconds", "timings"}) {
      a.erase(timing);
      b.erase(timing);
    }
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(reports[0]["cases"][0]["disposition"], "not-rejected");  // the seed repro, caught
}

// Several workers (run --devices spreads cases this way, one per GPU): each case on whichever
// worker is free, the results in case order, a dying worker costing only its own case.
TEST(Worker, SeveralWorkersJudgeEveryCaseInCaseOrder) {
  LoadedCases loaded = load_cases({testing::source_path("cases/public.json")});
  ASSERT_TRUE(loaded.errors.empty());
  std::vector<CaseSpec> cases;
  for (CaseSpec& c : loaded.cases)
    if (c.shape.tokens <= 17) cases.push_back(std::move(c));
  ASSERT_EQ(cases.size(), 27u);
  RunOptions options;
  options.kernel = plugin("crashes");
  const BackendMaker make = [&](int, std::string&) {
    BackendOptions backend;
    backend.backend = "cpu";
    backend.kernel = options.kernel;
    std::string notes;
    return make_backend(backend, notes);
  };
  std::vector<CaseResult> results;
  std::vector<int> handed_out;
  run_in_workers(
      cases, make, WorkerPlan{{0, 0, 0}, false}, options,
      [&](int index, int, const std::string&) { handed_out.push_back(index); },
      [&](const CaseResult& r) { results.push_back(r); });
  ASSERT_EQ(results.size(), cases.size());
  std::sort(handed_out.begin(), handed_out.end());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(handed_out[i], int(i));
    EXPECT_EQ(results[i].name, cases[i].name);
    // The crashing plugin segfaults on num_blocks 3 (public-t1-b3-*, public-t3-b3-*, public-t17-b3-*).
    if (cases[i].shape.num_blocks == 3) {
      EXPECT_EQ(results[i].disposition, Disposition::error) << results[i].name;
      EXPECT_NE(results[i].detail.find("the worker process running this case"), std::string::npos) << results[i].detail;
    } else {
      EXPECT_EQ(results[i].disposition, Disposition::passed) << results[i].name << ": " << results[i].detail;
    }
  }
}

// On the GPU (ctest label gpu).

// --devices: two workers sharing the one device (and "all": one per device there is) report what
// one process reports, in case order, each case naming the device that ran it.
TEST_F(Gpu, WorkersPerDeviceReportWhatOneProcessReports) {
  const std::vector<std::string> base{"run",
                                      testing::source_path("cases/public.json"),
                                      testing::source_path("cases/guard.json"),
                                      "--filter",
                                      "public-t3-*",
                                      "--filter",
                                      "seed*"};
  const BinaryRun single = run_binary(base);
  ASSERT_EQ(single.exit_code, kExitOk) << single.output;
  for (const char* devices : {"0,0", "all"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--devices", devices});
    const BinaryRun spread = run_binary(args);
    EXPECT_EQ(spread.exit_code, kExitOk) << spread.output;
    ASSERT_EQ(spread.report["cases"].size(), single.report["cases"].size()) << spread.output;
    for (std::size_t i = 0; i < single.report["cases"].size(); ++i) {
      nlohmann::json a = single.report["cases"][i], b = spread.report["cases"][i];
      for (const char* varying : {"seconds", "timings"}) {
        a.erase(varying);
        b.erase(varying);
      }
      EXPECT_EQ(a, b) << devices;
    }
    EXPECT_EQ(spread.report["device"], single.report["device"]) << devices;
  }
  const BinaryRun missing = run_binary({"run", testing::source_path("cases/guard.json"), "--devices", "0,7"});
  EXPECT_EQ(missing.exit_code, kExitBadInput) << missing.output;
  EXPECT_NE(missing.output.find("--device 7: this process sees"), std::string::npos) << missing.output;
}

TEST(SanitizerReport, ErrorsAreCountedAndTheFirstIsNamed) {
  TempDir dir;
  const std::string races =
      dir.file("races.txt",
               "========= COMPUTE-SANITIZER\n"
               "========= Error: Race reported between Write access at k(Operands)+0x1a0 in a.cu:60\n"
               "=========     and Read access at k(Operands)+0x1f0 in a.cu:63 [8 hazards]\n"
               "=========\n"
               "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n");
  const std::optional<SanitizerReport> report = read_sanitizer_report(races);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->errors, 1);
  EXPECT_EQ(report->first_error, "Error: Race reported between Write access at k(Operands)+0x1a0 in a.cu:60");
  EXPECT_EQ(report->summary, "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)");
  CaseResult result;
  result.disposition = Disposition::passed;
  result.detail = "max-abs error 0.01";
  const CaseResult raced = with_sanitizer_verdict(result, "racecheck", 0, races);
  EXPECT_EQ(raced.disposition, Disposition::hazard);
  EXPECT_EQ(raced.detail,
            "compute-sanitizer racecheck: Error: Race reported between Write access at k(Operands)+0x1a0 in a.cu:60; "
            "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings) (report: " +
                races + "); judged under it, the case was passed: max-abs error 0.01");
  // Warnings only: no hazard.
  const std::string warned = dir.file("warned.txt",
                                      "========= Warning: Race reported between Read access at k+0x10\n"
                                      "========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)\n");
  EXPECT_EQ(read_sanitizer_report(warned)->errors, 0);
  EXPECT_EQ(with_sanitizer_verdict(result, "racecheck", 0, warned).disposition, Disposition::passed);
  // The exit status alone says it found one, where the report cannot be read.
  EXPECT_EQ(with_sanitizer_verdict(result, "memcheck", kSanitizerErrorExit, dir.path() / "missing.txt").disposition,
            Disposition::hazard);
  EXPECT_FALSE(read_sanitizer_report(dir.path() / "missing.txt"));
}

// run --sanitizer with compute-sanitizer stood in for by tests/workers/fake_compute_sanitizer.sh,
// which reports an error on the runs FAKE_SANITIZER_HAZARD names. What runs under it is the real
// worker: this build's binary, started once per case.
class Sanitizer : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("ATTNRES_COMPUTE_SANITIZER", testing::source_path("tests/workers/fake_compute_sanitizer.sh").c_str(), 1);
    setenv("FAKE_SANITIZER_STATE", state_.path().c_str(), 1);
    setenv("FAKE_SANITIZER_HAZARD", "", 1);
  }
  void TearDown() override {
    for (const char* name : {"ATTNRES_COMPUTE_SANITIZER", "FAKE_SANITIZER_STATE", "FAKE_SANITIZER_HAZARD", "TMPDIR"})
      unsetenv(name);
  }
  std::string runs(const char* file) const { return read_file(state_.path() / file); }

  TempDir state_;
  // On a CPU kernel behind the C ABI, which runs without a GPU.
  const std::vector<std::string> three_cases_{
      "run", testing::source_path("cases/public.json"), "--filter", "public-t1-b[0-2]*", "--kernel", plugin("ok")};
};

TEST_F(Sanitizer, AnErrorInItsReportIsTheHazardOfThatCaseAlone) {
  setenv("FAKE_SANITIZER_HAZARD", "2", 1);
  TempDir reports;
  std::vector<std::string> args = three_cases_;
  args.insert(args.end(), {"--sanitizer", "memcheck", "--sanitizer-reports", (reports.path() / "r").string(), "--check",
                           "determinism"});
  const BinaryRun run = run_binary(args);
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  ASSERT_EQ(run.report["cases"].size(), 3u) << run.output;
  EXPECT_EQ(runs("count"), "3\n");  // a process per case
  EXPECT_EQ(runs("tools"), "memcheck\nmemcheck\nmemcheck\n");
  const std::vector<std::string> names{"public-t1-b0", "public-t1-b1-delta", "public-t1-b2-norm"};
  for (std::size_t i = 0; i < 3; ++i) {
    const json& c = run.report["cases"][i];
    EXPECT_EQ(c["name"], names[i]);
    EXPECT_EQ(c["disposition"], i == 1 ? "hazard" : "passed") << c["detail"];
    // The worker ran the case with the run's options.
    ASSERT_EQ(c["properties"].size(), 1u);
    EXPECT_EQ(c["properties"][0]["check"], "determinism");
    EXPECT_TRUE(std::filesystem::is_regular_file(reports.path() / "r" / (names[i] + ".txt"))) << names[i];
  }
  const std::string report = (reports.path() / "r" / "public-t1-b1-delta.txt").string();
  EXPECT_EQ(run.report["cases"][1]["detail"].get<std::string>().rfind(
                "compute-sanitizer memcheck: Invalid __global__ read of size 4 bytes at stray_read_kernel(const float "
                "*)+0x70 in cuda_plugin.cu:190; ERROR SUMMARY: 1 error (report: " +
                    report + "); judged under it, the case was passed: ",
                0),
            0u)
      << run.report["cases"][1]["detail"];
  EXPECT_EQ(run.report["summary"]["by_disposition"]["hazard"], 1);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(reports.path() / "r")) ++files;
  EXPECT_EQ(files, 3u);
}

// A hazard's bundle holds the report and replays under the same tool; writing it does not run the
// kernel again (compute-sanitizer alone sees the hazard).
TEST_F(Sanitizer, AHazardIsBundledWithItsReportAndReplaysUnderTheTool) {
  setenv("FAKE_SANITIZER_HAZARD", "3", 1);
  TempDir dir;
  const auto reports = dir.path() / "reports", bundles = dir.path() / "repro";
  std::vector<std::string> args = three_cases_;
  args.insert(args.end(),
              {"--sanitizer", "initcheck", "--sanitizer-reports", reports.string(), "--repro-dir", bundles.string()});
  const BinaryRun run = run_binary(args);
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  EXPECT_EQ(runs("count"), "3\n");
  const json& hazard = run.report["cases"][2];
  EXPECT_EQ(hazard["disposition"], "hazard");
  EXPECT_EQ(hazard["sanitizer"],
            (json{{"tool", "initcheck"}, {"report", (reports / "public-t1-b2-norm.txt").string()}}));
  EXPECT_FALSE(run.report["cases"][0].contains("sanitizer"));

  const json index = json::parse(read_file(bundles / "index.json"));
  ASSERT_EQ(index["bundles"].size(), 1u) << run.output;
  EXPECT_EQ(index["bundles"][0]["bundle_disposition"], "hazard");
  const auto bundle = bundles / index["bundles"][0]["dir"].get<std::string>();
  EXPECT_EQ(read_file(bundle / "compute-sanitizer-initcheck.txt"), read_file(reports / "public-t1-b2-norm.txt"));
  const json recorded = json::parse(read_file(bundle / "result.json"));
  EXPECT_EQ(recorded["disposition"], "hazard");
  EXPECT_EQ(recorded["sanitizer"]["report"], "compute-sanitizer-initcheck.txt");
  const std::string replay = read_file(bundle / "replay.sh");
  EXPECT_NE(replay.find("run case.json --kernel " + plugin("ok") + " --sanitizer initcheck\n"), std::string::npos)
      << replay;
  EXPECT_EQ(replay.find("--inputs"), std::string::npos) << replay;
  EXPECT_NE(read_file(bundle / "REPORT.md").find("`compute-sanitizer-initcheck.txt` is compute-sanitizer initcheck's"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(bundle / "outputs.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(bundle / "inputs.safetensors"));
}

// Without --sanitizer-reports the reports go to a new directory under $TMPDIR that keeps the
// hazards' reports only, and is removed when there is none.
TEST_F(Sanitizer, OnlyTheReportsOfHazardsAreKept) {
  TempDir tmp;
  setenv("TMPDIR", tmp.path().c_str(), 1);
  std::vector<std::string> args = three_cases_;
  args.insert(args.end(), {"--sanitizer", "racecheck"});
  const BinaryRun clean = run_binary(args);
  EXPECT_EQ(clean.exit_code, kExitOk) << clean.output;
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
  EXPECT_EQ(clean.output.find("compute-sanitizer racecheck reports"), std::string::npos) << clean.output;

  setenv("FAKE_SANITIZER_HAZARD", "4 6", 1);  // this run's first and third case
  const BinaryRun found = run_binary(args);
  EXPECT_EQ(found.exit_code, kExitUnmet) << found.output;
  std::vector<std::string> kept;
  for (const auto& dir : std::filesystem::directory_iterator(tmp.path()))
    for (const auto& report : std::filesystem::directory_iterator(dir.path()))
      kept.push_back(dir.path().filename().string().substr(0, 24) + "/" + report.path().filename().string());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"attnres-check-sanitizer-/public-t1-b0.txt",
                                            "attnres-check-sanitizer-/public-t1-b2-norm.txt"}));
  EXPECT_NE(found.output.find("compute-sanitizer racecheck reports of the cases with a hazard: " + tmp.path().string()),
            std::string::npos)
      << found.output;
}

TEST_F(Sanitizer, WhatItCannotTakePartInIsRefused) {
  const auto refusal = [&](std::vector<std::string> more) {
    std::vector<std::string> args = three_cases_;
    args.insert(args.end(), more.begin(), more.end());
    try {
      run_cli(args);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({"--sanitizer", "memcheck", "--backend", "cpu"}),
            "--sanitizer checks what runs on a CUDA device; --backend cpu runs nothing there");
  EXPECT_EQ(refusal({"--sanitizer", "memcheck", "--in-process"}),
            "--sanitizer runs each case in a worker process; --in-process excludes it");
  EXPECT_EQ(refusal({"--sanitizer-reports", "x"}), "--sanitizer-reports goes with --sanitizer");
  EXPECT_NE(refusal({"--sanitizer", "leakcheck"})
                .find("--sanitizer: leakcheck not in {memcheck,racecheck,synccheck,"
                      "initcheck}"),
            std::string::npos)
      << refusal({"--sanitizer", "leakcheck"});
  setenv("ATTNRES_COMPUTE_SANITIZER", "/nonexistent/compute-sanitizer", 1);
  EXPECT_EQ(refusal({"--sanitizer", "memcheck"}),
            "--sanitizer: ATTNRES_COMPUTE_SANITIZER=/nonexistent/compute-sanitizer is not an executable file");
}

TEST_F(Gpu, AnIllegalAddressCostsOnlyItsCase) {
  expect_only_the_three_block_case_lost("faults", {}, [](const std::string& detail) {
    EXPECT_NE(detail.find("illegal memory access"), std::string::npos) << detail;
  });
}

// SIGKILL ends a worker whose kernel never finishes; the driver tears its context down, and the
// next worker's context runs the remaining cases.
TEST_F(Gpu, AKernelThatHangsCostsOnlyItsCase) {
  expect_only_the_three_block_case_lost("hangs", {"--timeout", "10"}, [](const std::string& detail) {
    EXPECT_EQ(detail,
              "no answer within 10 s (--timeout): the worker process running this case was killed; a new worker "
              "runs the remaining cases");
  });
}

}  // namespace
}  // namespace attnres
