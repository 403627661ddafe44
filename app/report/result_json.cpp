#include "app/report/result_json.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "kernels/common/problem.h"

namespace attnres {

using nlohmann::json;

json json_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return value;
}

double number_from_json(const json& value) {
  if (value.is_number()) return value.get<double>();
  if (value == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (value == "Infinity") return INFINITY;
  if (value == "-Infinity") return -INFINITY;
  // Never the value itself: it may be a document's whole sub-tree.
  throw std::invalid_argument(
      std::string("expected a number, \"NaN\", \"Infinity\" or \"-Infinity\", got ") +
      (value.is_string() ? quoted_literal(value.get<std::string>().substr(0, 40)) : value.type_name()));
}

json result_json(const CaseResult& r) {
  json j = {{"name", r.name},
            {"location", r.location},
            {"seed", r.seed},
            {"disposition", to_string(r.disposition)},
            {"meets_expectation", meets_expectation(r.disposition)},
            {"detail", r.detail},
            {"backend", r.backend},
            {"device", r.device},
            {"kernel", r.kernel},
            {"dispatch_reason", r.dispatch_reason},
            {"expectation", r.expectation},
            {"layout_guard", r.layout_guard},
            {"seconds", r.seconds},
            {"timings",
             {{"generate", r.timings.generate},
              {"kernel", r.timings.kernel},
              {"reference", r.timings.reference},
              {"compare", r.timings.compare},
              {"checks", r.timings.checks},
              {"report", r.timings.report}}}};
  j["rejection"] = r.rejection ? json(*r.rejection) : json(nullptr);
  j["kernel_context"] = r.kernel_context;
  if (r.comparison) {
    const Comparison& c = *r.comparison;
    j["comparison"] = {{"reference", c.reference},
                       {"atol", c.atol},
                       {"rtol", c.rtol},
                       {"max_abs_error", json_number(c.max_abs_error)},
                       {"max_rel_error", json_number(c.max_rel_error)},
                       {"worst_index", {c.worst_token, c.worst_column}},
                       {"worst_value", json_number(c.worst_value)},
                       {"worst_reference", json_number(c.worst_reference)},
                       {"mismatched", c.mismatched},
                       {"total", c.total},
                       {"mismatch_summary", c.mismatch_summary()},
                       {"nan_count", c.nan_count},
                       {"inf_count", c.inf_count},
                       {"prefix_exact", c.prefix_mismatches == 0},
                       {"prefix_mismatches", c.prefix_mismatches},
                       {"first_prefix_mismatch", c.first_prefix_mismatch},
                       {"blocks_exact", c.blocks_mismatches == 0},
                       {"blocks_mismatches", c.blocks_mismatches},
                       {"first_blocks_mismatch", c.first_blocks_mismatch},
                       {"mean_error", json_number(c.mean_error)},
                       {"mean_spacing", json_number(c.mean_spacing)},
                       {"systematic", c.systematic()}};
  } else {
    j["comparison"] = nullptr;
  }
  j["violations"] = json::array();
  for (const Violation& v : r.violations)
    j["violations"].push_back(
        {{"tensor", v.tensor}, {"kind", v.kind}, {"row", v.row}, {"col", v.col}, {"count", v.count}});
  if (const auto& map = r.error_map) {
    json cells = json::array();
    for (const double e : map->max_error) cells.push_back(json_number(e));
    j["error_map"] = {{"rows", map->rows},     {"columns", map->columns}, {"tokens", map->tokens},
                      {"hidden", map->hidden}, {"max_error", cells},      {"mismatched", map->mismatched}};
  } else {
    j["error_map"] = nullptr;
  }
  j["input_checksums"] = json::object();
  for (const auto& [name, sum] : r.input_checksums) j["input_checksums"][name] = sum;
  j["properties"] = json::array();
  for (const PropertyResult& p : r.properties)
    j["properties"].push_back({{"check", to_string(p.property)},
                               {"disposition", to_string(p.disposition)},
                               {"detail", p.detail},
                               {"seconds", p.seconds}});
  if (r.sanitizer) j["sanitizer"] = {{"tool", r.sanitizer->tool}, {"report", r.sanitizer->report}};
  return j;
}

namespace {

// Numbers read strictly: an integer field holds an integer literal in range (1e300, 2.5 and -1
// are errors, never a silent conversion).
std::int64_t integer_in(const json& value, const std::string& field, std::int64_t low, std::int64_t high) {
  std::optional<std::int64_t> got;
  if (value.is_number_unsigned()) {
    if (value.get<std::uint64_t>() <= std::uint64_t(INT64_MAX)) got = std::int64_t(value.get<std::uint64_t>());
  } else if (value.is_number_integer()) {
    got = value.get<std::int64_t>();
  }
  if (!got || *got < low || *got > high)
    throw std::invalid_argument(fmt::format("{}: must be an integer in [{}, {}, got {}", field, low,
                                            high == INT64_MAX ? "2^63)" : std::to_string(high) + "]",
                                            value.is_number() ? value.dump() : value.type_name()));
  return *got;
}

std::int64_t count_of(const json& value, const std::string& field) { return integer_in(value, field, 0, INT64_MAX); }
// An index that is -1 where there is none.
std::int64_t index_of(const json& value, const std::string& field) { return integer_in(value, field, -1, INT64_MAX); }

}  // namespace

int schema_version_of(const json& value, int newest) {
  const bool newer = value.is_number_unsigned() ? value.get<std::uint64_t>() > std::uint64_t(newest)
                                                : value.is_number_integer() && value.get<std::int64_t>() > newest;
  if (newer)
    throw std::invalid_argument(fmt::format("schema_version {} is newer than this tool's ({})", value.dump(), newest));
  return int(integer_in(value, "schema_version", 1, newest));
}

CaseResult result_from_json(const json& j) {
  CaseResult r;
  r.name = j.at("name").get<std::string>();
  r.location = j.at("location").get<std::string>();
  const json& seed = j.at("seed");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<std::int64_t>() >= 0))
    throw std::invalid_argument(fmt::format("seed: must be an integer in [0, 2^64), got {}",
                                            seed.is_number() ? seed.dump() : seed.type_name()));
  r.seed = seed.get<std::uint64_t>();
  const std::string disposition = j.at("disposition").get<std::string>();
  const std::optional<Disposition> parsed = parse_disposition(disposition);
  if (!parsed) throw std::invalid_argument("unknown disposition \"" + disposition + "\"");
  r.disposition = *parsed;
  r.detail = j.at("detail").get<std::string>();
  r.backend = j.at("backend").get<std::string>();
  r.device = j.at("device").get<std::string>();
  r.kernel = j.at("kernel").get<std::string>();
  r.dispatch_reason = j.at("dispatch_reason").get<std::string>();
  if (const auto e = j.find("expectation"); e != j.end()) r.expectation = e->get<std::string>();
  r.layout_guard = j.at("layout_guard").get<bool>();
  r.seconds = j.at("seconds").get<double>();
  const json& t = j.at("timings");
  r.timings = {t.at("generate").get<double>(), t.at("kernel").get<double>(), t.at("reference").get<double>(),
               t.at("compare").get<double>(),  t.at("checks").get<double>(), t.value("report", 0.0)};
  if (!j.at("rejection").is_null()) r.rejection = j.at("rejection").get<std::string>();
  r.kernel_context = j.at("kernel_context").get<std::string>();
  if (const json& c = j.at("comparison"); !c.is_null()) {
    Comparison& out = r.comparison.emplace();
    out.reference = c.at("reference").get<std::string>();
    out.atol = c.at("atol").get<double>();
    out.rtol = c.at("rtol").get<double>();
    out.max_abs_error = number_from_json(c.at("max_abs_error"));
    out.max_rel_error = number_from_json(c.at("max_rel_error"));
    out.worst_token = index_of(c.at("worst_index").at(0), "comparison/worst_index/0");
    out.worst_column = index_of(c.at("worst_index").at(1), "comparison/worst_index/1");
    out.worst_value = number_from_json(c.at("worst_value"));
    out.worst_reference = number_from_json(c.at("worst_reference"));
    out.mismatched = count_of(c.at("mismatched"), "comparison/mismatched");
    out.total = count_of(c.at("total"), "comparison/total");
    out.nan_count = count_of(c.at("nan_count"), "comparison/nan_count");
    out.inf_count = count_of(c.at("inf_count"), "comparison/inf_count");
    out.prefix_mismatches = count_of(c.at("prefix_mismatches"), "comparison/prefix_mismatches");
    out.first_prefix_mismatch = c.at("first_prefix_mismatch").get<std::string>();
    out.blocks_mismatches = count_of(c.at("blocks_mismatches"), "comparison/blocks_mismatches");
    out.first_blocks_mismatch = c.at("first_blocks_mismatch").get<std::string>();
    // Reports of older versions have no means: no bias is read into them.
    if (c.contains("mean_error")) out.mean_error = number_from_json(c.at("mean_error"));
    if (c.contains("mean_spacing")) out.mean_spacing = number_from_json(c.at("mean_spacing"));
  }
  for (const json& v : j.at("violations"))
    r.violations.push_back({v.at("tensor").get<std::string>(), v.at("kind").get<std::string>(),
                            index_of(v.at("row"), "violations/row"), index_of(v.at("col"), "violations/col"),
                            count_of(v.at("count"), "violations/count")});
  for (const auto& [name, sum] : j.at("input_checksums").items())
    r.input_checksums.emplace_back(name, sum.get<std::string>());
  // Reports written before properties were judged have none.
  if (const auto properties = j.find("properties"); properties != j.end()) {
    for (const json& p : *properties) {
      PropertyResult& out = r.properties.emplace_back();
      const std::string check = p.at("check").get<std::string>();
      const std::optional<CaseProperty> property = parse_case_property(check);
      if (!property) throw std::invalid_argument("properties: unknown check " + quoted_literal(check));
      out.property = *property;
      const std::string disposition = p.at("disposition").get<std::string>();
      const std::optional<Disposition> parsed = parse_disposition(disposition);
      if (!parsed) throw std::invalid_argument("properties: unknown disposition " + quoted_literal(disposition));
      out.disposition = *parsed;
      out.detail = p.at("detail").get<std::string>();
      out.seconds = p.at("seconds").get<double>();
    }
  }
  if (const auto sanitizer = j.find("sanitizer"); sanitizer != j.end())
    r.sanitizer =
        SanitizerFinding{sanitizer->at("tool").get<std::string>(), sanitizer->at("report").get<std::string>()};
  // Reports written before error maps have none.
  if (const auto map = j.find("error_map"); map != j.end() && !map->is_null()) {
    ErrorMap& out = r.error_map.emplace();
    out.rows = count_of(map->at("rows"), "error_map/rows");
    out.columns = count_of(map->at("columns"), "error_map/columns");
    out.tokens = count_of(map->at("tokens"), "error_map/tokens");
    out.hidden = count_of(map->at("hidden"), "error_map/hidden");
    for (const json& e : map->at("max_error")) out.max_error.push_back(number_from_json(e));
    for (const json& m : map->at("mismatched")) out.mismatched.push_back(count_of(m, "error_map/mismatched"));
    // A report given to merge may come from anywhere: the map must have the shape this tool
    // gives a [tokens, hidden] output (empty_error_map) before anything walks its cells.
    const bool sizes_in_range =
        out.tokens >= 0 && out.tokens <= kMaxTokens && out.hidden >= 0 && out.hidden <= kMaxHidden;
    if (!sizes_in_range || out.rows != std::min(out.tokens, kErrorMapRows) ||
        out.columns != std::min(out.hidden, kErrorMapColumns) ||
        out.max_error.size() != std::size_t(out.rows * out.columns) || out.mismatched.size() != out.max_error.size())
      throw std::invalid_argument(
          fmt::format("error_map: {} x {} cells of {} and {} values for a [{}, {}] output; "
                      "this tool maps one onto min(T, {}) x min(H, {}) cells",
                      out.rows, out.columns, out.max_error.size(), out.mismatched.size(), out.tokens, out.hidden,
                      kErrorMapRows, kErrorMapColumns));
  }
  return r;
}

}  // namespace attnres
