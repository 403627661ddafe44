// One case at a time, for the commands that choose the next case from the last result (explore,
// shrink) or write a bundle of one (repro). An external kernel runs in a worker process there, as
// in `run`: a kernel that crashes or hangs costs the case it was running (an `error` result, which
// explore and shrink treat as any other finding), not the command.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "app/casefile/case_spec.h"
#include "app/engine/backend.h"
#include "app/engine/command_output.h"
#include "app/engine/runner.h"

namespace attnres {

class CaseRunner {
 public:
  virtual ~CaseRunner() = default;
  // The case judged; `disable_layout_guard` in place of options().disable_layout_guard.
  virtual CaseResult run(const CaseSpec& spec, bool disable_layout_guard) = 0;
  // write_repro_bundle in the runner's process, with `judged_in_run` where there is one; where
  // that process was lost, the bundle without the kernel's outputs, holding the result that says how.
  virtual CaseResult write_bundle(const CaseSpec& spec, const std::filesystem::path& dir, bool force,
                                  CommandOutput& out, const CaseResult* judged_in_run = nullptr) = 0;
  virtual std::string backend_name() const = 0;
  virtual std::string device_description() const = 0;
  const RunOptions& options() const { return options_; }
  CaseResult run(const CaseSpec& spec) { return run(spec, options_.disable_layout_guard); }

 protected:
  explicit CaseRunner(RunOptions options) : options_(std::move(options)) {}
  RunOptions options_;
};

}  // namespace attnres
