#include "app/report/json_report.h"
#include "app/report/report_format.h"

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/report/git_revision.h"
#include "app/report/result_json.h"

namespace attnres {

using nlohmann::json;

json report_json(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                 const RunContext& context) {
  const RunSummary summary = summarize(results, load_errors);
  json by_disposition = json::object();
  for (int d = 0; d < kDispositionCount; ++d) by_disposition[to_string(Disposition(d))] = summary.by_disposition[d];
  json j = {{"schema", "attnres-check/report"},
            {"schema_version", kReportSchemaVersion},
            {"tool_version", ATTNRES_VERSION},
            {"command_line", context.command_line},
            {"backend", context.backend},
            {"device", context.device},
            {"native_images", context.native_images},
            {"kernel", context.kernel},
            {"case_roots", context.case_roots},
            {"timestamp", context.timestamp},
            {"hostname", context.hostname},
            {"shard", context.shard.empty() ? json(nullptr) : json(context.shard)},
            {"summary",
             {{"total", summary.total},
              {"met_expectation", summary.met},
              {"load_errors", summary.load_errors},
              {"all_met", summary.all_met()},
              {"by_disposition", by_disposition}}}};
  j["load_errors"] = json::array();
  for (const CaseLoadError& e : load_errors)
    j["load_errors"].push_back({{"file", e.file}, {"pointer", e.pointer}, {"message", e.message}});
  j["cases"] = json::array();
  for (const CaseResult& r : results) j["cases"].push_back(result_json(r));
  return j;
}

LoadedReport report_from_json(const json& j) {
  // Each field read where it is, so an error names its JSON pointer.
  std::string at = "";
  try {
    if (!j.is_object() || j.value("schema", "") != "attnres-check/report")
      throw std::invalid_argument("not an attnres-check report (no \"schema\": \"attnres-check/report\")");
    at = "/schema_version";
    schema_version_of(j.at("schema_version"), kReportSchemaVersion);
    LoadedReport report;
    RunContext& c = report.context;
    for (auto [field, value] : {std::pair{"backend", &c.backend},
                                {"device", &c.device},
                                {"command_line", &c.command_line},
                                {"kernel", &c.kernel},
                                {"timestamp", &c.timestamp},
                                {"hostname", &c.hostname}}) {
      at = std::string("/") + field;
      *value = j.at(field).get<std::string>();
    }
    at = "/native_images";
    c.native_images = j.at("native_images").get<std::vector<std::string>>();
    at = "/case_roots";
    c.case_roots = j.at("case_roots").get<std::vector<std::string>>();
    at = "/shard";
    if (!j.at("shard").is_null()) c.shard = j.at("shard").get<std::string>();
    at = "/load_errors";
    const json& errors = j.at("load_errors");
    if (!errors.is_array()) throw std::invalid_argument("must be a list");
    for (std::size_t i = 0; i < errors.size(); ++i) {
      at = fmt::format("/load_errors/{}", i);
      const json& e = errors.at(i);
      report.load_errors.push_back(
          {e.at("file").get<std::string>(), e.at("pointer").get<std::string>(), e.at("message").get<std::string>()});
    }
    at = "/cases";
    const json& cases = j.at("cases");
    if (!cases.is_array()) throw std::invalid_argument("must be a list");
    for (std::size_t i = 0; i < cases.size(); ++i) {
      at = fmt::format("/cases/{}", i);
      report.results.push_back(result_from_json(cases.at(i)));
    }
    return report;
  } catch (const json::exception& e) {
    // "[json.exception.out_of_range.403] key 'backend' not found": the part after the tag.
    const std::string what = e.what();
    const std::size_t tag = what.find("] ");
    throw JsonInputError(at, tag == std::string::npos ? what : what.substr(tag + 2));
  } catch (const std::invalid_argument& e) {
    throw JsonInputError(at, e.what());
  }
}

namespace {

std::string json_report_text(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                             const RunContext& context) {
  return dump_json(report_json(results, load_errors, context), 2) + "\n";
}

}  // namespace

extern const ReportFormat kJsonReport{"--json", "write the versioned JSON report here", false, json_report_text};

}  // namespace attnres
