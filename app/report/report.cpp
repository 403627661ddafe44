#include "app/report/report.h"

namespace attnres {

// Each defined in its printer's file.
extern const ReportFormat kJsonReport;
extern const ReportFormat kJunitReport;
extern const ReportFormat kCsvReport;
extern const ReportFormat kHtmlReport;

const std::vector<const ReportFormat*>& report_formats() {
  static const std::vector<const ReportFormat*> formats{&kJsonReport, &kJunitReport, &kCsvReport, &kHtmlReport};
  return formats;
}

}  // namespace attnres
