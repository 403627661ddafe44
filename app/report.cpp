#include "app/report.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/csv.h"
#include "app/error_map_image.h"
#include "app/git_revision.h"
#include "app/json_io.h"
#include "app/result_json.h"

namespace attnres {

using nlohmann::json;

namespace {

const char* color_of(Disposition d) {
  switch (d) {
    case Disposition::passed:
    case Disposition::rejected_as_expected: return "\033[32m";
    case Disposition::not_run:
    case Disposition::skipped: return "\033[33m";
    default: return "\033[31m";
  }
}

std::string summary_line(const RunSummary& summary) {
  std::string parts;
  for (int d = 0; d < kDispositionCount; ++d)
    if (summary.by_disposition[d]) parts += fmt::format(", {} {}", summary.by_disposition[d], to_string(Disposition(d)));
  if (summary.load_errors)
    parts += fmt::format(", {} bad case-file entr{}", summary.load_errors, summary.load_errors == 1 ? "y" : "ies");
  const int unmet = summary.total - summary.met + summary.load_errors;
  return fmt::format("{} case{}{}: {}", summary.total, summary.total == 1 ? "" : "s", parts,
                     summary.all_met() ? (summary.total == 1 ? "it met its expectation" : "every case met its expectation")
                     : unmet == 1      ? "1 did not meet its expectation"
                                       : fmt::format("{} did not meet their expectations", unmet));
}

// The first line of `text`, cut to `width` characters with a visible marker.
std::string one_line(const std::string& text, std::size_t width) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > width) line = line.substr(0, width - 3) + "...";
  return line;
}

}  // namespace

void fit_columns(TableStyle& style, const std::vector<std::string>& case_names,
                 const std::vector<std::string>& kernel_names) {
  const auto widen = [](std::size_t& width, const std::vector<std::string>& names) {
    constexpr std::size_t kMaxWidth = 64;
    for (const std::string& name : names) width = std::max(width, std::min(printable(name).size(), kMaxWidth));
  };
  widen(style.case_width, case_names);
  widen(style.kernel_width, kernel_names);
}

std::string table_header(const RunContext& context, const TableStyle& style) {
  // A merged run's context comes from report files: printable, like every field from a file.
  return printable(fmt::format("backend {}, device {}, native images in build: {}, kernel: {}", context.backend,
                               context.device, fmt::join(context.native_images, ", "), context.kernel)) +
         "\n" +
         fmt::format("{:<21} {:<{}} {:<{}} {:>10} {:>14}\n", "verdict", "case", style.case_width, "kernel",
                     style.kernel_width, "max-abs", "mismatched");
}

std::string table_rows(const CaseResult& r, const TableStyle& style) {
  const bool met = meets_expectation(r.disposition);
  if (style.verbosity == Verbosity::quiet && met) return "";
  const char* dim = style.color ? "\033[2m" : "";
  const char* reset = style.color ? "\033[0m" : "";
  std::string max_abs = "-", mismatched = "-";
  if (r.comparison) {
    max_abs = fmt::format("{:.4g}", r.comparison->max_abs_error);
    mismatched = fmt::format("{}/{}", r.comparison->mismatched, r.comparison->total);
  }
  const std::string verdict = fmt::format("{:<21}", to_string(r.disposition));
  std::string out = fmt::format("{}{}{} {:<{}} {:<{}} {:>10} {:>14}\n", style.color ? color_of(r.disposition) : "", verdict,
                                reset, printable(r.name), style.case_width, printable(r.kernel), style.kernel_width,
                                max_abs, mismatched);
  // Why a case went the way it did is worth a line where it did not meet its expectation.
  if (!met || style.verbosity == Verbosity::verbose) {
    out += fmt::format("  {}why: {}{}\n", dim, printable(r.dispatch_reason.empty() ? r.detail : r.dispatch_reason), reset);
    out += fmt::format("  {}\n", printable(r.detail));
  }
  if (style.timings) {
    const PhaseTimes& p = r.timings;
    out += fmt::format("  {}time: {:.3f} s (generate {:.3f}, kernel {:.3f}, reference {:.3f}, compare {:.3f}, checks {:.3f}){}\n",
                       dim, r.seconds, p.generate, p.kernel, p.reference, p.compare, p.checks, reset);
  }
  return out;
}

