#include "app/engine/device_workspace.h"

#include <optional>
#include <stdexcept>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "app/casefile/input_checksum.h"
#include "app/engine/device_checks.h"
#include "kernels/common/checked_size.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/device_generator.h"
#include "kernels/common/kernel_errors.h"
#include "reference/cublas_reference.h"

namespace attnres {
namespace {

// cuBLAS's handle and default workspace, with room to spare.
constexpr std::int64_t kCublasWorkspaceBytes = std::int64_t(64) << 20;

constexpr std::size_t kOutput = 6;  // CaseTensors::all() index of the output; 0..5 are InputTensor's

// A non-blocking stream for one call, destroyed after it.
struct SideStream {
  SideStream() { ATTNRES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~SideStream() { cudaStreamDestroy(stream); }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  cudaStream_t stream = nullptr;
};

class DeviceWorkspace : public CaseWorkspace {
 public:
  DeviceWorkspace(const CaseSpec& spec, const InputSource* inputs, bool keep_artifacts, const DeviceDescription& device,
                  bool& usable)
      : shape_(spec.shape),
        strides_(spec.strides),
        layouts_(case_layouts(shape_, strides_)),
        device_(device),
        usable_(usable) {
    guarded([&] {
      for (const TensorLayout& layout : layouts_) storage_.emplace_back(std::size_t(layout.storage_elements()));
      if (inputs) {
        upload(inputs->make(), keep_artifacts);
      } else {
        key_inputs(spec.seed);
        for (std::size_t i = 0; i < kOutput; ++i) pristine_[i].dist = resolve(spec.distributions[i], shape_);
      }
      make_inputs();
      if (!inputs && keep_artifacts) inputs_ = download();
    });
  }

  void restore_inputs() override {
    guarded([&] { make_inputs(); });
  }

  std::vector<std::pair<std::string, std::string>> input_checksums() override {
    std::vector<std::pair<std::string, std::string>> sums;
    guarded([&] {
      for (std::size_t i = 0; i < kOutput; ++i)
        if (!layouts_[i].empty())
          sums.emplace_back(layouts_[i].name, checksum_text(checksum_on_device(view(i), nullptr)));
    });
    return sums;
  }

  ReferenceSummary compute_reference() override {
    ReferenceSummary summary{"cublas-float64", std::nullopt};
    guarded([&] {
      reference_ = cublas_reference(args(), nullptr);
      const std::int64_t first = first_non_finite_on_device(reference_.get(), shape_.tokens * shape_.hidden, nullptr);
      if (first < 0) return;
      double value = 0;
      ATTNRES_CUDA_CHECK(cudaMemcpy(&value, reference_.get() + first, sizeof value, cudaMemcpyDeviceToHost));
      summary.first_non_finite = std::make_pair(first, value);
    });
    return summary;
  }

  void run_kernel(KernelEntry& kernel, const LaunchOptions& options) override {
    guarded([&] { launch_and_wait(kernel, options); });
  }

  ProbeCall run_probe_call(KernelEntry& kernel, const LaunchOptions& options, std::uint64_t canary_seed) override {
    ProbeCall probe;
    guarded([&] {
      for (std::size_t i = 0; i < storage_.size(); ++i)
        fill_patterned_canaries_on_device(view(i), canary_seed, int(i), nullptr);
      fill_alternating_rows_on_device(view(kOutput), kFinitePoisonBits, nullptr);
      try {
        launch_and_wait(kernel, options);
      } catch (const KernelRejection&) {
        probe.refused = true;
      }
      std::vector<TensorTally> tallies;
      for (std::size_t i = 0; i < storage_.size(); ++i)
        tallies.push_back(check_patterned_canaries_on_device(view(i), canary_seed, int(i), nullptr));
      probe.canaries_overwritten = exactness_report(tallies, layouts_, shape_, false).violations;
      if (!probe.refused) {
        probe_output_.emplace(storage_[kOutput].size());
        ATTNRES_CUDA_CHECK(cudaMemcpy(probe_output_->get(), storage_[kOutput].get(), storage_[kOutput].bytes(),
                                      cudaMemcpyDeviceToDevice));
      }
      make_inputs();
    });
    return probe;
  }

