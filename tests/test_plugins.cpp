// External kernels behind the C ABI: the in-tree test plugins (tests/plugins/cpu_plugin.cpp)
// run the bundled cases; the seed bug is caught; broken plugins are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/commands.h"
#include "test_util.h"

namespace attnres {
namespace {

using testing::read_file;
using testing::run_cli;

using nlohmann::json;
using testing::TempDir;

std::string plugin(const std::string& variant) {
  return std::string("so:") + ATTNRES_PLUGIN_DIR + "/libattnres_plugin_test_" + variant + ".so";
}

using testing::usage_error;

const std::vector<std::string> kBundled = {testing::source_path("cases/public.json"), testing::source_path("cases/guard.json"),
                                           testing::source_path("cases/fallback.json"),
                                           testing::source_path("cases/portable-padded.json")};

TEST(Plugins, TheFixedKernelMeetsEveryExpectation) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string(), junit = (dir.path() / "r.xml").string();
  std::vector<std::string> args{"run"};
  args.insert(args.end(), kBundled.begin(), kBundled.end());
  args.insert(args.end(), {"--backend", "cpu", "--kernel", plugin("ok"), "--json", report, "--junit", junit});
  const CommandOutput out = run_cli(args);
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  EXPECT_NE(out.notes.find("12 cases pinned to the built-in portable kernel left out"), std::string::npos) << out.notes;
  // The note counts the selected cases it leaves out, not every loaded one.
  std::vector<std::string> filtered{"run"};
  filtered.insert(filtered.end(), kBundled.begin(), kBundled.end());
  filtered.insert(filtered.end(), {"--backend", "cpu", "--kernel", plugin("ok"), "--filter", "seed-repro", "--filter",
                                   "portable-padded-t1-b1"});
  const CommandOutput few = run_cli(filtered);
  EXPECT_NE(few.notes.find("1 case pinned to the built-in portable kernel left out"), std::string::npos) << few.notes;
  EXPECT_NE(few.text.find("1 case, 1 rejected-as-expected"), std::string::npos) << few.text;
  const json r = json::parse(read_file(report));
  EXPECT_EQ(r["kernel"], plugin("ok"));
  EXPECT_EQ(r["summary"]["total"], 36 + 5 + 5);  // public, guard, fallback
  EXPECT_EQ(r["summary"]["by_disposition"]["rejected-as-expected"], 4);
  for (const json& c : r["cases"]) {
    EXPECT_EQ(c["kernel"], plugin("ok"));
    if (c["name"] == "seed-repro-prefix-stride-7175")
      EXPECT_EQ(c["rejection"], "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168");
  }
  EXPECT_NE(read_file(junit).find("<property name=\"kernel\" value=\"" + plugin("ok") + "\"/>"), std::string::npos);
}

TEST(Plugins, TheHardCodedStrideIsCaughtOnTheSeedRepro) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/guard.json"), "--filter", "seed*", "--backend", "cpu",
                                     "--kernel", plugin("hardcoded"), "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet);
  const json c = json::parse(read_file(report))["cases"][0];
  EXPECT_EQ(c["disposition"], "not-rejected");
  EXPECT_GT(c["comparison"]["max_abs_error"].get<double>(), 3.0);  // against atol 0.08
  EXPECT_GT(c["comparison"]["mismatched"].get<std::int64_t>(), 1000000);
  EXPECT_EQ(c["violations"][0]["tensor"], "prefix");
  EXPECT_EQ(c["violations"][0]["kind"], "padding canary overwritten");
  // On dense rows the same kernel is right: the bug is the stride alone.
  EXPECT_EQ(run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*", "--backend", "cpu", "--kernel",
                     plugin("hardcoded")})
                .exit_code,
            kExitOk);
}

// The ABI says a refusal touched no operand; the tool checks it. A kernel that runs the seed bug
// and then refuses with the exact message is a memory violation, never rejected-as-expected.
TEST(Plugins, DamageThenARefusalIsAMemoryViolation) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--kernel",
                                     plugin("damages_then_refuses"), "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet) << out.text;
  int refused = 0;
  const json written = json::parse(read_file(report));
  for (const json& c : written["cases"]) {
    if (c["rejection"].is_null()) continue;
    ++refused;
    EXPECT_EQ(c["disposition"], "memory-violation") << c["name"];
    ASSERT_FALSE(c["violations"].empty()) << c["name"];
    const std::string detail = c["detail"].get<std::string>();
    EXPECT_NE(detail.find("refused with \"Kimi K3 AttnRes requires densely packed rows"), std::string::npos) << detail;
    EXPECT_NE(detail.find("written although the kernel refused"), std::string::npos) << detail;
  }
  EXPECT_EQ(refused, 4);
  // The fixed kernel's refusals leave everything as it was.
  EXPECT_EQ(run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--kernel", plugin("ok")}).exit_code,
            kExitOk);
}

