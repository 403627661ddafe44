#include "app/report/table.h"

#include <fmt/format.h>

#include "app/casefile/json_io.h"

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
    if (summary.by_disposition[d])
      parts += fmt::format(", {} {}", summary.by_disposition[d], to_string(Disposition(d)));
  if (summary.load_errors)
    parts += fmt::format(", {} bad case-file entr{}", summary.load_errors, summary.load_errors == 1 ? "y" : "ies");
  const int unmet = summary.total - summary.met + summary.load_errors;
  return fmt::format("{} case{}{}: {}", summary.total, summary.total == 1 ? "" : "s", parts,
                     summary.all_met()
                         ? (summary.total == 1 ? "it met its expectation" : "every case met its expectation")
                     : unmet == 1 ? "1 did not meet its expectation"
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
  std::string out =
      fmt::format("{}{}{} {:<{}} {:<{}} {:>10} {:>14}\n", style.color ? color_of(r.disposition) : "", verdict, reset,
                  printable(r.name), style.case_width, printable(r.kernel), style.kernel_width, max_abs, mismatched);
  // Why a case went the way it did is worth a line where it did not meet its expectation.
  if (!met || style.verbosity == Verbosity::verbose) {
    out +=
        fmt::format("  {}why: {}{}\n", dim, printable(r.dispatch_reason.empty() ? r.detail : r.dispatch_reason), reset);
    out += fmt::format("  {}\n", printable(r.detail));
  }
  // Each property on a line of its own: its verdict, and what it found or why it was not judged.
  for (const PropertyResult& p : r.properties)
    out += fmt::format("  {}{:<19}{} {:<16} {}{}{}\n", style.color ? color_of(p.disposition) : "",
                       to_string(p.disposition), reset, to_string(p.property), dim,
                       printable(one_line(p.detail, met && style.verbosity != Verbosity::verbose ? 120 : 2000)), reset);
  if (style.timings) {
    const PhaseTimes& p = r.timings;
    out += fmt::format(
        "  {}time: {:.3f} s (generate {:.3f}, kernel {:.3f}, reference {:.3f}, compare {:.3f}, checks {:.3f}){}\n", dim,
        r.seconds, p.generate, p.kernel, p.reference, p.compare, p.checks, reset);
  }
  return out;
}

std::string table_footer(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                         const TableStyle& style) {
  const char* red = style.color ? "\033[31m" : "";
  const char* reset = style.color ? "\033[0m" : "";
  std::string out;
  for (const CaseLoadError& e : load_errors)
    out += fmt::format("{}{:<21}{} {}\n", red, "bad-case", reset, printable(e.to_string()));
  // pytest's short summary: every case that did not meet its expectation, one line each.
  std::string unmet;
  for (const CaseResult& r : results)
    if (!meets_expectation(r.disposition))
      unmet +=
          fmt::format("  {}{:<21}{} {} (seed {}): {}\n", style.color ? color_of(r.disposition) : "",
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

}  // namespace attnres
