// External kernels behind the C ABI: the in-tree test plugins (tests/plugins/cpu_plugin.cpp)
// run the bundled cases; the seed bug is caught; broken plugins are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/casefile/case_spec.h"
#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/workers/sanitizer.h"
#include "tests/cuda_test_support.h"
#include "tests/test_util.h"

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

// Every padded and viewed layout the bundled cases hold, and the public cases: what tells a
// kernel that takes every stride from one that hard-codes it or refuses it.
std::vector<std::string> layout_cases() {
  return {testing::source_path("cases/public.json"),
          testing::source_path("cases/guard.json"),
          testing::source_path("cases/layouts.json"),
          testing::source_path("cases/portable-padded.json"),
          testing::source_path("cases/flashinfer/row-padded-64.json"),
          testing::source_path("cases/vllm")};
}

CommandOutput run_on(const std::string& kernel, std::vector<std::string> extra) {
  std::vector<std::string> args{"run"};
  for (const std::string& path : layout_cases()) args.push_back(path);
  args.insert(args.end(), {"--backend", "cpu", "--kernel", kernel});
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

// The fixed kernel refuses rows that are not densely packed, as vLLM's op must. Declared so (the
// vllm-op preset, or the same in a profile file), every case is judged on it, the padded ones
// pinned to a built-in kernel too, and the gate is green; undeclared, its refusals fail.
TEST(Plugins, TheFixedKernelMeetsEveryExpectationItDeclares) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string(), junit = (dir.path() / "r.xml").string();
  const CommandOutput out = run_on(plugin("ok"), {"--profile", "vllm-op", "--json", report, "--junit", junit});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  EXPECT_NE(out.notes.find("18 cases pinned to a built-in kernel run on --kernel " + plugin("ok")), std::string::npos)
      << out.notes;
  const json r = json::parse(read_file(report));
  EXPECT_EQ(r["summary"]["total"], std::int64_t(load_cases(layout_cases()).cases.size()));  // none left out
  EXPECT_EQ(r["summary"]["by_disposition"]["rejected-as-expected"], 21);
  for (const json& c : r["cases"]) {
    EXPECT_EQ(c["kernel"], plugin("ok"));
    if (c["disposition"] == "rejected-as-expected")
      EXPECT_EQ(c["expectation"].get<std::string>().rfind(
                    "refuse with \"Kimi K3 AttnRes requires densely packed rows; got", 0),
                0u)
          << c["expectation"];
    if (c["name"] == "seed-repro-prefix-stride-7175")
      EXPECT_EQ(c["rejection"],
                "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168");
  }
  EXPECT_NE(read_file(junit).find("<property name=\"kernel\" value=\"" + plugin("ok") + "\"/>"), std::string::npos);

  // The same declaration as a user's profile file.
  const std::filesystem::path profile = dir.path() / "profile.json";
  const json declared = {{"schema_version", 1},
                         {"refuses",
                          {{{"when", "rows_not_dense"},
                            {"mode", "must"},
                            {"message",
                             "Kimi K3 AttnRes requires densely packed rows; got strides {prefix}, {delta}, "
                             "{output} for hidden_size {H}"}}}}};
  std::ofstream(profile) << declared.dump();
  EXPECT_EQ(run_on(plugin("ok"), {"--profile", profile.string()}).exit_code, kExitOk);

  // Undeclared, a refusal is a failure: with no profile an external kernel must compute every case.
  const CommandOutput undeclared = run_on(plugin("ok"), {"--json", report});
  EXPECT_EQ(undeclared.exit_code, kExitUnmet);
  EXPECT_EQ(json::parse(read_file(report))["summary"]["by_disposition"]["unexpected-rejection"], 21);

  // A declared message one character away from the kernel's is a failure.
  json typo = declared;
  typo["refuses"][0]["message"] =
      "Kimi K3 AttnRes requires densely packed rows: got strides {prefix}, {delta}, {output} for hidden_size {H}";
  std::ofstream(profile) << typo.dump();
  const CommandOutput other = run_cli({"run", testing::source_path("cases/guard.json"), "--filter", "seed*",
                                       "--backend", "cpu", "--kernel", plugin("ok"), "--profile", profile.string()});
  EXPECT_EQ(other.exit_code, kExitUnmet);
  EXPECT_NE(other.text.find("rejected with another message"), std::string::npos) << other.text;
}

