#include <stdexcept>

#include "app/engine/case_workspace.h"
#include "kernels/common/checked_size.h"
#include "kernels/common/kernel_errors.h"
#include "reference/cpu_reference.h"

namespace attnres {
namespace {

// Three copies of the tensors: the ones the kernel runs on, the reference's (which it leaves
// holding the expected state), and the inputs as made; and the output of the probe call.
class HostWorkspace : public CaseWorkspace {
 public:
  HostWorkspace(CaseTensors inputs, HostExecutor execute)
      : tensors_(std::move(inputs)), execute_(std::move(execute)), inputs_(tensors_) {}

  std::vector<std::pair<std::string, std::string>> input_checksums() override {
    return attnres::input_checksums(tensors_);
  }

  ReferenceSummary compute_reference() override {
    expected_ = tensors_;
    reference_ = cpu_reference(expected_.args());
    ReferenceSummary summary{"cpu-float64", std::nullopt};
    for (std::size_t i = 0; i < reference_.size(); ++i)
      if (!is_finite_value(reference_[i])) {
        summary.first_non_finite = std::make_pair(std::int64_t(i), reference_[i]);
        break;
      }
    return summary;
  }

  void restore_inputs() override { tensors_ = inputs_; }  // same sizes: the allocations are reused

  void run_kernel(KernelEntry& kernel, const LaunchOptions& options) override { execute_(kernel, options, tensors_); }

  ProbeCall run_probe_call(KernelEntry& kernel, const LaunchOptions& options, std::uint64_t canary_seed) override {
    fill_patterned_canaries(tensors_, canary_seed);
    HostTensor& out = tensors_.output;
    for (std::int64_t t = 0; t < out.rows(); ++t)
      for (std::int64_t h = 0; h < out.columns; ++h) out.at(t, h) = kFinitePoisonBits[(t * out.columns + h) % 2];
    ProbeCall probe;
    try {
      execute_(kernel, options, tensors_);
    } catch (const KernelRejection&) {
      probe.refused = true;
    } catch (...) {
      tensors_ = inputs_;
      throw;
    }
    probe.canaries_overwritten = check_patterned_canaries(tensors_, canary_seed).violations;
    if (!probe.refused) probe_output_ = std::move(tensors_.output);
    tensors_ = inputs_;
    return probe;
  }

  OutputDifference difference_from_probe_call() override {
    return output_bits_difference(tensors_.output, probe_output_);
  }

  Comparison compare(double atol, double rtol) override {
    return compare_output(tensors_.output, reference_, atol, rtol);
  }

  ErrorMap error_map(double atol, double rtol) override {
    return attnres::error_map(tensors_.output, reference_, atol, rtol);
  }

  ExactnessReport check() override { return check_after_run(tensors_, expected_); }

  ExactnessReport check_untouched() override { return attnres::check_untouched(tensors_, inputs_); }

  std::optional<std::string> run_kernel_behind_late_inputs(KernelEntry&, const LaunchOptions&) override {
    return std::string("the CPU backend's kernels take host operands, and have no streams");
  }

  std::optional<std::string> run_kernel_behind_early_trigger(KernelEntry&, const LaunchOptions&) override {
    return std::string("the CPU backend's kernels take host operands, and have no programmatic dependent launch");
  }

  std::optional<std::string> run_kernel_in_graph(KernelEntry&, const LaunchOptions&, const std::vector<std::uint64_t>&,
                                                 double, double, std::vector<GraphReplay>&) override {
    return std::string("the CPU backend's kernels take host operands, and have no CUDA graphs");
  }

  HostTensor output() override { return tensors_.output; }

  CaseArtifacts take_artifacts() override {
    return CaseArtifacts{std::move(inputs_), std::move(tensors_), std::move(reference_)};
  }

 private:
  CaseTensors tensors_;
  HostExecutor execute_;
  CaseTensors inputs_;
  HostTensor probe_output_;
  CaseTensors expected_;
  std::vector<double> reference_;
};

}  // namespace

std::unique_ptr<CaseWorkspace> make_host_workspace(CaseTensors inputs, HostExecutor execute) {
  return std::make_unique<HostWorkspace>(std::move(inputs), std::move(execute));
}

std::optional<std::int64_t> host_workspace_bytes(const AttnResShape& shape, const AttnResStrides& strides) {
  const std::optional<std::int64_t> tensors = case_storage_bytes(shape, strides);
  if (!tensors) return std::nullopt;
  const CheckedSize reference = CheckedSize(shape.tokens) * shape.hidden * CheckedSize(sizeof(double));
  const CheckedSize output = CheckedSize(case_layouts(shape, strides)[kOperandCount - 1].storage_elements()) * 2;
  return (CheckedSize(*tensors) * 3 + output + reference).get();
}

}  // namespace attnres
