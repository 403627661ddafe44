// Bug-report bundles: what `repro` writes, and `explore` for what it finds (through a CaseRunner).
#pragma once
#include <filesystem>
#include <string>

#include "app/engine/backend_options.h"
#include "app/engine/command_output.h"
#include "app/engine/runner.h"

namespace attnres {

// Runs the case and writes its bug-report bundle into `dir` (made empty with `force`); the
// bundle's replay lines name `backend_options`. Appends what was written to out.text. With
// `judged_in_run` (a run that took its worker process down, or found a compute-sanitizer hazard)
// the case is not run again: the bundle holds that result and the inputs, without outputs; a
// hazard's bundle also holds the tool's report and replays under the same tool.
CaseResult write_repro_bundle(const CaseSpec& spec, Backend& backend, const RunOptions& options,
                              const BackendOptions& backend_options, const std::filesystem::path& dir, bool force,
                              CommandOutput& out, const CaseResult* judged_in_run = nullptr);

}  // namespace attnres

// The standalone PyTorch script written into every bundle (app/bundle/repro.py), and the binding
// it calls Python entry points with (python/attnres_check/binding.py), both compiled in.
const char* attnres_repro_script();
const char* attnres_binding_script();
