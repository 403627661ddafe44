#include <gtest/gtest.h>

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/cli/commands.h"
#include "app/report/report.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

std::vector<CaseResult> sample() {
  CaseResult passed;
  passed.name = "ok";
  passed.location = "cases/a.json#/0";
  passed.disposition = Disposition::passed;
  passed.kernel = "native";
  passed.dispatch_reason = "sm_90 device";
  passed.comparison = Comparison{};
  passed.comparison->total = 100;
  passed.comparison->max_abs_error = 0.01;
  passed.seconds = 0.5;
  CaseResult failed = passed;
  failed.name = "bad<&>";
  failed.disposition = Disposition::failed;
  failed.detail = "max-abs error 6.66 \"quoted\"";
  failed.comparison->mismatched = 7;
  failed.violations.push_back({"prefix", "padding canary overwritten", 1, 7168, 3});
  CaseResult skipped = passed;
  skipped.name = "gpu-only";
  skipped.location = "cases/b.json";
  skipped.disposition = Disposition::not_run;
  skipped.comparison.reset();
  skipped.detail = "no CUDA device";
  CaseResult broken = skipped;
  broken.name = "crash";
  broken.disposition = Disposition::error;
  broken.detail = "cudaMalloc failed";
  return {passed, failed, skipped, broken};
}

// sample() and a case whose garbage property failed.
std::vector<CaseResult> sample_with_properties() {
  std::vector<CaseResult> results = sample();
  CaseResult checked = results[0];
  checked.name = "checked";
  checked.disposition = Disposition::failed;
  checked.properties = {{CaseProperty::determinism, Disposition::passed, "3 more calls", 0.25},
                        {CaseProperty::garbage, Disposition::failed, "rows 1..5 change", 0.5}};
  results.insert(results.begin() + 2, checked);
  return results;
}

const RunContext kContext{"cpu", "modelled sm_90 (sm_90)", {"sm_90a"}, "run cases"};

TEST(Reports, SummaryCountsEveryDisposition) {
  const std::vector<CaseLoadError> errors = {{"cases/c.json", "/T", "must be an integer"}};
  const RunSummary s = summarize(sample(), errors);
  EXPECT_EQ(s.total, 4);
  EXPECT_EQ(s.met, 1);
  EXPECT_EQ(s.by_disposition[int(Disposition::failed)], 1);
  EXPECT_FALSE(s.all_met());
  EXPECT_TRUE(summarize({sample()[0]}, {}).all_met());
}

TEST(Reports, TableHasNoColourUnlessAsked) {
  const std::string plain = format_table(sample(), {}, kContext, TableStyle{});
  EXPECT_EQ(plain.find('\033'), std::string::npos);
  EXPECT_NE(plain.find("failed"), std::string::npos);
  EXPECT_NE(plain.find("7/100"), std::string::npos);
  EXPECT_NE(plain.find("4 cases, 1 passed, 1 failed, 1 not-run, 1 error: 3 did not meet their expectations"),
            std::string::npos);
  EXPECT_NE(format_table(sample(), {}, kContext, TableStyle{true}).find("\033[31m"), std::string::npos);
}

