// What became of a case: the verdicts every report prints.
#pragma once
#include <optional>
#include <string>

namespace attnres {

// What became of a case. passed and rejected_as_expected meet the case's expectation; skipped
// does not fail a gate either (nothing can ask that kernel that question).
enum class Disposition {
  passed,                // ran, within tolerance, prefix and blocks exact, memory clean
  failed,                // ran, but out of tolerance or prefix/blocks not bit-exact
  rejected_as_expected,  // expected a rejection and got exactly it
  unexpected_rejection,  // rejected, but a pass (or another message) was expected
  not_rejected,          // expected a rejection, but the kernel ran
  memory_violation,      // wrote padding, guard regions or inputs, or left output unwritten
  not_run,               // nothing here can run it (no GPU, native kernel not available, over the memory budget)
  error,                 // CUDA error, allocation failure, ...
  skipped,               // the kernel's signature cannot express the case (a block write for an op without one)
  hazard,                // compute-sanitizer (run --sanitizer) reported an error in the case's process
};

constexpr int kDispositionCount = 10;

const char* to_string(Disposition disposition);
// The disposition of that name ("not-run"), if there is one.
std::optional<Disposition> parse_disposition(const std::string& name);
bool meets_expectation(Disposition disposition);

}  // namespace attnres
