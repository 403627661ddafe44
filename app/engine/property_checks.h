// The properties a kernel must have beyond one correct call (run --check): each is judged by
// more calls of the same kernel on variants of the case, whose outputs are compared bit for bit
// with the judged call's, row by row.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "app/casefile/case_property.h"
#include "app/casefile/case_spec.h"
#include "app/casefile/host_tensors.h"
#include "app/engine/case_workspace.h"
#include "app/engine/disposition.h"

namespace attnres {

struct PropertyResult {
  CaseProperty property = CaseProperty::determinism;
  // passed, failed, error, not_run (nothing here could make the calls it needs) or skipped (the
  // case gives it nothing to judge).
  Disposition disposition = Disposition::not_run;
  std::string detail;
  double seconds = 0;
};

// How a variant call is made: as the judged call, on a stream of its own behind late inputs
// (CaseWorkspace::run_kernel_behind_late_inputs), or with programmatic dependent launch behind a
// producer that triggers early (CaseWorkspace::run_kernel_behind_early_trigger).
enum class VariantLaunch { as_judged, behind_late_inputs, behind_early_trigger };

// One more call of the case's kernel, on a variant of the case: its output, or why it made none.
struct VariantCall {
  enum class Outcome {
    computed,
    refused,      // the kernel refused it, or declares it cannot take it
    unavailable,  // the backend cannot make the call so (no streams on the host)
    not_run,      // over the memory budget
  };
  Outcome outcome = Outcome::computed;
  HostTensor output;
  std::string reason;
};
// Calls the kernel on `variant`, its inputs generated from its seed or made by `inputs`. Throws
// as a kernel that fails does.
using VariantCaller =
    std::function<VariantCall(const CaseSpec& variant, const InputSource* inputs, VariantLaunch launch)>;

// The case's call captured in a CUDA graph and replayed once per seed on inputs made from it
// (CaseWorkspace::run_kernel_in_graph), or why it was not.
struct GraphCall {
  VariantCall::Outcome outcome = VariantCall::Outcome::computed;
  std::string reason;
  bool capture_failed = false;  // `reason` is why the call could not be captured
  std::vector<GraphReplay> replays;
};
using GraphCaller = std::function<GraphCall(const CaseSpec& spec, const std::vector<std::uint64_t>& seeds)>;

// How the checks call the case's kernel.
struct PropertyCallers {
  VariantCaller call;
  GraphCaller replay_graph;
};

// Where the kernel changes how it computes a batch, by T (the native kernel's plan bounds for the
// case's blocks and H): batch invariance is judged on both sides of each.
std::vector<std::int64_t> plan_boundaries(const AttnResShape& shape);

// Bit-level verdicts on `properties` for a case whose judged call passed and left `judged_output`;
// `replayed`: the inputs the judged call had, where they were not generated from the case's seed.
std::vector<PropertyResult> judge_properties(const CaseSpec& spec, const std::vector<CaseProperty>& properties,
                                             const HostTensor& judged_output, const PropertyCallers& callers,
                                             const InputSource* replayed = nullptr);

// Each property of `properties` as not judged: the case's own call did not pass (`why`).
std::vector<PropertyResult> unjudged_properties(const std::vector<CaseProperty>& properties, const std::string& why);

// A row of garbage values: what the garbage check writes where nothing is judged.
inline constexpr bf16_bits kGarbageBits[] = {0x7fc0 /* NaN */, 0x7f80 /* +Inf */, 0xff80 /* -Inf */,
                                             0x7f62 /* 3.0e38 */, 0xff62 /* -3.0e38 */};

}  // namespace attnres