// fmaxf(NaN, x) is x: a kernel that reads its output before writing it is right after the NaN
// poison. The call before it, on a finite poison, shows it.
TEST(Plugins, AKernelThatReadsItsOutputFails) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-*", "--backend",
                                     "cpu", "--kernel", plugin("reads_output"), "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet) << out.text;
  const json written = json::parse(read_file(report));
  ASSERT_FALSE(written["cases"].empty());
  for (const json& c : written["cases"]) {
    EXPECT_EQ(c["disposition"], "failed") << c["name"];
    EXPECT_EQ(c["comparison"]["mismatched"], 0) << c["name"];  // the judged output alone is right
    EXPECT_NE(c["detail"].get<std::string>().find("its output depends on what the output held before the call"),
              std::string::npos)
        << c["detail"];
  }
}

// +0.07 on every element is inside atol 8e-2, yet a correct bf16 kernel's errors average out:
// the mean error against the reference's bf16 spacing tells them apart.
TEST(Plugins, ABiasInsideTheToleranceFails) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*", "--backend",
                                     "cpu", "--kernel", plugin("biased"), "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet) << out.text;
  const json written = json::parse(read_file(report));
  ASSERT_FALSE(written["cases"].empty());
  int inside_tolerance = 0;
  for (const json& c : written["cases"]) {
    EXPECT_EQ(c["disposition"], "failed") << c["name"];
    EXPECT_TRUE(c["comparison"]["systematic"].get<bool>()) << c["name"];
    EXPECT_NEAR(c["comparison"]["mean_error"].get<double>(), 0.07, 0.01) << c["name"];
    EXPECT_NE(c["detail"].get<std::string>().find("systematic error: out - ref averages +0.07"), std::string::npos)
        << c["detail"];
    inside_tolerance += c["comparison"]["mismatched"] == 0;
  }
  EXPECT_GT(inside_tolerance, 0);
  // The fixed kernel on the same cases: no bias.
  const CommandOutput fixed = run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                       "--backend", "cpu", "--kernel", plugin("ok"), "--json", report});
  EXPECT_EQ(fixed.exit_code, kExitOk) << fixed.text;
  const json fixed_report = json::parse(read_file(report));
  for (const json& c : fixed_report["cases"]) {
    EXPECT_FALSE(c["comparison"]["systematic"].get<bool>()) << c["name"];
    EXPECT_LT(std::fabs(c["comparison"]["mean_error"].get<double>()), c["comparison"]["mean_spacing"].get<double>());
  }
}

TEST(Plugins, BrokenPluginsAreClearErrors) {
  const std::string cases = testing::source_path("cases/guard.json");
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", plugin("wrong_abi")})
                .find("built for kernel ABI version 999, this attnres-check speaks version 1"),
            std::string::npos);
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", plugin("ok") + ":nosuch"}).find("no symbol nosuch_info"),
            std::string::npos);
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", "so:/nonexistent/libk.so"}).find("cannot load the library"),
            std::string::npos);
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", "mine"}).find("unknown kernel \"mine\""), std::string::npos);
}

TEST(Plugins, AFailingPluginCostsOnlyItsCases) {
  TempDir dir;
  for (const auto& [variant, message] : {std::pair<std::string, std::string>{"throws", "threw an exception: test plugin: thrown on purpose"},
                                         {"fails", "returned 2: test plugin: failed on purpose"}}) {
    const std::string report = (dir.path() / (variant + ".json")).string();
    const CommandOutput out = run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--kernel",
                                       plugin(variant), "--json", report});
    EXPECT_EQ(out.exit_code, kExitUnmet);
    const json r = json::parse(read_file(report));
    ASSERT_EQ(r["cases"].size(), 5u);  // every case judged, none lost
    for (const json& c : r["cases"]) {
      EXPECT_EQ(c["disposition"], "error") << c["name"];
      EXPECT_NE(c["detail"].get<std::string>().find(message), std::string::npos) << c["detail"];
    }
  }
}