// A kernel that takes every stride (as vLLM's dispatch and FlashInfer's API must) is green with no
// profile; the hard-coded stride fails every padded case with T > 1.
TEST(Plugins, AKernelThatTakesEveryStridePassesAndTheSeedBugFailsEveryPaddedCase) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  EXPECT_EQ(run_on(plugin("any_stride"), {}).exit_code, kExitOk);
  EXPECT_EQ(run_on(plugin("hardcoded"), {"--json", report}).exit_code, kExitUnmet);
  const json written = json::parse(read_file(report));
  std::map<std::string, std::string> disposition;
  for (const json& c : written["cases"]) disposition[c["name"]] = c["disposition"];
  int padded = 0;
  for (const CaseSpec& spec : load_cases(layout_cases()).cases) {
    ASSERT_EQ(disposition.count(spec.name), 1u) << spec.name;
    const std::int64_t hidden = spec.shape.hidden;
    const bool rows_padded = spec.strides.prefix != hidden || (spec.shape.has_delta && spec.strides.delta != hidden) ||
                             spec.strides.output != hidden;
    if (rows_padded && spec.shape.tokens > 1) {
      ++padded;
      EXPECT_NE(disposition[spec.name], "passed") << spec.name;
    } else if (!rows_padded) {
      EXPECT_EQ(disposition[spec.name], "passed") << spec.name;
    }
  }
  EXPECT_GE(padded, 14);
}

// --shard splits the cases the run judges: under --kernel, the shards together are the whole run.
TEST(Plugins, ShardsUnderAKernelCoverEveryCase) {
  TempDir dir;
  std::int64_t total = 0;
  for (const char* shard : {"1/3", "2/3", "3/3"}) {
    const std::string report = (dir.path() / (std::string("r") + shard[0] + ".json")).string();
    run_on(plugin("any_stride"), {"--shard", shard, "--json", report});
    total += json::parse(read_file(report))["summary"]["total"].get<std::int64_t>();
  }
  EXPECT_EQ(total, std::int64_t(load_cases(layout_cases()).cases.size()));
}

TEST(Plugins, TheHardCodedStrideIsCaughtOnTheSeedRepro) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  // Declared as vLLM's op: it must refuse the padded rows, and runs them.
  const CommandOutput out = run_cli({"run", testing::source_path("cases/guard.json"), "--filter", "seed*", "--backend",
                                     "cpu", "--kernel", plugin("hardcoded"), "--profile", "vllm-op", "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet);
  const json c = json::parse(read_file(report))["cases"][0];
  EXPECT_EQ(c["disposition"], "not-rejected");
  EXPECT_GT(c["comparison"]["max_abs_error"].get<double>(), 3.0);  // against atol 0.08
  EXPECT_GT(c["comparison"]["mismatched"].get<std::int64_t>(), 1000000);
  EXPECT_EQ(c["violations"][0]["tensor"], "prefix");
  EXPECT_EQ(c["violations"][0]["kind"], "padding canary overwritten");
  // On dense rows the same kernel is right: the bug is the stride alone.
  EXPECT_EQ(run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*", "--backend", "cpu",
                     "--kernel", plugin("hardcoded")})
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
  EXPECT_EQ(run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--kernel", plugin("ok"),
                     "--profile", "vllm-op"})
                .exit_code,
            kExitOk);
}

// fmaxf(NaN, x) is x: a kernel that reads its output before writing it is right after the NaN
// poison. The probe call before it, on a finite poison, shows it.
TEST(Plugins, AKernelThatReadsItsOutputFails) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-*",
                                     "--backend", "cpu", "--kernel", plugin("reads_output"), "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet) << out.text;
  const json written = json::parse(read_file(report));
  ASSERT_FALSE(written["cases"].empty());
  for (const json& c : written["cases"]) {
    EXPECT_EQ(c["disposition"], "failed") << c["name"];
    EXPECT_EQ(c["comparison"]["mismatched"], 0) << c["name"];  // the judged output alone is right
    EXPECT_NE(c["detail"].get<std::string>().find("its output depends on memory it must not read"), std::string::npos)
        << c["detail"];
  }
}

