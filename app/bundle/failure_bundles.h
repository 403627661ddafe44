// run --repro-dir: a repro bundle (bundle.h) for each case of a run that did not meet its
// expectation, written by the run itself, so a CI job keeps them without a script of its own.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/engine/case_runner.h"
#include "app/engine/command_output.h"
#include "app/engine/runner.h"

namespace attnres {

// The directory's index of what was bundled and what was left out, and why.
inline constexpr const char* kReproIndexFile = "index.json";

// A file or directory name from a case name: letters, digits, '.', '-' and '_' kept, anything
// else '_'; a name in `taken` gets "-2", "-3", ... The name returned is added to `taken`.
std::string file_name_for_case(const std::string& case_name, std::set<std::string>& taken);

// Before the run: makes `dir` (the value of `option`, e.g. --repro-dir) where it is missing and
// refuses (UsageError) one that holds anything or cannot be made, so a run never ends unable to
// keep what it writes there.
void claim_empty_directory(const std::string& option, const std::filesystem::path& dir);

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