TEST(Plugins, ReplayShQuotesAPluginPathAsOneWord) {
  TempDir dir;
  const auto odd = dir.path() / "it's a dir";
  std::filesystem::create_directories(odd);
  const std::string library = (odd / "libk.so").string();
  std::filesystem::copy_file(plugin("ok").substr(3), library);
  const auto bundle = dir.path() / "bundle";
  run_cli({"repro", testing::source_path("cases/guard.json"), "--case", "guard-padded-blocks-ok", "--out", bundle.string(),
           "--backend", "cpu", "--kernel", "so:" + library});
  // replay.sh run by sh with a stand-in binary that prints each argument it gets on a line.
  const auto arguments = dir.path() / "arguments.sh";
  std::ofstream(arguments) << "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n";
  std::filesystem::permissions(arguments, std::filesystem::perms::owner_all);
  const std::string command = fmt::format("cd '{}' && ATTNRES_CHECK='{}' sh replay.sh", bundle.string(), arguments.string());
  std::string printed;
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) printed += buffer;
  ASSERT_EQ(pclose(pipe), 0) << printed;
  EXPECT_NE(printed.find("[so:" + library + "]\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("[inputs.safetensors]\n"), std::string::npos) << printed;
}

TEST(Plugins, ReproAndShrinkFollowTheKernel) {
  TempDir dir;
  const auto bundle = dir.path() / "bundle";
  const CommandOutput repro = run_cli({"repro", testing::source_path("cases/guard.json"), "--case", "seed-repro-prefix-stride-7175",
                                       "--out", bundle.string(), "--backend", "cpu", "--kernel", plugin("hardcoded")});
  EXPECT_EQ(repro.exit_code, kExitUnmet);
  EXPECT_NE(read_file(bundle / "replay.sh").find("--kernel " + plugin("hardcoded") + " "), std::string::npos);
  EXPECT_EQ(json::parse(read_file(bundle / "environment.json"))["kernel"], plugin("hardcoded"));
  EXPECT_NE(read_file(bundle / "REPORT.md").find("- kernel: " + plugin("hardcoded")), std::string::npos);

  const std::string small = (dir.path() / "small.json").string();
  const CommandOutput shrink = run_cli({"shrink", testing::source_path("cases/guard.json"), "--case", "seed-repro-prefix-stride-7175",
                                        "--out", small, "--backend", "cpu", "--kernel", plugin("hardcoded")});
  EXPECT_EQ(shrink.exit_code, kExitOk) << shrink.text;
  const json c = json::parse(read_file(small));
  EXPECT_LT(c["T"].get<int>(), 320);
  EXPECT_EQ(run_cli({"run", small, "--backend", "cpu", "--kernel", plugin("hardcoded"), "--interesting", "not-rejected"}).exit_code,
            kExitOk);
  // The shrunk case is a regression test: a kernel that refuses the layout meets it, and it expects
  // the refusal of the shrunk layout, not the original's.
  const std::int64_t hidden = c["H"], stride = c["tensors"]["prefix"]["row_stride"];
  EXPECT_EQ(c["expect"]["message"], fmt::format("Kimi K3 AttnRes requires densely packed rows; got strides {}, {}, {} for hidden_size {}",
                                                stride, c["has_delta"].get<bool>() ? std::to_string(hidden) : "none", hidden, hidden));
  EXPECT_EQ(run_cli({"run", small, "--backend", "cpu", "--kernel", plugin("ok")}).exit_code, kExitOk);

  // Here the kernel's answer is right (one token: the hard-coded stride is never used), so only
  // the missing refusal is the bug: shrinking keeps the padding the guard refuses.
  const std::string no_delta = (dir.path() / "no-delta.json").string();
  ASSERT_EQ(run_cli({"shrink", testing::source_path("cases/guard.json"), "--case", "guard-no-delta-prefix-stride", "--out", no_delta,
                     "--backend", "cpu", "--kernel", plugin("hardcoded")})
                .exit_code,
            kExitOk);
  const json d = json::parse(read_file(no_delta));
  EXPECT_GT(d["tensors"]["prefix"]["row_stride"].get<std::int64_t>(), d["H"].get<std::int64_t>());
  EXPECT_EQ(run_cli({"run", no_delta, "--backend", "cpu", "--kernel", plugin("ok")}).exit_code, kExitOk);
  EXPECT_EQ(run_cli({"run", no_delta, "--backend", "cpu", "--kernel", plugin("hardcoded")}).exit_code, kExitUnmet);
}

}  // namespace
}  // namespace attnres
