// The worker process's side of its conversation with the tool. Every message is one JSON line
// (ipc.h). The worker first says hello: {"backend", "notes", "device", "device_count"}, or
// {"fatal": why, "usage": bool} when it cannot make its backend. Then it answers each request:
//  - {"index": i} runs cases[i];
//  - {"case": ..., "file", "pointer", "disable_layout_guard"} runs that case, and with "bundle"
//    ({"dir", "force", and "judged_in_run": the result of a run that took a worker down or found
//    a compute-sanitizer hazard})
//    writes its repro bundle;
// with {"result", "restart"} ("text" and "notes" for a bundle), or {"error", "usage", "restart"}.
// "restart" says the worker's CUDA context is lost: the tool starts a fresh worker.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/casefile/case_spec.h"
#include "app/engine/backend.h"
#include "app/engine/backend_options.h"
#include "app/engine/runner.h"

namespace attnres {

// A worker's own backend maker: its device already chosen.
using WorkerBackendMaker = std::function<std::unique_ptr<Backend>(std::string& notes)>;

// The options a worker started elsewhere (an exec'd process) runs its cases with, as JSON and back;
// from_json throws nlohmann::json's errors on a malformed object.
nlohmann::json worker_options_json(const BackendOptions& backend, const RunOptions& options);
void worker_options_from_json(const nlohmann::json& json, BackendOptions& backend, RunOptions& options);

// In the child: makes its backend, says hello (or why it could not), then answers each request
// on `socket` until the tool closes it, and exits. `cases` and `replay` are what {"index": i}
// refers to.
[[noreturn]] void serve_requests(int socket, const std::vector<CaseSpec>& cases, const InputSource* replay,
                                 const WorkerBackendMaker& make_backend, const RunOptions& options,
                                 const BackendOptions& backend_options);

}  // namespace attnres