// The judged call's one constant canary hides a copy of one tensor's padding into another's, and
// a write of that constant; the probe call's canaries, different per tensor and element, do not.
TEST(Plugins, CopiedOrConstantCanariesAreSeenByTheProbeCall) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput copies = run_cli({"run", testing::source_path("cases/vllm/attn_res-triton-write.json"),
                                        "--backend", "cpu", "--kernel", plugin("copies_padding"), "--json", report});
  EXPECT_EQ(copies.exit_code, kExitUnmet) << copies.text;
  const json copied = json::parse(read_file(report));
  ASSERT_EQ(copied["cases"].size(), 1u);
  const json& c = copied["cases"][0];
  EXPECT_EQ(c["disposition"], "memory-violation") << c["detail"];
  EXPECT_EQ(c["comparison"]["mismatched"], 0);
  ASSERT_EQ(c["violations"].size(), 1u) << c["violations"];
  EXPECT_EQ(c["violations"][0]["tensor"], "blocks");
  EXPECT_EQ(c["violations"][0]["kind"],
            "padding canary overwritten (in the probe call, whose canaries differ per tensor and element)");
  EXPECT_EQ(c["violations"][0]["count"], 17 * 7);  // every token's 7 padding elements, all but by chance
  EXPECT_EQ(c["violations"][0]["row"], 5);         // token 0's written block
  EXPECT_EQ(c["violations"][0]["col"], 7168);

  const CommandOutput constant = run_cli({"run", testing::source_path("cases/vllm/attn_res-triton-write.json"),
                                          "--backend", "cpu", "--kernel", plugin("writes_canary"), "--json", report});
  EXPECT_EQ(constant.exit_code, kExitUnmet) << constant.text;
  const json filled = json::parse(read_file(report));
  const json& f = filled["cases"][0];
  EXPECT_EQ(f["disposition"], "memory-violation") << f["detail"];
  std::map<std::string, std::int64_t> count_by_place;
  for (const json& v : f["violations"])
    count_by_place[v["tensor"].get<std::string>() + ": " + v["kind"].get<std::string>()] = v["count"];
  const std::string probe = " (in the probe call, whose canaries differ per tensor and element)";
  EXPECT_EQ(count_by_place, (std::map<std::string, std::int64_t>{
                                {"prefix: padding canary overwritten" + probe, 17},
                                {"output: guard region before the allocation overwritten" + probe, 1}}));

  // The same case on a kernel that takes every stride and writes nothing else passes.
  EXPECT_EQ(
      run_cli({"run", testing::source_path("cases/vllm/attn_res-triton-write.json"), "--backend", "cpu"}).exit_code,
      kExitOk);
}

// Wrong kernels that the other bundled cases cannot tell from a correct one: cases/numerics.json
// has eps apart with small-RMS sources, a denormal residual and T = 70000.
TEST(Plugins, NumericsCasesCatchWhatOtherCasesCannot) {
  const std::string numerics = testing::source_path("cases/numerics.json");
  for (const auto& [variant, caught_by] :
       std::vector<std::pair<std::string, std::string>>{{"ignores_eps", "numerics-distinct-eps-small-rms"},
                                                        {"swaps_eps", "numerics-distinct-eps-small-rms"},
                                                        {"flushes_p", "numerics-denormal-residual"},
                                                        {"skips_far_tokens", "numerics-tokens-past-65535"}}) {
    TempDir dir;
    const std::string report = (dir.path() / "r.json").string();
    const CommandOutput out =
        run_cli({"run", numerics, "--backend", "cpu", "--kernel", plugin(variant), "--json", report});
    EXPECT_EQ(out.exit_code, kExitUnmet) << variant << out.text;
    const json written = json::parse(read_file(report));
    bool caught = false;
    for (const json& c : written["cases"]) caught |= c["name"] == caught_by && c["disposition"] != "passed";
    EXPECT_TRUE(caught) << variant << " on " << caught_by << "\n" << out.text;
    // The public cases alone pass it.
    EXPECT_EQ(run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*", "--backend", "cpu",
                       "--kernel", plugin(variant)})
                  .exit_code,
              kExitOk)
        << variant;
  }
  EXPECT_EQ(run_cli({"run", numerics, "--backend", "cpu", "--kernel", plugin("any_stride")}).exit_code, kExitOk);
}

