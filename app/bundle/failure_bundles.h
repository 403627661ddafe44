// run --repro-dir: a repro bundle (bundle.h) for each case of a run that did not meet its
// expectation, written by the run itself, so a CI job keeps them without a script of its own.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "app/engine/case_runner.h"
#include "app/engine/command_output.h"
#include "app/engine/runner.h"

namespace attnres {

// The directory's index of what was bundled and what was left out, and why.
inline constexpr const char* kReproIndexFile = "index.json";

// Before the run: makes `dir` where it is missing and refuses (UsageError) one that holds anything
// or cannot be made, so a run never ends unable to keep its bundles.
void claim_repro_directory(const std::filesystem::path& dir);

// For each result that did not meet its expectation (results[i] is cases[i]'s; a not-run case is
// listed, not run again), in case order: runs the case again on the runner `make_runner` makes
// (called once, at the first bundle) and writes its
// bundle into dir/<case name>/, while the bundles' bytes stay within `max_bytes` (each one's size
// estimated before it is written, counted as written after). The rest are listed in
// dir/index.json and in out.notes; out.text gets a line per bundle.
void write_failure_bundles(const std::vector<CaseSpec>& cases, const std::vector<CaseResult>& results,
                           const std::function<std::unique_ptr<CaseRunner>()>& make_runner,
                           const std::filesystem::path& dir, std::int64_t max_bytes, CommandOutput& out);

}  // namespace attnres