TEST(Reports, TheClosingSummaryNamesEveryCaseThatDidNotMeetItsExpectation) {
  const std::string table =
      format_table(sample(), {{"cases/c.json", "/T", "must be an integer"}}, kContext, TableStyle{});
  const std::string summary = table.substr(table.find("not meeting their expectations:\n"));
  EXPECT_NE(summary.find("  failed                bad<&> (seed 0): max-abs error 6.66 \"quoted\"\n"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("  not-run               gpu-only (seed 0): no CUDA device\n"), std::string::npos) << summary;
  EXPECT_NE(summary.find("  error                 crash (seed 0): cudaMalloc failed\n"), std::string::npos) << summary;
  EXPECT_NE(summary.find("  bad-case              cases/c.json: /T: must be an integer\n"), std::string::npos)
      << summary;
  EXPECT_EQ(summary.find("ok"), std::string::npos);
  EXPECT_NE(
      table.find(
          "4 cases, 1 passed, 1 failed, 1 not-run, 1 error, 1 bad case-file entry: 4 did not meet their expectations"),
      std::string::npos);
  EXPECT_NE(format_table({sample()[0]}, {}, kContext, TableStyle{}).find("1 case, 1 passed: it met its expectation"),
            std::string::npos);
}

TEST(Reports, WhyLinesOnlyWhereACaseDidNotMeetItsExpectationUnlessVerbose) {
  const CaseResult passed = sample()[0], failed = sample()[1];
  EXPECT_EQ(table_rows(passed, TableStyle{}).find("why:"), std::string::npos);
  EXPECT_NE(table_rows(failed, TableStyle{}).find("why: sm_90 device"), std::string::npos);
  EXPECT_NE(table_rows(passed, TableStyle{false, false, Verbosity::verbose}).find("why: sm_90 device"),
            std::string::npos);
  EXPECT_EQ(table_rows(passed, TableStyle{false, false, Verbosity::quiet}), "");
  EXPECT_NE(table_rows(failed, TableStyle{false, false, Verbosity::quiet}).find("bad<&>"), std::string::npos);
}

TEST(Reports, LongCaseAndKernelNamesKeepTheColumnsAligned) {
  std::vector<CaseResult> results = sample();
  results[0].name = "flashinfer-semantic-m17-k4-nodelta-write-1-norm";  // 47 characters, the column's default is 44
  results[1].kernel = "python:vllm.models.kimi_k3.nvidia.ops.attn_res:attn_res";
  const std::string table = format_table(results, {}, kContext, TableStyle{});
  const auto line_with = [&](const std::string& text) {
    const std::size_t at = table.find(text);
    const std::size_t start = table.rfind('\n', at) + 1;
    return table.substr(start, table.find('\n', at) - start);
  };
  // Each column ends where its heading ends: max-abs is right-aligned under "max-abs".
  const std::string header = line_with("max-abs");
  const std::size_t max_abs_end = header.find("max-abs") + std::string("max-abs").size();
  for (const std::string row : {line_with(results[0].name), line_with("bad<&>")}) {
    ASSERT_GE(row.size(), max_abs_end);
    EXPECT_EQ(row.substr(max_abs_end - 4, 4), "0.01") << row;
    EXPECT_EQ(row[max_abs_end], ' ') << row;
  }
  EXPECT_EQ(header.find("kernel"), line_with(results[0].name).find("native"));
  EXPECT_EQ(header.find("kernel"), line_with("bad<&>").find("python:"));
}

TEST(Reports, JsonIsVersionedAndComplete) {
  const nlohmann::json j = report_json(sample(), {{"cases/c.json", "/T", "must be an integer"}}, kContext);
  EXPECT_EQ(j["schema"], "attnres-check/report");
  EXPECT_EQ(j["schema_version"], kReportSchemaVersion);
  EXPECT_EQ(j["summary"]["total"], 4);
  EXPECT_EQ(j["summary"]["all_met"], false);
  EXPECT_EQ(j["summary"]["by_disposition"]["not-run"], 1);
  EXPECT_EQ(j["load_errors"][0]["pointer"], "/T");
  const auto& failed = j["cases"][1];
  EXPECT_EQ(failed["disposition"], "failed");
  EXPECT_EQ(failed["meets_expectation"], false);
  EXPECT_EQ(failed["kernel"], "native");
  EXPECT_EQ(failed["comparison"]["mismatched"], 7);
  EXPECT_EQ(failed["violations"][0]["col"], 7168);
  EXPECT_TRUE(j["cases"][2]["comparison"].is_null());
}

TEST(Reports, AReportReadsBackAsWritten) {
  RunContext context{"cpu",
                     "modelled sm_90 (sm_90)",
                     {"sm_90a"},
                     "run cases --shard 2/3",
                     "auto",
                     {"cases"},
                     "2026-12-03T10:00:00Z",
                     "ci-7",
                     "2/3"};
  const std::vector<CaseLoadError> errors = {{"cases/c.json", "/T", "must be an integer"}};
  const LoadedReport back = report_from_json(report_json(sample_with_properties(), errors, context));
  EXPECT_EQ(report_json(back.results, back.load_errors, back.context),
            report_json(sample_with_properties(), errors, context));
  EXPECT_EQ(back.context.shard, "2/3");
  ASSERT_EQ(back.results[2].properties.size(), 2u);
  EXPECT_EQ(back.results[2].properties[1].property, CaseProperty::garbage);
  EXPECT_EQ(back.results[2].properties[1].disposition, Disposition::failed);
  EXPECT_EQ(back.results[2].properties[1].detail, "rows 1..5 change");
  EXPECT_EQ(back.context.case_roots, std::vector<std::string>{"cases"});

  nlohmann::json broken = report_json(sample_with_properties(), errors, context);
  broken["cases"][1]["disposition"] = "fine";
  try {
    report_from_json(broken);
    FAIL() << "an unknown disposition read back";
  } catch (const JsonInputError& e) {
    EXPECT_EQ(e.pointer(), "/cases/1");
    EXPECT_NE(std::string(e.what()).find("unknown disposition \"fine\""), std::string::npos) << e.what();
  }
  broken = report_json(sample_with_properties(), errors, context);
  broken["cases"][2]["properties"][1]["check"] = "speed";
  try {
    report_from_json(broken);
    FAIL() << "an unknown check read back";
  } catch (const JsonInputError& e) {
    EXPECT_EQ(e.pointer(), "/cases/2");
    EXPECT_NE(std::string(e.what()).find("properties: unknown check \"speed\""), std::string::npos) << e.what();
  }
  broken = report_json(sample_with_properties(), errors, context);
  broken.erase("hostname");
  EXPECT_THROW(report_from_json(broken), JsonInputError);
  EXPECT_THROW(report_from_json(nlohmann::json::array()), JsonInputError);
}

TEST(Reports, EachPropertyIsAJunitTestcaseAndACsvCell) {
  const std::string xml = junit_xml(sample_with_properties(), {}, kContext);
  EXPECT_NE(xml.find("<testcase classname=\"attnres-check.cases/a.json\" name=\"checked[determinism]\""),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("name=\"checked[garbage]\" time=\"0.500\">\n      <failure type=\"failed\" "
                     "message=\"rows 1..5 change\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("tests=\"7\" failures=\"3\""), std::string::npos) << xml;  // 5 cases, 2 properties
  EXPECT_NE(results_csv(sample_with_properties(), {}).find(",determinism=passed;garbage=failed,"), std::string::npos);
}

// merge joins the reports of --shard k/n jobs into the report of one unsharded run.
// A merged report is a file from someone else: its names, details and context reach the
// terminal, so no control character in them may.
TEST(Reports, TableEscapesControlCharactersFromReportFields) {
  std::vector<CaseResult> results = sample();
  results[1].name = "evil\x1b[2J";
  results[1].kernel = "so:\x1b]0;t\x07";
  results[1].detail = std::string("a\0b\x1b[31m", 8);
  const RunContext context{"cpu\x1b[1m", "dev\xC2\x9B", {"sm_90a"}, "run cases"};
  const std::string table = format_table(results, {{"c\x1b.json", "/T", "x"}}, context, TableStyle{});
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_EQ(table.find('\0'), std::string::npos);
  EXPECT_EQ(table.find("\xC2\x9B"), std::string::npos);
  EXPECT_NE(table.find("backend cpu\\u001b[1m, device dev\\u009b"), std::string::npos) << table;
  EXPECT_NE(table.find("evil\\u001b[2J"), std::string::npos);
  EXPECT_NE(table.find("so:\\u001b]0;t\\u0007"), std::string::npos);
  EXPECT_NE(table.find("a\\u0000b\\u001b[31m"), std::string::npos);
  EXPECT_NE(table.find("c\\u001b.json: /T: x"), std::string::npos);
}

TEST(Merge, ShardReportsJoinIntoTheUnshardedRunInCaseOrder) {
  testing::TempDir dir;
  const std::string cases = testing::source_path("cases/public.json"), guard = testing::source_path("cases/guard.json");
  auto report = [&](const std::string& name) { return (dir.path() / name).string(); };
  const CommandOutput whole = testing::run_cli({"run", cases, guard, "--backend", "cpu", "--json", report("all.json")});
  for (int k = 1; k <= 4; ++k)
    testing::run_cli({"run", cases, guard, "--backend", "cpu", "--shard", fmt::format("{}/4", k), "--json",
                      report(fmt::format("s{}.json", k))});
  const CommandOutput merged =
      testing::run_cli({"merge", report("s3.json"), report("s1.json"), report("s4.json"), report("s2.json"), "--json",
                        report("m.json"), "--junit", report("m.xml")});
  EXPECT_EQ(merged.exit_code, whole.exit_code);
  const nlohmann::json a = nlohmann::json::parse(testing::read_file(report("all.json")));
  const nlohmann::json m = nlohmann::json::parse(testing::read_file(report("m.json")));
  ASSERT_EQ(m["cases"].size(), a["cases"].size());
  for (std::size_t i = 0; i < a["cases"].size(); ++i) {
    EXPECT_EQ(m["cases"][i]["name"], a["cases"][i]["name"]);
    EXPECT_EQ(m["cases"][i]["disposition"], a["cases"][i]["disposition"]);
    EXPECT_EQ(m["cases"][i]["comparison"], a["cases"][i]["comparison"]);
  }
  EXPECT_EQ(m["summary"], a["summary"]);
  EXPECT_TRUE(m["shard"].is_null());
  EXPECT_NE(testing::read_file(report("m.xml")).find("<testsuites"), std::string::npos);
  EXPECT_NE(merged.text.find(fmt::format("{} cases", a["cases"].size())), std::string::npos) << merged.text;

  auto merge_error = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "merge");
    try {
      testing::run_cli(args);
    } catch (const CaseParseError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(merge_error({report("s1.json"), report("s2.json"), report("s4.json")}),
            report("s1.json") + ": /shard: shard 3 of 4 missing: merge needs every shard's report");
  EXPECT_NE(merge_error({report("s1.json"), report("s1.json"), report("s2.json"), report("s3.json"), report("s4.json")})
                .find("shard 1/4 again"),
            std::string::npos);
  EXPECT_NE(merge_error({report("s1.json"), report("all.json")}).find("not a shard, but"), std::string::npos);
  const std::string junk = dir.file("junk.json", R"({"schema": "attnres-check/report", "schema_version": 1})");
  EXPECT_EQ(merge_error({junk}).rfind(junk + ": /backend: ", 0), 0u) << merge_error({junk});
  // A job's JUnit file given by mistake is named as such, not as a JSON syntax error.
  EXPECT_EQ(merge_error({report("m.xml")}), report("m.xml") +
                                                ": an XML file (JUnit?); merge reads the JSON reports of run --json "
                                                "and writes JUnit itself with --junit");
  // Unsharded reports are joined in the order given.
  const CommandOutput twice =
      testing::run_cli({"merge", report("all.json"), report("all.json"), "--json", report("t.json")});
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(report("t.json")))["cases"].size(), 2 * a["cases"].size());
}