  OutputDifference difference_from_probe_call() override {
    OutputDifference d;
    const DeviceTensorView kept{probe_output_->get() + layouts_[kOutput].guard(), layouts_[kOutput],
                                layouts_[kOutput].guard()};
    guarded([&] { d = output_bits_difference_on_device(view(kOutput), kept, nullptr); });
    return d;
  }

  Comparison compare(double atol, double rtol) override {
    OutputTally tally;
    guarded([&] { tally = compare_output_on_device(view(kOutput), reference_.get(), atol, rtol, nullptr); });
    return comparison_from(tally, shape_.tokens, shape_.hidden, atol, rtol);
  }

  ErrorMap error_map(double atol, double rtol) override {
    ErrorMap map = empty_error_map(shape_.tokens, shape_.hidden);
    guarded([&] {
      error_map_on_device(view(kOutput), reference_.get(), atol, rtol, map.rows, map.columns, map.max_error.data(),
                          map.mismatched.data(), nullptr);
    });
    return map;
  }

  ExactnessReport check() override { return check_roles(tensor_role, false); }

  ExactnessReport check_untouched() override { return check_roles(untouched_role, true); }

  std::optional<std::string> run_kernel_behind_late_inputs(KernelEntry& kernel, const LaunchOptions& options) override {
    guarded([&] {
      const std::vector<DeviceBuffer<bf16_bits>> made = inputs_set_aside();
      SideStream side;
      delay_on_device(kLateInputsMicroseconds, side.stream);
      for (std::size_t i = 0; i < kOutput; ++i)
        ATTNRES_CUDA_CHECK(cudaMemcpyAsync(storage_[i].get(), made[i].get(), storage_[i].bytes(),
                                           cudaMemcpyDeviceToDevice, side.stream));
      launch_and_wait(kernel, options, side.stream);
    });
    return std::nullopt;
  }

  std::optional<std::string> run_kernel_behind_early_trigger(KernelEntry& kernel,
                                                             const LaunchOptions& options) override {
    if (device_.cc_major < 9)
      return fmt::format("programmatic dependent launch needs compute capability 9.0; this device has {}.{}",
                         device_.cc_major, device_.cc_minor);
    guarded([&] {
      const std::vector<DeviceBuffer<bf16_bits>> made = inputs_set_aside();
      LateCopies copies;
      for (std::size_t i = 0; i < kOutput; ++i) {
        copies.from[copies.count] = made[i].get();
        copies.to[copies.count] = storage_[i].get();
        copies.elements[copies.count++] = std::int64_t(storage_[i].size());
      }
      SideStream side;
      trigger_then_copy_late_on_device(copies, kLateInputsMicroseconds, side.stream);
      LaunchOptions dependent = options;
      dependent.programmatic_dependent_launch = true;
      launch_and_wait(kernel, dependent, side.stream);
    });
    return std::nullopt;
  }

  std::optional<std::string> run_kernel_in_graph(KernelEntry& kernel, const LaunchOptions& options,
                                                 const std::vector<std::uint64_t>& seeds, double atol, double rtol,
                                                 std::vector<GraphReplay>& replays) override {
    guarded([&] {
      SideStream side;
      std::unique_ptr<CapturedCall> captured;
      try {
        captured = kernel.capture({args()}, options, side.stream);
      } catch (const GraphCaptureError& e) {
        if (e.leaves_process_unusable()) usable_ = false;  // a worker is replaced before the next case
        throw;
      }
      for (const std::uint64_t seed : seeds) {
        key_inputs(seed);
        make_inputs();
        reference_ = DeviceBuffer<double>();  // freed before the next is made: the budget counts one
        reference_ = cublas_reference(args(), nullptr);
        ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
        captured->replay(side.stream);
        ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
        const OutputTally tally = compare_output_on_device(view(kOutput), reference_.get(), atol, rtol, nullptr);
        GraphReplay replay{output(), comparison_from(tally, shape_.tokens, shape_.hidden, atol, rtol), {}};
        const ExactnessReport exactness = check();
        replay.comparison.prefix_mismatches = exactness.prefix_mismatches;
        replay.comparison.blocks_mismatches = exactness.blocks_mismatches;
        replay.comparison.first_prefix_mismatch = exactness.first_prefix_mismatch;
        replay.comparison.first_blocks_mismatch = exactness.first_blocks_mismatch;
        replay.violations = exactness.violations;
        replays.push_back(std::move(replay));
      }
    });
    return std::nullopt;
  }

