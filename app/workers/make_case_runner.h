// The CaseRunner for a command's options: in this process, or in a worker process for an
// external kernel (app/workers/worker.h).
#pragma once
#include <memory>
#include <string>

#include "app/engine/backend_options.h"
#include "app/engine/case_runner.h"
#include "app/engine/runner.h"

namespace attnres {

// In a worker process for an external kernel (no answer within backend.timeout_seconds: the
// worker is killed), else in this process. `notes` explains a fallback.
std::unique_ptr<CaseRunner> make_case_runner(const BackendOptions& backend, const RunOptions& options,
                                             std::string& notes);

}  // namespace attnres
