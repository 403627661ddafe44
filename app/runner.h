// Runs one case on a backend and turns what happened into a disposition.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/backend.h"
#include "app/case_spec.h"
#include "app/host_tensors.h"
#include "app/memory_budget.h"

namespace attnres {

// What became of a case. Only passed and rejected_as_expected meet the case's expectation.
enum class Disposition {
  passed,                // ran, within tolerance, prefix and blocks exact, memory clean
  failed,                // ran, but out of tolerance or prefix/blocks not bit-exact
  rejected_as_expected,  // expected a rejection and got exactly it
  unexpected_rejection,  // rejected, but a pass (or another message) was expected
  not_rejected,          // expected a rejection, but the kernel ran
  memory_violation,      // wrote padding, guard regions or inputs, or left output unwritten
  not_run,               // nothing here can run it (no GPU, native kernel not available)
  error,                 // CUDA error, allocation failure, ...
};

constexpr int kDispositionCount = 8;

const char* to_string(Disposition disposition);
// The disposition of that name ("not-run"), if there is one.
std::optional<Disposition> parse_disposition(const std::string& name);
bool meets_expectation(Disposition disposition);

struct Comparison {
  std::string reference;  // "cpu-float64" or "cublas-float64"
  double atol = 0, rtol = 0;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::int64_t worst_token = -1, worst_column = -1;
  double worst_value = 0, worst_reference = 0;
  std::int64_t mismatched = 0, total = 0;  // elements with |out - ref| > atol + rtol * |ref|
  std::int64_t nan_count = 0, inf_count = 0;
  std::int64_t prefix_mismatches = 0, blocks_mismatches = 0;
  std::string first_prefix_mismatch, first_blocks_mismatch;

  bool within_tolerance() const { return mismatched == 0; }
  bool exact_state() const { return prefix_mismatches == 0 && blocks_mismatches == 0; }
  // "Mismatched elements: 3 / 2293760 (0.0%)", as torch.testing.assert_close words it.
  std::string mismatch_summary() const;
};

// Elementwise |out - ref| <= atol + rtol * |ref| over the logical [T, H] output.
Comparison compare_output(const HostTensor& output, const std::vector<double>& reference, double atol, double rtol);

// Seconds spent in each phase of a case (run --timings, and the JSON report).
struct PhaseTimes {
  double generate = 0;   // inputs made (generated or replayed), canaries and poison
  double kernel = 0;     // the kernel, with its copies to and from the device
  double reference = 0;  // the float64 reference
  double compare = 0;    // output against the reference
  double checks = 0;     // prefix/blocks exactness, canaries, guards, inputs unchanged
};

struct CaseResult {
  std::string name;
  std::string location;
  std::uint64_t seed = 0;  // the inputs' seed (a replayed file's inputs do not depend on it)
  Disposition disposition = Disposition::error;
  std::string detail;
  std::string backend;
  std::string device;
  std::string kernel = "none";  // the registry entry that ran (or would have run) it
  std::string dispatch_reason;
  bool layout_guard = true;
  std::optional<std::string> rejection;
  std::string kernel_context;  // what an external kernel said besides its message (a Python traceback)
  std::optional<Comparison> comparison;
  std::vector<Violation> violations;
  std::vector<std::pair<std::string, std::string>> input_checksums;
  double seconds = 0;
  PhaseTimes timings;
};

struct RunOptions {
  bool disable_layout_guard = false;
  // Above this many source elements (T * (num_blocks + 1) * H) the device reference judges,
  // where the backend has one.
  std::int64_t cpu_reference_limit = std::int64_t(1) << 26;
  MemoryBudget budget;
  // A registry entry every case runs on (--kernel); empty: each case's own choice, with
  // `auto` the dispatcher's policy over the built-in kernels.
  std::string kernel;
};

// Inputs that come from elsewhere (a safetensors replay) instead of the generator: made only
// once the case is known to fit its memory budget; `held_bytes` is what their source holds.
struct InputSource {
  std::function<CaseTensors()> make;
  std::int64_t held_bytes = 0;
};

// At most what run_case allocates for a case: host bytes and device bytes (nothing: the
// sizes overflow int64).
struct CaseFootprint {
  std::optional<std::int64_t> host_bytes;
  std::optional<std::int64_t> device_bytes;
};
CaseFootprint case_footprint(const CaseSpec& spec, const Backend& backend, const RunOptions& options,
                             bool keeps_artifacts, std::int64_t held_bytes = 0);
// Why the case's footprint does not fit options.budget (the bytes needed and the budget).
std::optional<std::string> budget_refusal(const CaseSpec& spec, const Backend& backend, const RunOptions& options,
                                          bool keeps_artifacts, std::int64_t held_bytes = 0);

// Everything a repro bundle needs from a run, besides its result.
struct CaseArtifacts {
  CaseTensors inputs;  // before the kernel
  CaseTensors after;   // after the kernel
  std::vector<double> reference;
};

// `inputs`: replay these instead of generating them. `artifacts`: filled when the kernel ran.
// A case over the memory budget is not-run, with the bytes it needs and the budget.
CaseResult run_case(const CaseSpec& spec, Backend& backend, const RunOptions& options,
                    const InputSource* inputs = nullptr, std::optional<CaseArtifacts>* artifacts = nullptr);

}  // namespace attnres
