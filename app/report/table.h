// The table a run prints on standard output, in parts so that each case's rows are printed as
// soon as it is judged.
#pragma once
#include <string>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/engine/runner.h"
#include "app/report/run_summary.h"

namespace attnres {

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

}  // namespace attnres
