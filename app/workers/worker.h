// Cases run in worker processes: an external kernel, so a kernel that kills its process (a
// segfault in a plugin, an abort inside Python) or leaves its CUDA context unusable costs only
// the case it was running (the worker is replaced and the remaining cases are still judged); and
// `run --devices`, one worker per GPU.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/engine/backend.h"
#include "app/engine/backend_options.h"
#include "app/engine/case_runner.h"
#include "app/engine/runner.h"
#include "app/workers/sanitizer.h"

namespace attnres {

// Makes the backend a worker runs its cases on, for CUDA device `device` (-1: the one the
// options name); `notes` explains a fallback.
using BackendMaker = std::function<std::unique_ptr<Backend>(int device, std::string& notes)>;

// How many workers, on which devices.
struct WorkerPlan {
  std::vector<int> devices;  // one worker per entry (entries may repeat: workers share that device); empty: one worker
  bool all_devices = false;  // and one more per further device the first worker sees (run --devices all)
  double case_timeout_seconds = 0;      // a worker with no answer by then is killed and its case an error; 0: none
  const InputSource* replay = nullptr;  // run --inputs: the one case's tensors (each worker holds a copy)
  // Told each worker's process id and device as it starts (replacements too): a pid to attach a
  // debugger to, or to kill.
  std::function<void(long pid, const std::string& device)> started;
};

// Runs `cases` in child processes, each case in whichever worker is free. `make_backend` is
// called in each child, so this process never initialises CUDA (a child forked after that could
// not use the GPU). A child that dies, or gives no answer within plan.case_timeout_seconds (a
// hung kernel; the child is killed), costs its in-flight case (`error`, saying which); a new one
// takes its place. When the first child to answer cannot make its backend, its
// error is rethrown here (UsageError for a bad --kernel or --devices, std::runtime_error
// otherwise). `progress` is called as each case is handed out with (index, total, name),
// `judged` with each result in case order, whichever worker ran it. After SIGINT or SIGTERM
// (interrupt.h) the workers are killed, the cases they ran are not-run (interrupted), and it
// returns with the cases never handed out left unjudged. Returns what the first worker said
// while making its backend.
std::string run_in_workers(const std::vector<CaseSpec>& cases, const BackendMaker& make_backend, const WorkerPlan& plan,
                           const RunOptions& options, const std::function<void(int, int, const std::string&)>& progress,
                           const std::function<void(const CaseResult&)>& judged);

// A CaseRunner whose cases run in one worker process at a time (case_runner.h): a worker that dies,
// or gives no answer within backend.timeout_seconds (then killed), costs its case, and a new one
// runs the next. A first worker that cannot start is the caller's error, as in run_in_workers.
std::unique_ptr<CaseRunner> make_worker_runner(const BackendMaker& make_backend, const BackendOptions& backend,
                                               const RunOptions& options, std::string& notes);

// A CaseRunner for run --sanitizer (sanitizer.h): each case in a fresh worker process under
// compute-sanitizer, which makes its backend from `backend`; a case with an error in the tool's
// report is a hazard. A first worker that cannot start is the caller's error.
std::unique_ptr<CaseRunner> make_sanitized_runner(const SanitizerPlan& sanitizer, const BackendOptions& backend,
                                                  const RunOptions& options, std::string& notes);

}  // namespace attnres
