// Printers: turn results into the human table, the JSON report, JUnit XML, CSV and an HTML
// page. They only format; main decides where the text goes.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/case_spec.h"
#include "app/run_summary.h"
#include "app/runner.h"

namespace attnres {

constexpr int kReportSchemaVersion = 1;

enum class Verbosity {
  quiet,    // only the cases that did not meet their expectations, and the summary
  normal,   // every case; why and what happened under those that did not meet their expectations
  verbose,  // why and what happened under every case
};

struct TableStyle {
  bool color = false;
  bool timings = false;  // a line of phase times under each shown case (run --timings)
  Verbosity verbosity = Verbosity::normal;
  // Widths of the case and kernel columns; fit_columns widens them to the names a run will print,
  // so that rows printed as each case is judged stay under their headings.
  std::size_t case_width = 44;
  std::size_t kernel_width = 9;
};

// Widens style's case and kernel columns to the longest of these names as printed (at most 64
// characters each: a longer name runs past its column).
void fit_columns(TableStyle& style, const std::vector<std::string>& case_names,
                 const std::vector<std::string>& kernel_names);

// The table in three parts, so a run can print each case's rows as soon as it is judged (the
// column widths are fixed): the header, one case's rows, and the closing part (bad case-file
// entries, a short summary naming every case that did not meet its expectation, the counts).
std::string table_header(const RunContext& context, const TableStyle& style);
std::string table_rows(const CaseResult& result, const TableStyle& style);
std::string table_footer(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                         const TableStyle& style);
std::string format_table(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                         const RunContext& context, const TableStyle& style);
nlohmann::json report_json(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                           const RunContext& context);
// A report as report_json wrote it, read back (for merge).
struct LoadedReport {
  std::vector<CaseResult> results;
  std::vector<CaseLoadError> load_errors;
  RunContext context;
};
// The inverse of report_json. Throws JsonInputError naming the JSON pointer of what is wrong.
LoadedReport report_from_json(const nlohmann::json& report);

// One row per case (RFC 4180): name, disposition, meets_expectation, kernel, backend, device,
// seed, reference, max_abs_error, worst_t, worst_h, mismatched, total, nan_count, inf_count,
// prefix_mismatches, blocks_mismatches, damaged_elements (the violations' counts), seconds, detail;
// then one per bad case-file entry (name file#pointer, disposition bad-case, detail its message).
// A text cell that a spreadsheet would read as a formula starts with '.
std::string results_csv(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors);

// One self-contained HTML page (no scripts, fonts or other files): the summary, every case in a
// table, and under it each case that did not meet its expectation with its message and, where
// the result has one, its error map.
std::string html_page(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      const RunContext& context);

std::string junit_xml(const std::vector<CaseResult>& results, const std::vector<CaseLoadError>& load_errors,
                      const RunContext& context);

}  // namespace attnres
