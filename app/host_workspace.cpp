#include <stdexcept>

#include "app/case_workspace.h"
#include "kernels/checked_size.h"
#include "reference/cpu_reference.h"

namespace attnres {
namespace {

// Two copies of the tensors: the ones the kernel runs on, and the reference's (which it leaves
// holding the expected state); a third, the pristine inputs, only for a repro bundle.
class HostWorkspace : public CaseWorkspace {
 public:
  HostWorkspace(CaseTensors inputs, HostExecutor execute, bool keep_inputs)
      : tensors_(std::move(inputs)), execute_(std::move(execute)) {
    if (keep_inputs) inputs_ = tensors_;
  }

  std::vector<std::pair<std::string, std::string>> input_checksums() override { return attnres::input_checksums(tensors_); }

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

  void restore_inputs() override {
    if (!inputs_) throw std::logic_error("restore_inputs: the workspace was made without keeping its inputs");
    tensors_ = *inputs_;  // same sizes: the allocations are reused
  }

  void run_kernel(KernelEntry& kernel, const LaunchOptions& options) override { execute_(kernel, options, tensors_); }

  Comparison compare(double atol, double rtol) override { return compare_output(tensors_.output, reference_, atol, rtol); }

  ErrorMap error_map(double atol, double rtol) override { return attnres::error_map(tensors_.output, reference_, atol, rtol); }

  ExactnessReport check() override { return check_after_run(tensors_, expected_); }

  CaseArtifacts take_artifacts() override {
    if (!inputs_) throw std::logic_error("take_artifacts: the workspace was made without keeping its inputs");
    return CaseArtifacts{std::move(*inputs_), std::move(tensors_), std::move(reference_)};
  }

 private:
  CaseTensors tensors_;
  HostExecutor execute_;
  std::optional<CaseTensors> inputs_;
  CaseTensors expected_;
  std::vector<double> reference_;
};

}  // namespace

std::unique_ptr<CaseWorkspace> make_host_workspace(CaseTensors inputs, HostExecutor execute, bool keep_inputs) {
  return std::make_unique<HostWorkspace>(std::move(inputs), std::move(execute), keep_inputs);
}

std::optional<std::int64_t> host_workspace_bytes(const AttnResShape& shape, const AttnResStrides& strides,
                                                 bool keep_inputs) {
  const std::optional<std::int64_t> tensors = case_storage_bytes(shape, strides);
  if (!tensors) return std::nullopt;
  const CheckedSize reference = CheckedSize(shape.tokens) * shape.hidden * CheckedSize(sizeof(double));
  return (CheckedSize(*tensors) * (keep_inputs ? 3 : 2) + reference).get();
}

}  // namespace attnres
