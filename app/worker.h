// External kernels run in a worker process, so a kernel that kills its process (a segfault in a
// plugin, an abort inside Python) or leaves its CUDA context unusable costs only the case it was
// running: the worker is replaced and the remaining cases are still judged.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/backend.h"
#include "app/case_spec.h"
#include "app/runner.h"

namespace attnres {

// Makes the backend a worker runs its cases on; `notes` explains a fallback.
using BackendMaker = std::function<std::unique_ptr<Backend>(std::string& notes)>;

// Runs `cases` one after another in a child process. `make_backend` is called in each child, so
// this process never initialises CUDA (a child forked after that could not use the GPU). A
// child that dies costs its in-flight case (`error`, naming the signal or exit status); a new
// one takes the rest. When the first child cannot make its backend, its error is rethrown here
// (UsageError for a bad --kernel, std::runtime_error otherwise). `progress` is called before
// each case with (index, total, name), `judged` with each result, in case order. Returns what
// the first worker said while making its backend.
std::string run_in_worker(const std::vector<CaseSpec>& cases, const BackendMaker& make_backend, const RunOptions& options,
                          const std::function<void(int, int, const std::string&)>& progress,
                          const std::function<void(const CaseResult&)>& judged);

}  // namespace attnres