  HostTensor output() override {
    HostTensor host = make_tensor(layouts_[kOutput]);
    guarded([&] {
      ATTNRES_CUDA_CHECK(
          cudaMemcpy(host.storage.data(), storage_[kOutput].get(), storage_[kOutput].bytes(), cudaMemcpyDeviceToHost));
    });
    return host;
  }

  CaseArtifacts take_artifacts() override {
    if (!inputs_) throw std::logic_error("take_artifacts: the workspace was made without keeping its inputs");
    CaseArtifacts artifacts{std::move(*inputs_), CaseTensors{}, {}};
    guarded([&] {
      artifacts.after = download();
      artifacts.reference.resize(reference_.size());
      ATTNRES_CUDA_CHECK(
          cudaMemcpy(artifacts.reference.data(), reference_.get(), reference_.bytes(), cudaMemcpyDeviceToHost));
    });
    return artifacts;
  }

 private:
  // Everything the call queued, on any stream (a kernel may use non-blocking streams of its
  // own), is done before anything is judged; a refusal's work too.
  void launch_and_wait(KernelEntry& kernel, const LaunchOptions& options, cudaStream_t stream = nullptr) {
    try {
      kernel.launch(args(), options, stream);
    } catch (const KernelRejection&) {
      ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
      throw;
    }
    ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // The generator keys of every input, from `seed`: make_inputs generates from them.
  void key_inputs(std::uint64_t seed) {
    for (std::size_t i = 0; i < kOutput; ++i) pristine_[i].key = make_generator_key(seed, to_string(InputTensor(i)));
  }

  // Device copies of the inputs as made, which are then held at kCanaryBits until a late write
  // puts the copies back.
  std::vector<DeviceBuffer<bf16_bits>> inputs_set_aside() {
    std::vector<DeviceBuffer<bf16_bits>> made;
    for (std::size_t i = 0; i < kOutput; ++i) {
      made.emplace_back(storage_[i].size());
      ATTNRES_CUDA_CHECK(
          cudaMemcpy(made.back().get(), storage_[i].get(), storage_[i].bytes(), cudaMemcpyDeviceToDevice));
      fill_on_device(storage_[i].get(), layouts_[i].storage_elements(), kCanaryBits, nullptr);
    }
    ATTNRES_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    return made;
  }

  ExactnessReport check_roles(TensorRole (*role_of)(std::size_t), bool refused) {
    ResidualSources residual;
    residual.prefix = pristine_[0];
    residual.delta = pristine_[1];
    residual.prefix_layout = layouts_[0];
    residual.delta_layout = layouts_[1];
    residual.hidden = shape_.hidden;
    residual.has_delta = shape_.has_delta;
    residual.max_blocks = shape_.max_blocks;
    residual.block_write_idx = shape_.block_write_idx;
    std::vector<TensorTally> tallies;
    guarded([&] {
      for (std::size_t i = 0; i < layouts_.size(); ++i)
        tallies.push_back(check_tensor_on_device(view(i), role_of(i), pristine_[i], residual, nullptr));
    });
    return exactness_report(tallies, layouts_, shape_, refused);
  }

  template <class F>
  void guarded(F&& body) {
    try {
      body();
    } catch (const CudaError& e) {
      if (e.context_lost()) usable_ = false;
      throw;
    }
  }

  DeviceTensorView view(std::size_t i) const {
    return {storage_[i].get() + layouts_[i].guard(), layouts_[i], layouts_[i].guard()};
  }

  AttnResArgs args() const {
    AttnResArgs a;
    a.shape = shape_;
    a.strides = strides_;
    a.prefix = view(0).data();
    a.delta = shape_.has_delta ? view(1).data() : nullptr;
    a.blocks = view(2).data();
    a.norm_weight = view(3).data();
    a.qk_weight = view(4).data();
    a.output_norm_weight = shape_.has_output_norm ? view(5).data() : nullptr;
    a.output = view(kOutput).data();
    return a;
  }

  // Canaries everywhere, the poisoned output, and the inputs as made: generated, or copied from
  // the pristine replayed copies.
  void make_inputs() {
    for (std::size_t i = 0; i < storage_.size(); ++i)
      if (i == kOutput || pristine_copies_.empty())
        fill_on_device(storage_[i].get(), layouts_[i].storage_elements(), kCanaryBits, nullptr);
    fill_rows_on_device(view(kOutput), kPoisonBits, nullptr);
    for (std::size_t i = 0; i < kOutput; ++i) {
      if (!pristine_copies_.empty()) {
        ATTNRES_CUDA_CHECK(
            cudaMemcpy(storage_[i].get(), pristine_copies_[i].get(), storage_[i].bytes(), cudaMemcpyDeviceToDevice));
      } else {
        const DeviceTensorView v = view(i);
        generate_on_device(v.data(), v.layout, pristine_[i].key, pristine_[i].dist, nullptr);
      }
    }
    ATTNRES_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }

  // Replayed inputs: a pristine device copy the kernel's copy is made from and the checks compare against.
  void upload(CaseTensors host, bool keep) {
    const std::vector<HostTensor*> tensors = host.all();
    for (std::size_t i = 0; i < kOutput; ++i) {
      pristine_copies_.emplace_back(storage_[i].size());
      ATTNRES_CUDA_CHECK(cudaMemcpy(pristine_copies_.back().get(), tensors[i]->storage.data(), storage_[i].bytes(),
                                    cudaMemcpyHostToDevice));
      pristine_[i].copy = pristine_copies_.back().get() + layouts_[i].guard();
    }
    if (keep) inputs_ = std::move(host);
  }

  CaseTensors download() const {
    CaseTensors host = allocate_case_tensors(shape_, strides_);
    const std::vector<HostTensor*> tensors = host.all();
    for (std::size_t i = 0; i < tensors.size(); ++i)
      ATTNRES_CUDA_CHECK(
          cudaMemcpy(tensors[i]->storage.data(), storage_[i].get(), storage_[i].bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

  AttnResShape shape_;
  AttnResStrides strides_;
  std::vector<TensorLayout> layouts_;
  DeviceDescription device_;
  bool& usable_;
  std::vector<DeviceBuffer<bf16_bits>> storage_;
  PristineValues pristine_[kOutput + 1];  // the output's: canaries around it
  std::vector<DeviceBuffer<bf16_bits>> pristine_copies_;
  std::optional<DeviceBuffer<bf16_bits>> probe_output_;  // the output of the probe call
  DeviceBuffer<double> reference_;
  std::optional<CaseTensors> inputs_;
};

}  // namespace

std::unique_ptr<CaseWorkspace> make_device_workspace(const CaseSpec& spec, const InputSource* inputs,
                                                     bool keep_artifacts, const DeviceDescription& device,
                                                     bool& usable) {
  return std::make_unique<DeviceWorkspace>(spec, inputs, keep_artifacts, device, usable);
}

CaseFootprint device_workspace_footprint(const AttnResShape& shape, const AttnResStrides& strides, bool keep_artifacts,
                                         bool replayed) {
  const std::optional<std::int64_t> tensors = case_storage_bytes(shape, strides);
  const std::optional<std::int64_t> reference = cublas_reference_device_bytes(shape);
  if (!tensors || !reference) return {};
  const CheckedSize output_reference = CheckedSize(shape.tokens) * shape.hidden * CheckedSize(sizeof(double));
  CaseFootprint footprint;
  // The tensors (twice when replayed: the pristine copy), the output of the probe call, the
  // reference's buffers with cuBLAS's.
  const CheckedSize kept_output = CheckedSize(case_layouts(shape, strides)[kOperandCount - 1].storage_elements()) * 2;
  footprint.device_bytes =
      (CheckedSize(*tensors) * (replayed ? 2 : 1) + kept_output + *reference + kCublasWorkspaceBytes).get();
  // Host: the replayed tensors while they upload; for a repro bundle the inputs, the tensors
  // after the run and the reference.
  const CheckedSize host_copies = keep_artifacts ? 2 : replayed ? 1 : 0;
  footprint.host_bytes =
      (CheckedSize(*tensors) * host_copies + (keep_artifacts ? output_reference : CheckedSize(0))).get();
  return footprint;
}

}  // namespace attnres
