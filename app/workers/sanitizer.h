// run --sanitizer: each case in a fresh worker process started under NVIDIA compute-sanitizer, so
// that an error the tool reports (an out-of-bounds or misaligned access, a shared-memory race, a
// misused barrier, a read of uninitialised device memory) belongs to that case alone: the case's
// disposition is `hazard`, naming the tool's report, and the other cases are unaffected.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "app/engine/backend_options.h"
#include "app/engine/runner.h"

namespace attnres {

// The compute-sanitizer tools a run can ask for.
inline constexpr const char* kSanitizerTools[] = {"memcheck", "racecheck", "synccheck", "initcheck"};

// What main is asked to do in a process compute-sanitizer starts: `attnres-check <this> FD OPTIONS`.
inline constexpr const char* kSanitizedWorkerCommand = "__sanitized-worker";

struct SanitizerPlan {
  std::string tool;                // one of kSanitizerTools
  std::string executable;          // compute-sanitizer
  std::filesystem::path reports;   // each case's report: <case name>.txt
  bool keep_clean_reports = true;  // false: a report without errors is removed
};

// The plan for `tool`: compute-sanitizer found (find_compute_sanitizer), and its reports' directory
// claimed: `reports` (new or empty, every case's report kept) or, where that is empty, a new
// directory under $TMPDIR that keeps only the reports with errors. Throws UsageError.
SanitizerPlan make_sanitizer_plan(const std::string& tool, const std::string& reports);

// After the run: a directory of kept reports is named in `notes`; an empty temporary one is removed.
void finish_sanitizer_reports(const SanitizerPlan& plan, std::string& notes);

// The compute-sanitizer to run: $ATTNRES_COMPUTE_SANITIZER, else the one on PATH, else
// $CUDA_HOME/bin's or /usr/local/cuda/bin's. Throws UsageError saying where it looked.
std::string find_compute_sanitizer();

// The command that starts one sanitized worker: compute-sanitizer with `plan.tool`, writing its
// report to `report`, running this executable as a worker on socket `socket` with `options`.
std::vector<std::string> sanitized_worker_command(const SanitizerPlan& plan, const std::filesystem::path& report,
                                                  int socket, const BackendOptions& backend, const RunOptions& options);

// What compute-sanitizer's report says: how many errors, the first one and where.
struct SanitizerReport {
  int errors = 0;
  std::string first_error;  // "Invalid __global__ read of size 4 bytes at kernel(...)+0x1b0"
  std::string summary;      // "ERROR SUMMARY: 1 error"
};

// Reads a report as compute-sanitizer writes it ("========= " before each line); a missing
// or unreadable file reads as no report.
std::optional<SanitizerReport> read_sanitizer_report(const std::filesystem::path& report);

// compute-sanitizer's exit status when it found an error (its --error-exitcode).
inline constexpr int kSanitizerErrorExit = 86;

// `result` judged with what compute-sanitizer said about the process that ran it (its exit
// status `exit_code`, nothing when it did not exit, and its report at `report`): a hazard where
// it found an error, the case's own disposition kept in the detail; else `result` unchanged.
CaseResult with_sanitizer_verdict(CaseResult result, const std::string& tool, std::optional<int> exit_code,
                                  const std::filesystem::path& report);

// main, in the process compute-sanitizer started: `args` are FD and the options' JSON; serves the
// tool's requests on socket FD as any worker does (worker_protocol.h), then exits.
[[noreturn]] void serve_sanitized_worker(const std::vector<std::string>& args);

}  // namespace attnres
