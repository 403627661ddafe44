// Runs one case on a backend and turns what happened into a disposition.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/casefile/host_tensors.h"
#include "app/engine/backend.h"
#include "app/engine/checks.h"
#include "app/engine/disposition.h"
#include "app/engine/memory_budget.h"
#include "app/engine/property_checks.h"

namespace attnres {

// Seconds spent in each phase of a case (run --timings, and the JSON report).
struct PhaseTimes {
  double generate = 0;   // inputs made (generated or replayed), canaries and poison
  double kernel = 0;     // the kernel, to its completion
  double reference = 0;  // the float64 reference
  double compare = 0;    // output against the reference
  double checks = 0;     // prefix/blocks exactness, canaries, guards, inputs unchanged
  double report = 0;     // the case's rows printed (measured after them: in the JSON report only)
};

// What compute-sanitizer found in a case (run --sanitizer): the tool and its report's path.
struct SanitizerFinding {
  std::string tool;
  std::string report;
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
  // What the kernel had to do with the case and why ("compute: the case file says so", "refuse
  // with \"...\": the built-in native kernel must refuse where rows_not_dense").
  std::string expectation;
  bool layout_guard = true;
  std::optional<std::string> rejection;
  std::string kernel_context;  // what an external kernel said besides its message (a Python traceback)
  std::optional<Comparison> comparison;
  std::vector<Violation> violations;
  std::optional<ErrorMap> error_map;  // with RunOptions::error_maps, where elements are out of tolerance
  std::vector<std::pair<std::string, std::string>> input_checksums;
  // Each property asked of the kernel (RunOptions::properties and the case's own checks), judged
  // only where the call itself passed; a property that fails makes the case fail.
  std::vector<PropertyResult> properties;
  std::optional<SanitizerFinding> sanitizer;  // the hazard that made the case `hazard`
  double seconds = 0;
  PhaseTimes timings;
};

struct RunOptions {
  bool disable_layout_guard = false;
  MemoryBudget budget;
  // A registry entry every case runs on (--kernel); empty: each case's own choice, with
  // `auto` the dispatcher's policy over the built-in kernels.
  std::string kernel;
  bool error_maps = false;  // an ErrorMap in the result of every case with elements out of tolerance (run --html)
  std::vector<CaseProperty> properties;  // run --check: judged on every case besides its own checks
};

// The spec a case is judged by on a kernel that declares `declared` (kernels/registry/preconditions.h):
// the case file's own expectation where it has one, else the first declared refusal whose
// condition the problem meets, else a correct output; `expectation` says which, and why.
CaseSpec judged_spec(const CaseSpec& spec, const KernelPreconditions& declared, std::string& expectation);

// At most what run_case allocates for a case: the backend's footprint, what the input source
// holds, and with artifacts the copies a repro bundle's files are written from.
CaseFootprint case_footprint(const CaseSpec& spec, const Backend& backend, bool keeps_artifacts,
                             const InputSource* inputs = nullptr);
// Why the case's footprint does not fit options.budget (the bytes needed and the budget).
std::optional<std::string> budget_refusal(const CaseSpec& spec, const Backend& backend, const RunOptions& options,
                                          bool keeps_artifacts, const InputSource* inputs = nullptr);

// budget_refusal for a case's inputs made on the host alone (the bundle of a case that did not
// run, or whose run lost the device): asks the device nothing.
std::optional<std::string> host_inputs_refusal(const CaseSpec& spec, const Backend& backend, const RunOptions& options);

// The result of a case that was never judged (its worker process lost, the run interrupted): what
// the case is, where it was to run, `disposition` and `detail`.
CaseResult unjudged_result(const CaseSpec& spec, const std::string& backend, const std::string& device,
                           const std::string& kernel, Disposition disposition, const std::string& detail);

// `inputs`: replay these instead of generating them. `artifacts`: filled when the kernel ran.
// A case over the memory budget is not-run, with the bytes it needs and the budget.
CaseResult run_case(const CaseSpec& spec, Backend& backend, const RunOptions& options,
                    const InputSource* inputs = nullptr, std::optional<CaseArtifacts>* artifacts = nullptr);

// The case's inputs and reference made once, then each kernel of the backend's registry named
// in `kernels` run on the inputs as made and judged against that reference (`mutants`): one
// result per kernel, in order. Every kernel is selected by name, as with RunOptions::kernel.
std::vector<CaseResult> run_case_on_kernels(const CaseSpec& spec, Backend& backend, const RunOptions& options,
                                            const std::vector<std::string>& kernels);

}  // namespace attnres
