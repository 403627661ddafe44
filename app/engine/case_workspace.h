// A case's tensors where a backend keeps them, and the work done on them there: the float64
// reference, the kernel, the comparison and the checks, each returning a summary. The CPU
// backend keeps them on the host (app/host_workspace.h); the CUDA backend keeps them on the
// device from generation to verdict, and copies them to the host only for a repro bundle.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/engine/checks.h"
#include "kernels/registry/kernel_entry.h"

namespace attnres {

// Everything a repro bundle needs from a run, besides its result.
struct CaseArtifacts {
  CaseTensors inputs;  // before the kernel
  CaseTensors after;   // after the kernel
  std::vector<double> reference;
};

struct ReferenceSummary {
  std::string name;  // "cpu-float64", "cublas-float64"
  // The first value that is not finite ([t, h] as t * H + h) and that value: the case's inputs
  // leave the contract undefined there.
  std::optional<std::pair<std::int64_t, double>> first_non_finite;
};

// What the probe call (CaseWorkspace::run_probe_call) showed besides its output.
struct ProbeCall {
  bool refused = false;
  std::vector<Violation> canaries_overwritten;  // guard and padding elements written
};

// Inputs that come from elsewhere (a safetensors replay) instead of the generator: made only
// once the case is known to fit its memory budget; `held_bytes` is what their source holds.
struct InputSource {
  std::function<CaseTensors()> make;
  std::int64_t held_bytes = 0;
};

// One replay of a captured call: the output it left, how it met the float64 reference on the
// inputs it was replayed on (prefix and blocks exactness included), and what it wrote where it
// must not.
struct GraphReplay {
  HostTensor output;
  Comparison comparison;
  std::vector<Violation> violations;
};

// At most what a case allocates: host bytes and device bytes (nothing: the sizes overflow int64).
struct CaseFootprint {
  std::optional<std::int64_t> host_bytes;
  std::optional<std::int64_t> device_bytes;
};

class CaseWorkspace {
 public:
  virtual ~CaseWorkspace() = default;
  // Checksums (app/casefile/input_checksum.h) of the inputs present, in CaseTensors::all() order; before run_kernel.
  virtual std::vector<std::pair<std::string, std::string>> input_checksums() = 0;
  // The float64 reference on the inputs as made; before run_kernel.
  virtual ReferenceSummary compute_reference() = 0;
  // The inputs, canaries and poisoned output back as they were made, so that another kernel can
  // run on them against the same reference. The host workspace needs its inputs kept for it.
  virtual void restore_inputs() = 0;
  // Throws KernelRejection when the kernel refuses, KernelFailure or CudaError when it fails.
  virtual void run_kernel(KernelEntry& kernel, const LaunchOptions& options) = 0;
  // The probe call, made before the judged one on the same inputs with everything around them
  // changed: the output holds kFinitePoisonBits instead of NaN, and guards and padding hold
  // patterned_canary(canary_seed, ...) instead of kCanaryBits. Its output is kept, and the inputs
  // are restored as made for the judged call. Throws as run_kernel does, except on a refusal.
  virtual ProbeCall run_probe_call(KernelEntry& kernel, const LaunchOptions& options, std::uint64_t canary_seed) = 0;
  // After run_kernel: the logical output elements whose bits differ from the probe call's.
  virtual OutputDifference difference_from_probe_call() = 0;
  virtual Comparison compare(double atol, double rtol) = 0;
  // |out - ref| pooled into cells (run --html draws it); after run_kernel.
  virtual ErrorMap error_map(double atol, double rtol) = 0;
  // prefix/blocks exactness, canaries, guard regions, inputs unchanged, output written.
  virtual ExactnessReport check() = 0;
  // After the kernel refused: every element of every tensor as it was before the call (the
  // output still poison), or a violation per tensor.
  virtual ExactnessReport check_untouched() = 0;
  // The call made on a non-blocking stream of the workspace's own, whose earlier work holds the
  // inputs' elements at kCanaryBits for about kLateInputsMicroseconds and only then writes the
  // inputs as made: a kernel that launches on any other stream reads the stale values. Why it
  // cannot be made here, if it cannot (a host workspace has no streams). Throws as run_kernel does.
  virtual std::optional<std::string> run_kernel_behind_late_inputs(KernelEntry& kernel,
                                                                   const LaunchOptions& options) = 0;
  static constexpr int kLateInputsMicroseconds = 50000;
  // The call launched with programmatic dependent launch on a non-blocking stream of the
  // workspace's own, right behind a producer kernel that lets dependents start at once
  // (griddepcontrol.launch_dependents), holds the inputs at kCanaryBits for about
  // kLateInputsMicroseconds, then writes them as made: a kernel that reads before
  // griddepcontrol.wait reads the stale values. Why it cannot be made here, if it cannot (no
  // device, or one before compute capability 9.0). Throws as run_kernel does.
  virtual std::optional<std::string> run_kernel_behind_early_trigger(KernelEntry& kernel,
                                                                     const LaunchOptions& options) = 0;
  // The call captured once (KernelEntry::capture) on a non-blocking stream of the workspace's
  // own, then replayed there once per seed, each time on inputs made anew from that seed in the
  // captured buffers (canaries and the poisoned output around them) and compared with the
  // float64 reference on them, and every tensor checked as after run_kernel. Why it cannot be made here, if it cannot
  // (a host workspace has no graphs). Throws GraphCaptureError or KernelRejection from the capture, else as run_kernel
  // does.
  virtual std::optional<std::string> run_kernel_in_graph(KernelEntry& kernel, const LaunchOptions& options,
                                                         const std::vector<std::uint64_t>& seeds, double atol,
                                                         double rtol, std::vector<GraphReplay>& replays) = 0;
  // A host copy of the output tensor as it is now (its padding and guards included).
  virtual HostTensor output() = 0;
  // Host copies for a repro bundle; only where the workspace was made to keep them, and last.
  virtual CaseArtifacts take_artifacts() = 0;
};

// Runs a kernel over host tensors in place (the CPU backend's launch; tests substitute theirs).
using HostExecutor = std::function<void(KernelEntry&, const LaunchOptions&, CaseTensors&)>;

// A workspace over host tensors: the ones the kernel runs on, the expected state the CPU
// reference leaves in its own copy, the reference, and the inputs as made (a refusal is checked
// against them, and a repro bundle holds them).
std::unique_ptr<CaseWorkspace> make_host_workspace(CaseTensors inputs, HostExecutor execute);

// Host bytes make_host_workspace uses at most for a case of this layout (nothing on overflow).
std::optional<std::int64_t> host_workspace_bytes(const AttnResShape& shape, const AttnResStrides& strides);

}  // namespace attnres
