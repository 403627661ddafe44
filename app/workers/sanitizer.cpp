#include "app/workers/sanitizer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "app/bundle/failure_bundles.h"
#include "app/casefile/json_io.h"
#include "app/engine/command_output.h"
#include "app/workers/make_backend.h"
#include "app/workers/worker_protocol.h"

namespace attnres {

namespace fs = std::filesystem;

namespace {

bool executable_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

// The text after compute-sanitizer's "========= " on each line of its report.
constexpr const char* kLinePrefix = "========= ";

// The count before `word` in a summary ("ERROR SUMMARY: 2 errors", "(1 error, 0 warnings)").
int count_before(const std::string& line, const std::string& word) {
  const std::size_t at = line.find(" " + word);
  if (at == std::string::npos) return 0;
  std::size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(line[start - 1]))) --start;
  return start == at ? 0 : std::atoi(line.substr(start, at - start).c_str());
}

}  // namespace

std::string find_compute_sanitizer() {
  if (const char* chosen = std::getenv("ATTNRES_COMPUTE_SANITIZER"); chosen && *chosen) {
    if (!executable_file(chosen))
      throw UsageError(fmt::format("--sanitizer: ATTNRES_COMPUTE_SANITIZER={} is not an executable file", chosen));
    return fs::absolute(chosen).string();
  }
  std::vector<fs::path> looked;
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    for (std::size_t start = 0; start <= dirs.size();) {
      const std::size_t end = std::min(dirs.find(':', start), dirs.size());
      if (end > start) looked.push_back(fs::path(dirs.substr(start, end - start)) / "compute-sanitizer");
      start = end + 1;
    }
  }
  if (const char* cuda = std::getenv("CUDA_HOME"); cuda && *cuda)
    looked.push_back(fs::path(cuda) / "bin/compute-sanitizer");
  looked.push_back("/usr/local/cuda/bin/compute-sanitizer");
  for (const fs::path& candidate : looked)
    if (executable_file(candidate)) return fs::absolute(candidate).string();
  throw UsageError(
      "--sanitizer: compute-sanitizer not found on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin (it comes with "
      "the CUDA toolkit); set ATTNRES_COMPUTE_SANITIZER to its path");
}

SanitizerPlan make_sanitizer_plan(const std::string& tool, const std::string& reports) {
  SanitizerPlan plan;
  plan.tool = tool;
  plan.executable = find_compute_sanitizer();
  if (!reports.empty()) {
    claim_empty_directory("--sanitizer-reports", reports);
    plan.reports = fs::absolute(reports);
    return plan;
  }
  std::error_code ec;
  std::string pattern = (fs::temp_directory_path(ec) / "attnres-check-sanitizer-XXXXXX").string();
  if (ec || !::mkdtemp(pattern.data()))
    throw UsageError(fmt::format("--sanitizer: cannot make a directory for its reports under {}: {}",
                                 fs::path(pattern).parent_path().string(), ec ? ec.message() : std::strerror(errno)));
  plan.reports = pattern;
  plan.keep_clean_reports = false;
  return plan;
}

void finish_sanitizer_reports(const SanitizerPlan& plan, std::string& notes) {
  std::error_code ec;
  if (!plan.keep_clean_reports && fs::is_empty(plan.reports, ec)) {
    fs::remove(plan.reports, ec);
    return;
  }
  notes += fmt::format("compute-sanitizer {} reports{}: {}\n", plan.tool,
                       plan.keep_clean_reports ? "" : " of the cases with a hazard", plan.reports.string());
}

std::vector<std::string> sanitized_worker_command(const SanitizerPlan& plan, const fs::path& report, int socket,
                                                  const BackendOptions& backend, const RunOptions& options) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("--sanitizer: cannot find this executable (/proc/self/exe): " + ec.message());
  // API errors are left out: the tool provokes some on purpose (a capture that must fail), and
  // a kernel's own failed call is already its case's error.
  return {plan.executable,
          "--tool",
          plan.tool,
          "--log-file",
          report.string(),
          "--error-exitcode",
          std::to_string(kSanitizerErrorExit),
          "--report-api-errors",
          "no",
          "--print-limit",
          "20",
          self.string(),
          kSanitizedWorkerCommand,
          std::to_string(socket),
          dump_json(worker_options_json(backend, options))};
}

std::optional<SanitizerReport> read_sanitizer_report(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  SanitizerReport report;
  std::string line;
  bool in_first_error = false;
  while (std::getline(in, line)) {
    if (line.rfind(kLinePrefix, 0) != 0) continue;
    const std::string text = line.substr(std::string(kLinePrefix).size());
    if (text.find("SUMMARY:") != std::string::npos) {
      report.summary = text;
      report.errors += count_before(text, "error");  // ERROR SUMMARY: 1 error; RACECHECK SUMMARY: ... (1 error, ...)
      in_first_error = false;
    } else if (text.empty() || text == "COMPUTE-SANITIZER") {
      in_first_error = false;
    } else if (text[0] != ' ') {
      in_first_error = report.first_error.empty();
      if (in_first_error) report.first_error = text;
    } else if (const std::size_t indent = text.find_first_not_of(' ');
               in_first_error && indent != std::string::npos && text.compare(indent, 3, "at ") == 0) {
      report.first_error += " " + text.substr(indent);
      in_first_error = false;
    }
  }
  return report;
}

CaseResult with_sanitizer_verdict(CaseResult result, const std::string& tool, std::optional<int> exit_code,
                                  const fs::path& report_path) {
  const std::optional<SanitizerReport> report = read_sanitizer_report(report_path);
  const bool found = exit_code == kSanitizerErrorExit || (report && report->errors > 0);
  if (!found) return result;
  std::string what = report && !report->first_error.empty() ? report->first_error : "an error";
  if (report && !report->summary.empty()) what += "; " + report->summary;
  // The judgement made under the tool, not that of a plain run: memcheck ends a kernel at its first
  // bad access, so a read that is harmless without the tool comes back as a failed launch.
  result.detail = fmt::format("compute-sanitizer {}: {} (report: {}); judged under it, the case was {}: {}", tool,
                              what, report_path.string(), to_string(result.disposition), result.detail);
  result.disposition = Disposition::hazard;
  result.sanitizer = SanitizerFinding{tool, report_path.string()};
  return result;
}

void serve_sanitized_worker(const std::vector<std::string>& args) {
  int socket = -1;
  BackendOptions backend;
  RunOptions options;
  try {
    if (args.size() != 2) throw std::runtime_error("expected FD OPTIONS");
    socket = std::stoi(args[0]);
    worker_options_from_json(nlohmann::json::parse(args[1]), backend, options);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{} is the worker run --sanitizer starts: {}", kSanitizedWorkerCommand, e.what()));
  }
  // Memory a kernel gets from torch's caching allocator is one large block to the tool; without
  // the cache each tensor is its own allocation, as PyTorch advises for compute-sanitizer. Set
  // before a bridge can load torch.
  ::setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", 0);
  const WorkerBackendMaker make = [backend](std::string& notes) { return make_backend(backend, notes); };
  serve_requests(socket, {}, nullptr, make, options, backend);
}

}  // namespace attnres