// +0.07 on every element is inside atol 8e-2, yet a correct bf16 kernel's errors average out:
// the mean error against the reference's bf16 spacing tells them apart.
// run --check all through the C ABI, in worker processes, on padded rows and a block-major view
// too: the kernel that takes every stride has every property; one whose large-batch path rounds
// its softmax weights (with more than one source) fails batch invariance only, and
// one whose batch-wide reduction spreads a garbage row's NaN fails the garbage check only. Each
// property is a testcase of its own in JUnit.
TEST(Plugins, EachPropertyFailsTheKernelThatLacksItAndNoOther) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string(), junit = (dir.path() / "r.xml").string();
  const std::map<std::string, std::string> lacks{
      {"any_stride", ""}, {"depends_on_batch", "batch-invariance"}, {"leaks_garbage", "garbage"}};
  for (const auto& [variant, lacked] : lacks) {
    const CommandOutput out =
        run_cli({"run", testing::source_path("cases/public.json"), testing::source_path("cases/layouts.json"),
                 "--filter", "public-t3-b[1-3]*", "--filter", "view-prefix-column-slice", "--filter",
                 "view-blocks-block-major-padded-offset", "--backend", "cpu", "--kernel", plugin(variant), "--check",
                 "all", "--json", report, "--junit", junit});
    EXPECT_EQ(out.exit_code, lacked.empty() ? kExitOk : kExitUnmet) << variant << out.text;
    const json written = json::parse(read_file(report));
    ASSERT_EQ(written["cases"].size(), 5u);
    for (const json& c : written["cases"]) {
      ASSERT_EQ(c["properties"].size(), 6u) << variant << " " << c["name"];
      for (const json& p : c["properties"]) {
        const bool on_device = p["check"] == "stream" || p["check"] == "graph" || p["check"] == "pdl";
        EXPECT_EQ(p["disposition"], p["check"] == lacked ? "failed"
                                    : on_device          ? "skipped"
                                                         : "passed")
            << variant << " " << c["name"] << " " << p["check"] << ": " << p["detail"];
      }
      EXPECT_EQ(c["disposition"], lacked.empty() ? "passed" : "failed") << variant << " " << c["name"];
      if (!lacked.empty()) EXPECT_EQ(c["detail"].get<std::string>().rfind(lacked + ": ", 0), 0u) << c["detail"];
    }
    const std::string xml = read_file(junit);
    const std::string name = written["cases"][0]["name"];
    EXPECT_NE(xml.find("name=\"" + name + "[garbage]\""), std::string::npos) << xml.substr(0, 2000);
    if (!lacked.empty()) EXPECT_NE(xml.find("name=\"" + name + "[" + lacked + "]\" time=\""), std::string::npos);
  }
}

TEST(Plugins, ABiasInsideTheToleranceFails) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                     "--backend", "cpu", "--kernel", plugin("biased"), "--json", report});
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

// A plugin built for version 1 of the C ABI (before enable_pdl) is called as before.
TEST(Plugins, AVersionOnePluginStillRuns) {
  TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_on(plugin("abi_v1"), {"--json", report});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  const json r = json::parse(read_file(report));
  EXPECT_EQ(r["summary"]["by_disposition"]["passed"], r["summary"]["total"]);
}

TEST(Plugins, BrokenPluginsAreClearErrors) {
  const std::string cases = testing::source_path("cases/guard.json");
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", plugin("wrong_abi")})
                .find("built for kernel ABI version 999, this attnres-check speaks versions 1 to 2"),
            std::string::npos);
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", plugin("ok") + ":nosuch"})
                .find("no symbol nosuch_info"),
            std::string::npos);
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", "so:/nonexistent/libk.so"})
                .find("cannot load the library"),
            std::string::npos);
  EXPECT_NE(usage_error({"run", cases, "--backend", "cpu", "--kernel", "mine"}).find("unknown kernel \"mine\""),
            std::string::npos);
}

