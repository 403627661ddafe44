#include "app/report/report.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/report/git_revision.h"
#include "app/report/xml_text.h"

namespace attnres {

using nlohmann::json;

namespace {

std::string file_of(const std::string& location) { return location.substr(0, location.find('#')); }

// A case file's path relative to the case root it was found under (a directory given on the
// command line; a file given there is named by itself), so class names do not depend on where
// the checkout is.
std::string relative_to_roots(const std::string& file, const std::vector<std::string>& roots) {
  namespace fs = std::filesystem;
  for (const std::string& root : roots) {
    if (fs::path(file).lexically_normal() == fs::path(root).lexically_normal())
      return fs::path(file).filename().string();
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
  // One testcase: its verdict as JUnit says it (error, skipped, failure or none) and what it says.
  const auto testcase = [&](Suite& suite, const std::string& classname, const std::string& name,
                            Disposition disposition, const std::string& detail, double seconds,
                            const std::string& system_out) {
    ++suite.tests;
    suite.time += seconds;
    std::string body;
    const std::string message = xml_escape(junit_message(detail));
    if (disposition == Disposition::error) {
      ++suite.errors;
      body = fmt::format("      <error type=\"error\" message=\"{}\">{}</error>\n", message, xml_escape(detail));
    } else if (disposition == Disposition::not_run || disposition == Disposition::skipped) {
      ++suite.skipped;
      body = fmt::format("      <skipped message=\"{}\"/>\n", message);
    } else if (!meets_expectation(disposition)) {
      ++suite.failures;
      body = fmt::format("      <failure type=\"{}\" message=\"{}\">{}</failure>\n", to_string(disposition), message,
                         xml_escape(detail));
    }
    body += fmt::format("      <system-out>{}</system-out>\n", system_out);
    suite.body += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n{}    </testcase>\n",
                              classname, xml_escape(name), seconds, body);
  };
  for (const CaseResult& r : results) {
    Suite& suite = suites[file_of(r.location)];
    const std::string classname =
        "attnres-check." + xml_escape(relative_to_roots(file_of(r.location), context.case_roots));
    testcase(suite, classname, r.name, r.disposition, r.detail, r.seconds,
             fmt::format("disposition: {}\nkernel: {} ({})\nlayout guard: {}\n{}{}", to_string(r.disposition),
                         xml_escape(r.kernel), xml_escape(r.dispatch_reason), r.layout_guard ? "on" : "off",
                         xml_escape(r.detail), r.kernel_context.empty() ? "" : "\n" + xml_escape(r.kernel_context)));
    // Each property its own testcase, "case[check]", so that a CI view says which one failed.
    for (const PropertyResult& p : r.properties)
      testcase(suite, classname, fmt::format("{}[{}]", r.name, to_string(p.property)), p.disposition, p.detail,
               p.seconds,
               fmt::format("disposition: {}\nkernel: {}\n{}", to_string(p.disposition), xml_escape(r.kernel),
                           xml_escape(p.detail)));
  }
  for (const CaseLoadError& e : load_errors) {
    Suite& suite = suites[e.file];
    ++suite.tests;
    ++suite.errors;
    suite.body += fmt::format(
        "    <testcase classname=\"attnres-check.{}\" name=\"load {}\" time=\"0\">\n"
        "      <error type=\"bad-case\" message=\"{}\">{}</error>\n    </testcase>\n",
        xml_escape(relative_to_roots(e.file, context.case_roots)), xml_escape(e.pointer.empty() ? "file" : e.pointer),
        xml_escape(junit_message(e.message)), xml_escape(e.to_string()));
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
      "<testsuites name=\"attnres-check\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n{}</testsuites>\n",
      tests, failures, errors, skipped, time, body);
}

extern const ReportFormat kJunitReport{"--junit", "write JUnit XML here (one testsuite per case file)", false,
                                       junit_xml};

}  // namespace attnres