// A report's own claims are not trusted: a shard count from the file cannot make merge allocate
// or loop over it, and the lists must be lists.
TEST(Merge, ImplausibleReportsAreRefusedQuickly) {
  testing::TempDir dir;
  const std::string report = (dir.path() / "r.json").string();
  testing::run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--json", report});
  const nlohmann::json good = nlohmann::json::parse(testing::read_file(report));
  auto merge_error = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json bad = good;
    bad[key] = value;
    const std::string path = dir.file(std::string(key) + ".json", bad.dump());
    try {
      testing::run_cli({"merge", path});
    } catch (const CaseParseError& e) {
      return std::string(e.what()).substr(path.size());
    }
    return std::string("no error");
  };
  EXPECT_EQ(merge_error("shard", "1/2147483647"),
            ": /shard: shards 2, 3, 4, 5, 6, 7, 8, 9 ... (2147483646 in all) of 2147483647 missing: merge needs every "
            "shard's report");
  for (const char* shard : {"1/2147483648", "99999999999999999999/1", "1/2x", " 1/2", "1/", "/2", "0/2", "3/2"})
    EXPECT_NE(merge_error("shard", shard).find("/shard: expected k/n with 1 <= k <= n"), std::string::npos) << shard;
  EXPECT_EQ(merge_error("cases", nlohmann::json::object()), ": /cases: must be a list");
  EXPECT_EQ(merge_error("load_errors", "x"), ": /load_errors: must be a list");
}

