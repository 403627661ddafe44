#include "app/report/report.h"

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/report/error_map_image.h"
#include "app/report/xml_text.h"

namespace attnres {

using nlohmann::json;

std::string html_page(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      const RunContext& context) {
  const RunSummary summary = summarize(results, load_errors);
  std::string counts;
  for (int d = 0; d < kDispositionCount; ++d)
    if (summary.by_disposition[d])
      counts +=
          fmt::format("{}{} {}", counts.empty() ? "" : ", ", summary.by_disposition[d], to_string(Disposition(d)));
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
                      xml_escape(counts.empty() ? "none run" : counts), summary.load_errors,
                      summary.load_errors == 1 ? "y" : "ies");
  page += fmt::format("<p>backend {}, device {}, kernel {}, {} on {}</p>\n", xml_escape(context.backend),
                      xml_escape(context.device), xml_escape(context.kernel), xml_escape(context.timestamp),
                      xml_escape(context.hostname));
  for (const CaseLoadError& e : load_errors)
    page += fmt::format("<p class=\"unmet\">bad case: {}</p>\n", xml_escape(e.to_string()));
  page +=
      "<table><tr><th>verdict</th><th>case</th><th>kernel</th><th>max-abs</th><th>mismatched</th><th>seed</th>"
      "<th>checks</th></tr>\n";
  for (const CaseResult& r : results) {
    const bool met = meets_expectation(r.disposition);
    std::string checks;
    for (const PropertyResult& p : r.properties)
      checks += fmt::format("{}<span class=\"{}\" title=\"{}\">{} {}</span>", checks.empty() ? "" : "<br>",
                            meets_expectation(p.disposition) ? "met" : "unmet", xml_escape(p.detail),
                            to_string(p.property), to_string(p.disposition));
    page += fmt::format(
        "<tr><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        met ? "met" : "unmet", to_string(r.disposition), xml_escape(r.name), xml_escape(r.kernel),
        r.comparison ? fmt::format("{:.4g}", r.comparison->max_abs_error) : "-",
        r.comparison ? fmt::format("{} / {}", r.comparison->mismatched, r.comparison->total) : "-", r.seed,
        checks.empty() ? "-" : checks);
  }
  page += "</table>\n";
  for (const CaseResult& r : results) {
    if (meets_expectation(r.disposition)) continue;
    page += fmt::format("<h2 class=\"unmet\">{}: {}</h2>\n<p>{}</p>\n<pre>{}</pre>\n", xml_escape(r.name),
                        to_string(r.disposition), xml_escape(r.location), xml_escape(r.detail));
    for (const PropertyResult& p : r.properties)
      page +=
          fmt::format("<p class=\"{}\">{}: {}</p><pre>{}</pre>\n", meets_expectation(p.disposition) ? "met" : "unmet",
                      to_string(p.property), to_string(p.disposition), xml_escape(p.detail));
    if (const auto& map = r.error_map) {
      page += fmt::format(
          "<p>|out &minus; ref| over [T={}, H={}], tokens down, hidden across; each cell the largest "
          "difference of its elements, log scale:</p>\n",
          map->tokens, map->hidden);
      page +=
          "<p class=\"legend\"><span style=\"background:#1f3b73\"></span>to<span style=\"background:#5ec962\"></span>"
          "within tolerance (log |out &minus; ref|)<span style=\"background:#fdae61\"></span>to<span "
          "style=\"background:#a50026\"></span>some to all of the cell out of tolerance<span "
          "style=\"background:#000\"></span>non-finite</p>\n";
      const int cell_width = int(std::max<std::int64_t>(2, 1024 / std::max<std::int64_t>(map->columns, 1)));
      const int cell_height = int(std::max<std::int64_t>(2, 384 / std::max<std::int64_t>(map->rows, 1)));
      page += error_map_svg(*map, cell_width, cell_height) + "\n";
    }
  }
  return page + "</body></html>\n";
}

extern const ReportFormat kHtmlReport{
    "--html",
    "write one self-contained HTML page here: the summary, every case, and each case that did not meet its "
    "expectation with its message and error map",
    true, html_page};

}  // namespace attnres