std::string table_footer(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                         const TableStyle& style) {
  const char* red = style.color ? "\033[31m" : "";
  const char* reset = style.color ? "\033[0m" : "";
  std::string out;
  for (const CaseLoadError& e : load_errors) out += fmt::format("{}{:<21}{} {}\n", red, "bad-case", reset, printable(e.to_string()));
  // pytest's short summary: every case that did not meet its expectation, one line each.
  std::string unmet;
  for (const CaseResult& r : results)
    if (!meets_expectation(r.disposition))
      unmet += fmt::format("  {}{:<21}{} {} (seed {}): {}\n", style.color ? color_of(r.disposition) : "",
                           to_string(r.disposition), reset, printable(r.name), r.seed, printable(one_line(r.detail, 160)));
  for (const CaseLoadError& e : load_errors)
    unmet += fmt::format("  {}{:<21}{} {}\n", red, "bad-case", reset, printable(one_line(e.to_string(), 160)));
  if (!unmet.empty()) out += "not meeting their expectations:\n" + unmet;
  out += summary_line(summarize(results, load_errors)) + "\n";
  return out;
}

std::string format_table(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                         const RunContext& context, const TableStyle& style) {
  TableStyle fitted = style;
  std::vector<std::string> case_names, kernel_names;
  for (const CaseResult& r : results) {
    case_names.push_back(r.name);
    kernel_names.push_back(r.kernel);
  }
  fit_columns(fitted, case_names, kernel_names);
  std::string out = table_header(context, fitted);
  for (const CaseResult& r : results) out += table_rows(r, fitted);
  return out + table_footer(results, load_errors, fitted);
}

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

std::string results_csv(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors) {
  std::string csv = csv_row({"name", "disposition", "meets_expectation", "kernel", "backend", "device", "seed", "reference",
                             "max_abs_error", "worst_t", "worst_h", "mismatched", "total", "nan_count", "inf_count",
                             "prefix_mismatches", "blocks_mismatches", "damaged_elements", "seconds", "detail"});
  for (const CaseResult& r : results) {
    std::vector<std::string> row{r.name, to_string(r.disposition), meets_expectation(r.disposition) ? "true" : "false",
                                 r.kernel, r.backend, r.device, std::to_string(r.seed)};
    if (const auto& c = r.comparison) {
      for (const std::string& cell :
           {c->reference, fmt::format("{}", c->max_abs_error), std::to_string(c->worst_token), std::to_string(c->worst_column),
            std::to_string(c->mismatched), std::to_string(c->total), std::to_string(c->nan_count), std::to_string(c->inf_count),
            std::to_string(c->prefix_mismatches), std::to_string(c->blocks_mismatches)})
        row.push_back(cell);
    } else {
      row.insert(row.end(), 10, "");
    }
    std::int64_t damaged = 0;
    for (const Violation& v : r.violations) damaged += v.count;
    row.push_back(std::to_string(damaged));
    row.push_back(fmt::format("{:.6f}", r.seconds));
    row.push_back(r.detail);
    csv += csv_row(row);
  }
  // A bad case-file entry is a row too, as in the JSON and JUnit reports: named by where it is.
  for (const CaseLoadError& e : load_errors) {
    std::vector<std::string> row{e.pointer.empty() ? e.file : e.file + "#" + e.pointer, "bad-case", "false"};
    row.insert(row.end(), 16, "");
    row.push_back(e.message);
    csv += csv_row(row);
  }
  return csv;
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
    for (auto [field, value] : {std::pair{"backend", &c.backend}, {"device", &c.device}, {"command_line", &c.command_line},
                                {"kernel", &c.kernel}, {"timestamp", &c.timestamp}, {"hostname", &c.hostname}}) {
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
      report.load_errors.push_back({e.at("file").get<std::string>(), e.at("pointer").get<std::string>(),
                                    e.at("message").get<std::string>()});
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

// Valid UTF-8 (invalid bytes become U+FFFD) with XML's special characters escaped.
std::string xml_escape(const std::string& raw) {
  std::string text = valid_utf8(raw);
  // U+FFFE and U+FFFF are not XML characters even when escaped.
  for (const char* noncharacter : {"\xEF\xBF\xBE", "\xEF\xBF\xBF"})
    for (std::size_t at; (at = text.find(noncharacter)) != std::string::npos;) text.replace(at, 3, "\xEF\xBF\xBD");
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters even when escaped.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t') out += c;
    }
  }
  return out;
}