TEST(Plugins, AFailingPluginCostsOnlyItsCases) {
  TempDir dir;
  for (const auto& [variant, message] :
       {std::pair<std::string, std::string>{"throws", "threw an exception: test plugin: thrown on purpose"},
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
  run_cli({"repro", testing::source_path("cases/guard.json"), "--case", "guard-padded-blocks-ok", "--out",
           bundle.string(), "--backend", "cpu", "--kernel", "so:" + library});
  // replay.sh run by sh with a stand-in binary that prints each argument it gets on a line.
  const auto arguments = dir.path() / "arguments.sh";
  std::ofstream(arguments) << "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n";
  std::filesystem::permissions(arguments, std::filesystem::perms::owner_all);
  const std::string command =
      fmt::format("cd '{}' && ATTNRES_CHECK='{}' sh replay.sh", bundle.string(), arguments.string());
  std::string printed;
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) printed += buffer;
  ASSERT_EQ(pclose(pipe), 0) << printed;
  EXPECT_NE(printed.find("[so:" + library + "]\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("[inputs.safetensors]\n"), std::string::npos) << printed;
}

// run --repro-dir with a kernel in a worker process: each bundle is written there, naming the kernel.
TEST(Plugins, RunBundlesWhatTheKernelGotWrongInItsWorker) {
  TempDir dir;
  const std::string bundles = (dir.path() / "repro").string();
  const CommandOutput out =
      run_cli({"run", testing::source_path("cases/guard.json"), "--filter", "guard-delta*", "--filter", "guard-output*",
               "--kernel", plugin("hardcoded"), "--profile", "vllm-op", "--repro-dir", bundles});
  EXPECT_EQ(out.exit_code, kExitUnmet);
  const json index = json::parse(read_file(bundles + "/index.json"));
  ASSERT_EQ(index["bundles"].size(), 2u) << out.text << out.notes;
  for (const auto& bundle : index["bundles"]) {
    EXPECT_EQ(bundle["bundle_disposition"], "not-rejected");
    EXPECT_NE(read_file(bundles + "/" + bundle["dir"].get<std::string>() + "/replay.sh")
                  .find("--kernel " + plugin("hardcoded") + " --profile vllm-op"),
              std::string::npos);
  }
}

// A property failure shrinks like any other, and the shrunk case and a repro bundle ask for the
// property themselves: run alone, they fail as they did.
TEST(Plugins, APropertyFailureShrinksAndBundlesWithItsCheck) {
  TempDir dir;
  const std::string small = (dir.path() / "small.json").string();
  const CommandOutput shrink =
      run_cli({"shrink", testing::source_path("cases/public.json"), "--case", "public-t3-b2-delta-norm", "--out", small,
               "--backend", "cpu", "--kernel", plugin("depends_on_batch"), "--check", "batch-invariance"});
  EXPECT_EQ(shrink.exit_code, kExitOk) << shrink.text;
  const json c = json::parse(read_file(small));
  EXPECT_EQ(c["T"], 1);
  EXPECT_EQ(c["checks"], json{"batch-invariance"});
  const std::string report = (dir.path() / "r.json").string();
  EXPECT_EQ(
      run_cli({"run", small, "--backend", "cpu", "--kernel", plugin("depends_on_batch"), "--json", report}).exit_code,
      kExitUnmet);
  EXPECT_EQ(json::parse(read_file(report))["cases"][0]["properties"][0]["disposition"], "failed");
  EXPECT_EQ(run_cli({"run", small, "--backend", "cpu", "--kernel", plugin("any_stride")}).exit_code, kExitOk);

  const auto bundle = dir.path() / "bundle";
  EXPECT_EQ(run_cli({"repro", testing::source_path("cases/public.json"), "--case", "public-t3-b2-delta-norm", "--out",
                     bundle.string(), "--backend", "cpu", "--kernel", plugin("leaks_garbage"), "--check", "garbage"})
                .exit_code,
            kExitUnmet);
  EXPECT_EQ(json::parse(read_file(bundle / "case.json"))["checks"], json{"garbage"});
  EXPECT_NE(read_file(bundle / "REPORT.md").find("  - garbage: **failed**: with NaN"), std::string::npos);
}

TEST(Plugins, ReproAndShrinkFollowTheKernel) {
  TempDir dir;
  const auto bundle = dir.path() / "bundle";
  const CommandOutput repro =
      run_cli({"repro", testing::source_path("cases/guard.json"), "--case", "seed-repro-prefix-stride-7175", "--out",
               bundle.string(), "--backend", "cpu", "--kernel", plugin("hardcoded"), "--profile", "vllm-op"});
  EXPECT_EQ(repro.exit_code, kExitUnmet);
  EXPECT_NE(read_file(bundle / "replay.sh").find("--kernel " + plugin("hardcoded") + " "), std::string::npos);
  EXPECT_NE(read_file(bundle / "replay.sh").find(" --profile vllm-op"), std::string::npos);
  EXPECT_EQ(json::parse(read_file(bundle / "environment.json"))["kernel"], plugin("hardcoded"));
  EXPECT_NE(read_file(bundle / "REPORT.md").find("- kernel: " + plugin("hardcoded")), std::string::npos);

  const std::string small = (dir.path() / "small.json").string();
  const CommandOutput shrink =
      run_cli({"shrink", testing::source_path("cases/guard.json"), "--case", "seed-repro-prefix-stride-7175", "--out",
               small, "--backend", "cpu", "--kernel", plugin("hardcoded"), "--profile", "vllm-op"});
  EXPECT_EQ(shrink.exit_code, kExitOk) << shrink.text;
  const json c = json::parse(read_file(small));
  EXPECT_LT(c["T"].get<int>(), 320);
  EXPECT_EQ(run_cli({"run", small, "--backend", "cpu", "--kernel", plugin("hardcoded"), "--profile", "vllm-op",
                     "--interesting", "not-rejected"})
                .exit_code,
            kExitOk);
  // The shrunk case is a regression test: it still pads rows, writes no expectation of its own (the
  // kernel's declaration gives it), and a kernel that refuses the layout as declared meets it.
  const std::int64_t hidden = c["H"], stride = c["tensors"]["prefix"]["row_stride"];
  EXPECT_GT(stride, hidden);
  EXPECT_FALSE(c.contains("expect"));
  EXPECT_EQ(run_cli({"run", small, "--backend", "cpu", "--kernel", plugin("ok"), "--profile", "vllm-op"}).exit_code,
            kExitOk);

  // Here the kernel's answer is right (one token: the hard-coded stride is never used), so only
  // the missing refusal is the bug: shrinking keeps the padding the guard refuses.
  const std::string no_delta = (dir.path() / "no-delta.json").string();
  ASSERT_EQ(run_cli({"shrink", testing::source_path("cases/guard.json"), "--case", "guard-no-delta-prefix-stride",
                     "--out", no_delta, "--backend", "cpu", "--kernel", plugin("hardcoded"), "--profile", "vllm-op"})
                .exit_code,
            kExitOk);
  const json d = json::parse(read_file(no_delta));
  EXPECT_GT(d["tensors"]["prefix"]["row_stride"].get<std::int64_t>(), d["H"].get<std::int64_t>());
  EXPECT_EQ(run_cli({"run", no_delta, "--backend", "cpu", "--kernel", plugin("ok"), "--profile", "vllm-op"}).exit_code,
            kExitOk);
  EXPECT_EQ(
      run_cli({"run", no_delta, "--backend", "cpu", "--kernel", plugin("hardcoded"), "--profile", "vllm-op"}).exit_code,
      kExitUnmet);
}

// On the GPU (ctest label gpu).

// The test plugin behaves as vLLM's fixed native op: it refuses padded rows with the seed's
// message. Declared so (--profile vllm-op), every bundled case is judged on it and met; with no
// declaration its refusals are failures.
TEST_F(Gpu, CudaPluginMeetsTheBundledExpectations) {
  const BinaryRun run =
      run_binary({"run", testing::source_path("cases"), "--kernel", cuda_plugin("ok"), "--profile", "vllm-op"});
  EXPECT_EQ(run.exit_code, kExitOk) << run.output;
  const nlohmann::json& r = run.report;
  EXPECT_EQ(r["summary"]["total"],
            std::int64_t(load_cases({testing::source_path("cases")}).cases.size()));  // none left out
  EXPECT_EQ(r["summary"]["by_disposition"]["rejected-as-expected"], 21);
  EXPECT_EQ(find_case(r, "vllm-attn_res-triton-write")["rejection"],
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, none, 7168 for hidden_size 7168");
  EXPECT_EQ(find_case(r, "vllm-attn_res-triton-write-add")["rejection"],
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7175, 7168 for hidden_size 7168");
  for (const auto& c : r["cases"]) EXPECT_EQ(c["kernel"], cuda_plugin("ok")) << c["name"];
  const BinaryRun undeclared =
      run_binary({"run", testing::source_path("cases/guard.json"), "--kernel", cuda_plugin("ok")});
  EXPECT_EQ(undeclared.exit_code, kExitUnmet) << undeclared.output;
  EXPECT_EQ(undeclared.report["summary"]["by_disposition"]["unexpected-rejection"], 4);
}

TEST_F(Gpu, CudaPluginWritingOutOfBoundsIsAMemoryViolationAndLaterCasesAreJudged) {
  const BinaryRun run = run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                    "--kernel", cuda_plugin("out_of_bounds")});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  const nlohmann::json& r = run.report;
  ASSERT_GE(r["cases"].size(), 2u) << run.output;
  for (const auto& c : r["cases"]) {
    EXPECT_EQ(c["disposition"], "memory-violation") << c["name"] << ": " << c["detail"];
    ASSERT_FALSE(c["violations"].empty());
    EXPECT_EQ(c["violations"][0]["tensor"], "output");
    EXPECT_EQ(c["violations"][0]["kind"], "guard region after the allocation overwritten");
    EXPECT_TRUE(c["comparison"]["mismatched"] == 0) << c["name"];  // the answer itself is right
  }
}

// A kernel whose own non-blocking stream writes the output ~50 ms after the call returned: the
// tool waits for every stream before it judges, so the +1 it adds is seen as out of tolerance.
TEST_F(Gpu, LateWritesOnTheKernelsOwnStreamAreJudged) {
  const BinaryRun run = run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                    "--kernel", cuda_plugin("late_writer")});
  EXPECT_EQ(run.exit_code, kExitUnmet) << run.output;
  ASSERT_GE(run.report["cases"].size(), 2u) << run.output;
  for (const auto& c : run.report["cases"]) {
    EXPECT_EQ(c["disposition"], "failed") << c["name"] << ": " << c["detail"];
    EXPECT_GT(c["comparison"]["mismatched"].get<std::int64_t>(), c["comparison"]["total"].get<std::int64_t>() / 2)
        << c["name"];
  }
}

// run --check all on the GPU: the CUDA test kernel that takes every stride has every property,
// launched with PDL where it is asked to. The built-in kernels the dispatcher picks have every
// property but batch invariance: the native kernel's plans (split clusters of 8, 4 and 2 CTAs, the
// ring) reduce in other orders, so a row's bits change across the plan bounds (README, "The
// built-in kernels"). The kernel whose large-batch path rounds its weights fails batch invariance
// only, the one whose batch-wide reduction spreads NaN the garbage check only, the one that never
// waits for the previous grid under PDL the PDL check only, the one that reads its weights on the
// host at capture time the graph check only. The one that launches on the legacy default stream
// fails the stream check, and the graph and PDL checks too: it runs at capture time, not in the
// graph, and does not wait for the producer on the stream it is given.
TEST_F(Gpu, PropertiesAreJudgedOnTheDevice) {
  const std::vector<std::string> cases{testing::source_path("cases/public.json"), "--filter", "public-t17-b[1-4]*",
                                       "--check", "all"};
  const std::map<std::string, std::set<std::string>> lacks{{"", {"batch-invariance"}},
                                                           {cuda_plugin("ok"), {}},
                                                           {cuda_plugin("depends_on_batch"), {"batch-invariance"}},
                                                           {cuda_plugin("leaks_garbage"), {"garbage"}},
                                                           {cuda_plugin("default_stream"), {"stream", "graph", "pdl"}},
                                                           {cuda_plugin("reads_before_wait"), {"pdl"}},
                                                           {cuda_plugin("bakes_at_capture"), {"graph"}},
                                                           {cuda_plugin("reads_past_scratch"), {}}};
  for (const auto& [kernel, lacked] : lacks) {
    std::vector<std::string> args{"run"};
    args.insert(args.end(), cases.begin(), cases.end());
    if (!kernel.empty()) args.insert(args.end(), {"--kernel", kernel});
    const BinaryRun run = run_binary(args);
    EXPECT_EQ(run.exit_code, lacked.empty() ? kExitOk : kExitUnmet) << kernel << run.output;
    ASSERT_EQ(run.report["cases"].size(), 4u) << run.output;
    if (kernel == cuda_plugin("bakes_at_capture"))
      EXPECT_NE(run.report["cases"][0]["detail"].get<std::string>().find("graph: replay 2, on fresh inputs (seed "),
                std::string::npos)
          << run.report["cases"][0]["detail"];
    if (kernel == cuda_plugin("reads_before_wait"))
      EXPECT_EQ(run.report["cases"][0]["detail"].get<std::string>().rfind(
                    "pdl: launched with programmatic dependent launch behind a producer", 0),
                0u)
          << run.report["cases"][0]["detail"];
    for (const nlohmann::json& c : run.report["cases"]) {
      ASSERT_EQ(c["properties"].size(), 6u) << kernel << " " << c["name"];
      for (const nlohmann::json& p : c["properties"])
        EXPECT_EQ(p["disposition"], lacked.count(p["check"]) ? "failed" : "passed")
            << kernel << " " << c["name"] << " " << p["check"] << ": " << p["detail"];
    }
  }
}

// run --sanitizer under the real compute-sanitizer: the kernel that reads 4 bytes past a buffer of
// its own, which no other check can see, is a hazard on every case, naming the read; the correct
// test kernel and the built-in kernels (with the tool's own kernels: generator, checks, the cuBLAS
// reference) are clean under every tool.
TEST_F(Gpu, TheSanitizerFindsAReadNoOtherCheckSees) {
  try {
    find_compute_sanitizer();
  } catch (const UsageError& e) {
    GTEST_SKIP() << e.what();
  }
  testing::TempDir tmp;
  setenv("TMPDIR", tmp.path().c_str(), 1);
  const auto sanitized = [](const std::string& tool, const std::string& kernel) {
    std::vector<std::string> args{
        "run", testing::source_path("cases/public.json"), "--filter", "public-t17-b[1-2]*", "--sanitizer", tool};
    if (!kernel.empty()) args.insert(args.end(), {"--kernel", kernel});
    return run_binary(args);
  };
  const BinaryRun stray = sanitized("memcheck", cuda_plugin("reads_past_scratch"));
  EXPECT_EQ(stray.exit_code, kExitUnmet) << stray.output;
  ASSERT_EQ(stray.report["cases"].size(), 2u) << stray.output;
  for (const nlohmann::json& c : stray.report["cases"]) {
    const std::string detail = c["detail"];
    EXPECT_EQ(c["disposition"], "hazard") << detail;
    EXPECT_EQ(detail.rfind("compute-sanitizer memcheck: Invalid __global__ read of size 4 bytes at ", 0), 0u) << detail;
    EXPECT_NE(detail.find("stray_read_kernel"), std::string::npos) << detail;
    // memcheck ends the kernel at the read: under it the launch fails.
    EXPECT_NE(detail.find("; judged under it, the case was error: "), std::string::npos) << detail;
  }
  const BinaryRun plain = run_binary({"run", testing::source_path("cases/public.json"), "--filter",
                                      "public-t17-b[1-2]*", "--kernel", cuda_plugin("reads_past_scratch")});
  EXPECT_EQ(plain.exit_code, kExitOk) << plain.output;
  for (const std::string tool : {"memcheck", "racecheck", "synccheck", "initcheck"})
    for (const std::string kernel : {std::string(), cuda_plugin("ok")}) {
      const BinaryRun clean = sanitized(tool, kernel);
      EXPECT_EQ(clean.exit_code, kExitOk) << tool << " " << kernel << clean.output;
    }
  unsetenv("TMPDIR");
}

// cases/scale, whose largest element offsets straddle 2^31 - 1 and 2^32 - 1 (up to 11.8 GB of
// tensors and a 4.3 GB reference a case): the built-in kernels and the CUDA test kernel compute every one; the kernel
// that indexes with 32-bit ints passes the case below 2^31 - 1 and is caught on each past it.
TEST_F(Gpu, OffsetsPast32BitsAreJudged) {
  constexpr std::int64_t kNeeded = std::int64_t(24) << 30;
  if (backend_->free_device_bytes().value_or(0) < kNeeded)
    GTEST_SKIP() << "cases/scale's largest case holds 11.8 GB of tensors and a 4.3 GB reference; this test asks "
                    "for 24 GiB of free device memory";
  const std::string scale = testing::source_path("cases/scale");
  const BinaryRun builtin = run_binary({"run", scale});
  EXPECT_EQ(builtin.exit_code, kExitOk) << builtin.output;
  EXPECT_EQ(builtin.report["summary"]["by_disposition"]["passed"], 7) << builtin.output;
  const BinaryRun fixed = run_binary({"run", scale, "--kernel", cuda_plugin("ok"), "--profile", "vllm-op"});
  EXPECT_EQ(fixed.exit_code, kExitOk) << fixed.output;
  const BinaryRun narrow =
      run_binary({"run", scale, "--filter", "scale-blocks-*", "--kernel", cuda_plugin("int32_offsets")});
  EXPECT_EQ(narrow.exit_code, kExitUnmet) << narrow.output;
  ASSERT_EQ(narrow.report["cases"].size(), 5u) << narrow.output;
  for (const nlohmann::json& c : narrow.report["cases"])
    EXPECT_EQ(c["disposition"] == "passed", c["name"] == "scale-blocks-offset-below-int32-max")
        << c["name"] << ": " << c["detail"];
}

}  // namespace
}  // namespace attnres
