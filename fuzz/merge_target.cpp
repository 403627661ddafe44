// libFuzzer target: a JSON report's bytes, as `merge` reads what a CI job uploaded. A report that
// is read must print in every format, and write out and read back to the same report.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "app/casefile/json_io.h"
#include "app/report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attnres;
  LoadedReport report;
  try {
    report = report_from_json(parse_json_strict(std::string_view(reinterpret_cast<const char*>(data), size)));
  } catch (const JsonInputError&) {
    return 0;  // refused with the JSON pointer of what is wrong: what merge says
  }
  format_table(report.results, report.load_errors, report.context, TableStyle{});
  junit_xml(report.results, report.load_errors, report.context);
  results_csv(report.results, report.load_errors);
  html_page(report.results, report.load_errors, report.context);
  const nlohmann::json written = report_json(report.results, report.load_errors, report.context);
  const LoadedReport again = report_from_json(parse_json_strict(dump_json(written)));
  if (dump_json(report_json(again.results, again.load_errors, again.context)) != dump_json(written)) std::abort();
  return 0;
}
