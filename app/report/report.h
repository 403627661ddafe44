// The reports a run or merge writes to files (--json, --junit, --csv, --html). Each format is one
// printer file that defines its ReportFormat; report_formats() (report.cpp) lists them, and the
// command line, the checks on report paths and the writing all go through that list. Printers
// only format; the commands decide where the text goes.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/engine/runner.h"
#include "app/report/json_report.h"
#include "app/report/report_format.h"
#include "app/report/run_summary.h"
#include "app/report/table.h"

namespace attnres {

// Every format, in the order they are written.
const std::vector<const ReportFormat*>& report_formats();

// The file each format is written to, by option; a format that is absent (or "") is not written.
using ReportFiles = std::map<std::string, std::string>;

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
