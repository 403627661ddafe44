// bench's printers on results made by hand: what each format says about a point where the native
// kernel ran with PDL and every plan and the kernel under test refused, and about one where the
// native kernel did not run and the kernel under test was timed with events.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "app/bench/bench_printers.h"
#include "tests/cuda_test_support.h"

namespace attnres {
namespace {

BenchResults sample() {
  BenchResults results;
  results.device = "NVIDIA H100 80GB HBM3";
  results.arch = "sm_90";
  results.hidden = 1024;
  results.repeats = 50;
  results.pdl = true;
  results.copy_bandwidth = 3e12;
  results.kernel = "so:/k.so";
  results.plans = {"ring", "split/1x2"};
  BenchPoint native;
  native.tokens = 320;
  native.num_blocks = 4;
  native.hidden = 1024;
  native.bytes = 6e6;  // 3 TB/s at 2 µs
  native.same_bytes_copy_ms = 0.0015;
  native.cublas_reference_ms = 0.7;
  native.portable = {"ok (max-abs 0.0156)", 0.004, "graph"};
  native.native.measured = Measurement{"ok (max-abs 0.0156)", 0.002, "graph"};
  native.native_plan = "split/1x2";
  native.native_pdl = Measurement{"ok (max-abs 0.0156)", 0.0019, "graph"};
  native.native_plans = {
      {"ring", {"INCORRECT: max-abs 9", 0.0025, "graph"}, Measurement{"ok (max-abs 0.0156)", 0.0023, "graph"}},
      {"split/1x2", {"ok (max-abs 0.0156)", 0.002, "graph"}, Measurement{"INCORRECT: max-abs 7", 0.0018, "graph"}}};
  native.kernel = KernelAtPoint{Measurement{"REFUSED: padded rows", std::nullopt, "graph"}, ""};
  BenchPoint without_native = native;
  without_native.tokens = 1;
  without_native.native = KernelAtPoint{std::nullopt, "no native image for sm_80"};
  without_native.native_plan.clear();
  without_native.native_pdl.reset();
  without_native.native_plans.clear();
  without_native.kernel = KernelAtPoint{Measurement{"ok (max-abs 0.01)", 0.006, "events"}, ""};
  results.points = {native, without_native};
  return results;
}

TEST(BenchPrinters, MarkdownRowsSayEachKernelsTimeCheckAndPlan) {
  const std::string markdown = bench_markdown(sample());
  EXPECT_NE(markdown.find("Device NVIDIA H100 80GB HBM3 (sm_90), H=1024"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("copy bandwidth 3.00 TB/s"), std::string::npos);
  EXPECT_NE(markdown.find("Kernel under test (`so:/k.so`)"), std::string::npos);
  EXPECT_NE(markdown.find("| 320 | 4 | 6.0 | 1.5 | split/1x2 | 2.0 | 3.00 | 100.0% | 1.9 | 4.0 | 1.50 | 2.00x | n/a | "
                          "n/a | n/a | n/a | 0.7 | native ok (max-abs 0.0156), portable ok (max-abs 0.0156), kernel "
                          "REFUSED: padded rows |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| 1 | 4 | 6.0 | 1.5 | n/a | n/a | n/a | n/a | n/a | 4.0 | 1.50 | n/a | 6.0 | 1.00 | 33.3% | "
                          "events | 0.7 | portable ok (max-abs 0.0156), kernel ok (max-abs 0.01) |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| T | blocks | ring | split/1x2 |"), std::string::npos);
  EXPECT_NE(markdown.find("Every plan of the native kernel, median µs, without / with PDL"), std::string::npos);
  EXPECT_NE(markdown.find("| 320 | 4 | 2.5 INCORRECT / 2.3 | 2.0* / 1.8 INCORRECT |"), std::string::npos) << markdown;
  EXPECT_EQ(markdown.find("| 1 | 4 | 2."), std::string::npos) << "a point without the native kernel has no plan row";
}

TEST(BenchPrinters, JsonHoldsEveryMeasurementAndWhyOneDidNotRun) {
  const nlohmann::json report = nlohmann::json::parse(bench_json(sample()));
  EXPECT_EQ(report["schema"], "attnres-check/bench");
  EXPECT_EQ(report["repeats"], 50);
  const nlohmann::json& first = report["points"].at(0);
  EXPECT_DOUBLE_EQ(first["native"]["median_us"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(first["native"]["bytes_per_s"].get<double>(), 3e12);
  EXPECT_DOUBLE_EQ(first["native"]["fraction_of_copy"].get<double>(), 1.0);
  EXPECT_EQ(first["native"]["plan"], "split/1x2");
  EXPECT_DOUBLE_EQ(first["native_pdl"]["median_us"].get<double>(), 1.9);
  EXPECT_EQ(first["native_plans"]["ring"]["check"], "INCORRECT: max-abs 9");
  EXPECT_DOUBLE_EQ(first["native_plans"]["ring"]["pdl"]["median_us"].get<double>(), 2.3);
  EXPECT_EQ(first["native_plans"]["split/1x2"]["pdl"]["check"], "INCORRECT: max-abs 7");
  EXPECT_DOUBLE_EQ(first["same_bytes_copy_us"].get<double>(), 1.5);
  EXPECT_EQ(first["kernel"]["check"], "REFUSED: padded rows");
  EXPECT_FALSE(first["kernel"].contains("median_us"));
  const nlohmann::json& second = report["points"].at(1);
  EXPECT_EQ(second["native"]["not_run"], "no native image for sm_80");
  EXPECT_FALSE(second.contains("native_pdl"));
  EXPECT_FALSE(second.contains("native_plans"));
  EXPECT_EQ(second["kernel"]["timed"], "events");
  EXPECT_DOUBLE_EQ(second["kernel"]["median_us"].get<double>(), 6.0);
}

TEST(BenchPrinters, CsvHasOneRowPerPointWithEmptyCellsWhereNothingWasTimed) {  // RFC 4180 line ends
  const std::string csv = bench_csv(sample());
  EXPECT_EQ(csv,
            "tokens,num_blocks,hidden,bytes,copy_bandwidth,same_bytes_copy_us,native_plan,native_us,native_bytes_per_s,"
            "native_pdl_us,portable_us,portable_bytes_per_s,kernel,kernel_us,kernel_bytes_per_s,cublas_reference_ms\r\n"
            "320,4,1024,6000000,3000000000000,1.5,split/1x2,2,3000000000000,1.9,4,1500000000000,so:/k.so,,,0.7\r\n"
            "1,4,1024,6000000,3000000000000,1.5,,,,,4,1500000000000,so:/k.so,6,1000000000000,0.7\r\n");
}

// On the GPU (ctest label gpu).

// bench judges each kernel before timing it: the check must cover the output (a float64
// reference never equals a bf16 output everywhere, so max-abs is above zero) and every plan.
TEST_F(Gpu, BenchChecksEveryTimedKernelAgainstTheReference) {
  testing::TempDir dir;
  const std::string json_path = (dir.path() / "bench.json").string();
  testing::run_cli({"bench", "--tokens", "5", "--blocks", "3", "--hidden", "1024", "--repeats", "3", "--native-plans",
                    "--pdl", "--json", json_path});
  const nlohmann::json point = nlohmann::json::parse(testing::read_file(json_path))["points"].at(0);
  std::vector<std::string> checks{point["portable"]["check"].get<std::string>()};
  if (native_here()) {
    checks.push_back(point["native"]["check"].get<std::string>());
    checks.push_back(point["native_pdl"]["check"].get<std::string>());
    EXPECT_EQ(point["native_plans"].size(), native::all_plans(1024).size());
    for (const auto& plan : point["native_plans"].items()) {
      checks.push_back(plan.value()["check"].get<std::string>());
      checks.push_back(plan.value()["pdl"]["check"].get<std::string>());
    }
  }
  for (const std::string& check : checks) {
    double max_abs = -1;
    ASSERT_EQ(std::sscanf(check.c_str(), "ok (max-abs %lf)", &max_abs), 1) << check;
    EXPECT_GT(max_abs, 0.0) << check;
    EXPECT_LT(max_abs, 0.08) << check;
  }
  // The floor of a point: a copy of its bytes, timed; the portable kernel moves the same bytes
  // and computes too.
  const double copy_us = point["same_bytes_copy_us"].get<double>();
  EXPECT_GT(copy_us, 0.0);
  EXPECT_LT(copy_us, point["portable"]["median_us"].get<double>());
}

// bench --kernel times an external kernel as it times the built-ins, by graph replay, where its
// calls can be captured as its framework captures them: a C ABI kernel, and a Triton kernel under
// torch.cuda.graph (both its designs: the tile with 3 blocks, the row kernel with 6), launched
// with PDL too. A kernel that reads the weights on the host cannot be captured, and is timed with
// events.
TEST_F(Gpu, BenchTimesExternalKernelsByGraphReplayWhereTheyCanBeCaptured) {
  struct Timed {
    std::vector<std::string> kernel;
    std::string timed;
  };
  const std::vector<Timed> kernels{
      {{cuda_plugin("ok")}, "graph"},
      {{"python:attnres_python_test:attn_res_triton_peer", "--signature", "flashinfer"}, "graph"},
      {{"python:attnres_python_test:attn_res_triton_peer_pdl", "--signature", "flashinfer"}, "graph"},
      {{"python:attnres_python_test:attn_res_checks_on_host"}, "events"}};
  for (const auto& [kernel_args, timed] : kernels) {
    const std::string& kernel = kernel_args.front();
    if (kernel.rfind("python:", 0) == 0 && !ATTNRES_HAVE_PYTHON_BRIDGE) continue;
    std::vector<std::string> args{"bench",    "--tokens", "5",        "--tokens", "300",       "--blocks", "3",
                                  "--blocks", "6",        "--hidden", "1024",     "--repeats", "20",       "--kernel"};
    args.insert(args.end(), kernel_args.begin(), kernel_args.end());
    const BinaryRun run = run_binary(args);
    ASSERT_EQ(run.exit_code, kExitOk) << kernel << run.output;
    ASSERT_EQ(run.report["points"].size(), 4u) << kernel << run.output;
    for (const auto& point : run.report["points"]) {
      const nlohmann::json& measured = point["kernel"];
      double max_abs = -1;
      ASSERT_EQ(std::sscanf(measured["check"].get<std::string>().c_str(), "ok (max-abs %lf)", &max_abs), 1)
          << kernel << measured;
      EXPECT_LT(max_abs, 0.08) << kernel << measured;
      EXPECT_EQ(measured["timed"], timed) << kernel << measured;
      EXPECT_GT(measured["median_us"].get<double>(), 0.0) << kernel << measured;
    }
  }
}

}  // namespace
}  // namespace attnres