TEST(Reports, JunitGroupsByFileAndEscapes) {
  const std::string xml =
      junit_xml(sample(), {{"cases/c.json", "", "not valid JSON"}}, RunContext{"cpu", "none", {}, "", "so:libk.so"});
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", 0), 0u);
  EXPECT_NE(xml.find("<testsuites name=\"attnres-check\" tests=\"5\" failures=\"1\" errors=\"2\" skipped=\"1\""),
            std::string::npos);
  EXPECT_NE(xml.find("<testsuite name=\"cases/a.json\" tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"0\""),
            std::string::npos);
  EXPECT_NE(xml.find("name=\"bad&lt;&amp;&gt;\""), std::string::npos);
  EXPECT_NE(xml.find("<failure type=\"failed\" message=\"max-abs error 6.66 &quot;quoted&quot;\">"), std::string::npos);
  EXPECT_NE(xml.find("<skipped message=\"no CUDA device\"/>"), std::string::npos);
  EXPECT_NE(xml.find("<error type=\"error\" message=\"cudaMalloc failed\">"), std::string::npos);
  EXPECT_NE(xml.find("<error type=\"bad-case\" message=\"not valid JSON\">"), std::string::npos);
  EXPECT_EQ(xml.find("<&>"), std::string::npos);
}

TEST(Reports, JunitNamesAreRelativeToTheCaseRootsAndLongMessagesAreCutVisibly) {
  std::vector<CaseResult> results = sample();
  results[1].location = "/checkout/cases/sub/a.json#/1";
  results[1].detail = std::string(500, 'x') + "\nsecond line";
  RunContext context{"cuda", "NVIDIA H200 (sm_90)", {"sm_90a"}, "run /checkout/cases", "native"};
  context.case_roots = {"/checkout/cases"};
  context.timestamp = "2026-12-03T08:00:00Z";
  context.hostname = "gpu-runner-7";
  const std::string xml = junit_xml(results, {}, context);
  EXPECT_NE(xml.find("<testcase classname=\"attnres-check.sub/a.json\" name=\"bad&lt;&amp;&gt;\""), std::string::npos)
      << xml;
  EXPECT_NE(xml.find("timestamp=\"2026-12-03T08:00:00Z\" hostname=\"gpu-runner-7\""), std::string::npos);
  EXPECT_NE(xml.find("message=\"" + std::string(400, 'x') +
                     " [cut: 512 characters in all, the full text is in system-out]\""),
            std::string::npos);
  EXPECT_NE(xml.find("second line</system-out>"), std::string::npos);
}

}  // namespace
}  // namespace attnres