std::string file_of(const std::string& location) { return location.substr(0, location.find('#')); }

// A case file's path relative to the case root it was found under (a directory given on the
// command line; a file given there is named by itself), so class names do not depend on where
// the checkout is.
std::string relative_to_roots(const std::string& file, const std::vector<std::string>& roots) {
  namespace fs = std::filesystem;
  for (const std::string& root : roots) {
    if (fs::path(file).lexically_normal() == fs::path(root).lexically_normal()) return fs::path(file).filename().string();
    const fs::path relative = fs::path(file).lexically_relative(root);
    if (!relative.empty() && *relative.begin() != ".." && *relative.begin() != ".") return relative.generic_string();
  }
  return file;
}

// A JUnit message attribute: one line of at most 400 characters, cut visibly (the whole text
// is in the element's body and system-out).
std::string junit_message(const std::string& detail) {
  constexpr std::size_t kWidth = 400;
  std::string line = detail.substr(0, detail.find('\n'));
  if (line.size() <= kWidth && line.size() == detail.size()) return line;
  line = line.substr(0, kWidth);
  return line + fmt::format(" [cut: {} characters in all, the full text is in system-out]", detail.size());
}

}  // namespace

std::string junit_xml(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      const RunContext& context) {
  struct Suite {
    std::string body;
    int tests = 0, failures = 0, errors = 0, skipped = 0;
    double time = 0;
  };
  std::map<std::string, Suite> suites;
  for (const CaseResult& r : results) {
    Suite& suite = suites[file_of(r.location)];
    ++suite.tests;
    suite.time += r.seconds;
    std::string body;
    const std::string message = xml_escape(junit_message(r.detail));
    if (r.disposition == Disposition::error) {
      ++suite.errors;
      body = fmt::format("      <error type=\"error\" message=\"{}\">{}</error>\n", message, xml_escape(r.detail));
    } else if (r.disposition == Disposition::not_run || r.disposition == Disposition::skipped) {
      ++suite.skipped;
      body = fmt::format("      <skipped message=\"{}\"/>\n", message);
    } else if (!meets_expectation(r.disposition)) {
      ++suite.failures;
      body = fmt::format("      <failure type=\"{}\" message=\"{}\">{}</failure>\n", to_string(r.disposition), message,
                         xml_escape(r.detail));
    }
    body += fmt::format("      <system-out>disposition: {}\nkernel: {} ({})\nlayout guard: {}\n{}{}</system-out>\n",
                        to_string(r.disposition), xml_escape(r.kernel), xml_escape(r.dispatch_reason),
                        r.layout_guard ? "on" : "off", xml_escape(r.detail),
                        r.kernel_context.empty() ? "" : "\n" + xml_escape(r.kernel_context));
    suite.body += fmt::format("    <testcase classname=\"attnres-check.{}\" name=\"{}\" time=\"{:.3f}\">\n{}    </testcase>\n",
                              xml_escape(relative_to_roots(file_of(r.location), context.case_roots)), xml_escape(r.name),
                              r.seconds, body);
  }
  for (const CaseLoadError& e : load_errors) {
    Suite& suite = suites[e.file];
    ++suite.tests;
    ++suite.errors;
    suite.body += fmt::format(
        "    <testcase classname=\"attnres-check.{}\" name=\"load {}\" time=\"0\">\n"
        "      <error type=\"bad-case\" message=\"{}\">{}</error>\n    </testcase>\n",
        xml_escape(relative_to_roots(e.file, context.case_roots)), xml_escape(e.pointer.empty() ? "file" : e.pointer),
        xml_escape(junit_message(e.message)),
        xml_escape(e.to_string()));
  }
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  double time = 0;
  // What ran, on every suite: a CPU stand-in result must not pass for a GPU one.
  std::string properties = "    <properties>\n";
  for (const auto& [key, value] : {std::pair<const char*, std::string>{"backend", context.backend},
                                   {"device", context.device},
                                   {"kernel", context.kernel},
                                   {"tool_version", ATTNRES_VERSION},
                                   {"git_revision", kGitRevision}})
    properties += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", key, xml_escape(value));
  properties += "    </properties>\n";
  std::string body;
  for (const auto& [name, s] : suites) {
    tests += s.tests;
    failures += s.failures;
    errors += s.errors;
    skipped += s.skipped;
    time += s.time;
    body += fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3f}\" "
        "timestamp=\"{}\" hostname=\"{}\">\n{}{}  </testsuite>\n",
        xml_escape(relative_to_roots(name, context.case_roots)), s.tests, s.failures, s.errors, s.skipped, s.time,
        xml_escape(context.timestamp), xml_escape(context.hostname), properties, s.body);
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<testsuites name=\"attnres-check\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3f}\">\n{}</testsuites>\n",
      tests, failures, errors, skipped, time, body);
}

}  // namespace attnres

namespace attnres {

std::string html_page(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      const RunContext& context) {
  const RunSummary summary = summarize(results, load_errors);
  std::string counts;
  for (int d = 0; d < kDispositionCount; ++d)
    if (summary.by_disposition[d]) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", summary.by_disposition[d], to_string(Disposition(d)));
  std::string page = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>attnres-check report</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: left; border-bottom: 1px solid #ddd; }
.unmet { color: #a50026; font-weight: bold; } .met { color: #1a7f37; }
pre { white-space: pre-wrap; background: #f6f6f6; padding: 0.5em; }
.legend span { display: inline-block; width: 1em; height: 1em; vertical-align: middle; margin: 0 0.3em 0 1em; }
</style></head><body>
)";
  page += fmt::format("<h1>attnres-check: {}</h1>\n", summary.all_met() ? "every case met its expectation"
                                                                          : "some cases did not meet their expectations");
  page += fmt::format("<p>{} case{}: {}; {} bad case-file entr{}.</p>\n", summary.total, summary.total == 1 ? "" : "s",
                      xml_escape(counts.empty() ? "none run" : counts), summary.load_errors, summary.load_errors == 1 ? "y" : "ies");
  page += fmt::format("<p>backend {}, device {}, kernel {}, {} on {}</p>\n", xml_escape(context.backend),
                      xml_escape(context.device), xml_escape(context.kernel), xml_escape(context.timestamp),
                      xml_escape(context.hostname));
  for (const CaseLoadError& e : load_errors) page += fmt::format("<p class=\"unmet\">bad case: {}</p>\n", xml_escape(e.to_string()));
  page += "<table><tr><th>verdict</th><th>case</th><th>kernel</th><th>max-abs</th><th>mismatched</th><th>seed</th></tr>\n";
  for (const CaseResult& r : results) {
    const bool met = meets_expectation(r.disposition);
    page += fmt::format("<tr><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                        met ? "met" : "unmet", to_string(r.disposition), xml_escape(r.name), xml_escape(r.kernel),
                        r.comparison ? fmt::format("{:.4g}", r.comparison->max_abs_error) : "-",
                        r.comparison ? fmt::format("{} / {}", r.comparison->mismatched, r.comparison->total) : "-", r.seed);
  }
  page += "</table>\n";
  for (const CaseResult& r : results) {
    if (meets_expectation(r.disposition)) continue;
    page += fmt::format("<h2 class=\"unmet\">{}: {}</h2>\n<p>{}</p>\n<pre>{}</pre>\n", xml_escape(r.name),
                        to_string(r.disposition), xml_escape(r.location), xml_escape(r.detail));
    if (const auto& map = r.error_map) {
      page += fmt::format("<p>|out &minus; ref| over [T={}, H={}], tokens down, hidden across; each cell the largest "
                          "difference of its elements, log scale:</p>\n",
                          map->tokens, map->hidden);
      page += "<p class=\"legend\"><span style=\"background:#1f3b73\"></span>to<span style=\"background:#5ec962\"></span>"
              "within tolerance (log |out &minus; ref|)<span style=\"background:#fdae61\"></span>to<span "
              "style=\"background:#a50026\"></span>some to all of the cell out of tolerance<span style=\"background:#000\"></span>non-finite</p>\n";
      const int cell_width = int(std::max<std::int64_t>(2, 1024 / std::max<std::int64_t>(map->columns, 1)));
      const int cell_height = int(std::max<std::int64_t>(2, 384 / std::max<std::int64_t>(map->rows, 1)));
      page += error_map_svg(*map, cell_width, cell_height) + "\n";
    }
  }
  return page + "</body></html>\n";
}

}  // namespace attnres
