#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "app/backend.h"
#include "kernels/checked_size.h"
#include "kernels/cuda_check.h"
#include "kernels/device_buffer.h"
#include "kernels/launch.h"
#include "kernels/kernel_entry.h"
#include "reference/cublas_reference.h"

namespace attnres {

std::vector<std::string> compiled_native_images() {
  std::vector<std::string> images;
  std::stringstream list(ATTNRES_NATIVE_IMAGES);
  for (std::string image; std::getline(list, image, ',');)
    if (!image.empty()) images.push_back(image);
  return images;
}

NativeImages native_images_from_build() {
  NativeImages images;
  for (const std::string& image : compiled_native_images()) {
    if (image == "sm_90a") images.sm90a = true;
    if (image == "sm_100a") images.sm100a = true;
  }
  return images;
}

std::optional<DeviceDescription> parse_device_model(const std::string& model) {
  if (model == "none") return DeviceDescription{};
  if (model.size() < 5 || model.rfind("sm_", 0) != 0 || model.size() > 6) return std::nullopt;
  const std::string digits = model.substr(3);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  DeviceDescription d;
  d.present = true;
  d.cc_major = std::stoi(digits.substr(0, digits.size() - 1));
  d.cc_minor = digits.back() - '0';
  d.name = "modelled " + model;
  return d;
}

namespace {

class CpuBackend : public Backend {
 public:
  CpuBackend(DeviceDescription model, NativeImages images) : model_(std::move(model)), images_(images) {
    register_builtin_kernels(kernels_, OperandPlace::host, images_);
  }
  OperandPlace operand_place() const override { return OperandPlace::host; }
  std::string name() const override { return "cpu"; }
  DeviceDescription device() const override { return model_; }
  NativeImages native_images() const override { return images_; }
  void execute(KernelEntry& kernel, const LaunchOptions& options, CaseTensors& tensors) override {
    kernel.launch(tensors.args(), options, nullptr);
  }
  std::optional<std::vector<double>> device_reference(const CaseTensors&) override { return std::nullopt; }
  std::optional<std::int64_t> device_bytes(const AttnResShape&, const AttnResStrides&, bool) const override { return 0; }
  std::optional<std::int64_t> free_device_bytes() const override { return std::nullopt; }

 private:
  DeviceDescription model_;
  NativeImages images_;
};

// Device copies of a case's tensors, guard regions included, and their device AttnResArgs.
struct DeviceTensors {
  std::vector<DeviceBuffer<bf16_bits>> buffers;
  AttnResArgs args;

  DeviceTensors(const CaseTensors& host, cudaStream_t stream) {
    const auto tensors = host.all();
    std::vector<bf16_bits*> data;
    for (const HostTensor* t : tensors) {
      buffers.emplace_back(t->storage.size());
      ATTNRES_CUDA_CHECK(cudaMemcpyAsync(buffers.back().get(), t->storage.data(), buffers.back().bytes(),
                                         cudaMemcpyHostToDevice, stream));
      data.push_back(buffers.back().get() + kGuardElements);
    }
    args = host.layout();
    args.prefix = data[0];
    args.delta = host.shape.has_delta ? data[1] : nullptr;
    args.blocks = data[2];
    args.norm_weight = data[3];
    args.qk_weight = data[4];
    args.output_norm_weight = host.shape.has_output_norm ? data[5] : nullptr;
    args.output = data[6];
  }

  void download(CaseTensors& host, cudaStream_t stream) const {
    const auto tensors = host.all();
    for (std::size_t i = 0; i < tensors.size(); ++i)
      ATTNRES_CUDA_CHECK(cudaMemcpyAsync(tensors[i]->storage.data(), buffers[i].get(), buffers[i].bytes(),
                                         cudaMemcpyDeviceToHost, stream));
    ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

// cuBLAS's handle and default workspace, with room to spare.
constexpr std::int64_t kCublasWorkspaceBytes = std::int64_t(64) << 20;

class CudaBackend : public Backend {
 public:
  CudaBackend(DeviceDescription device, NativeImages images) : device_(std::move(device)), images_(images) {
    register_builtin_kernels(kernels_, OperandPlace::cuda_device, images_);
  }
  OperandPlace operand_place() const override { return OperandPlace::cuda_device; }
  std::string name() const override { return "cuda"; }
  DeviceDescription device() const override { return device_; }
  NativeImages native_images() const override { return images_; }
  bool usable() const override { return usable_; }

  void execute(KernelEntry& kernel, const LaunchOptions& options, CaseTensors& tensors) override {
    guarded([&] {
      DeviceTensors device(tensors, nullptr);
      kernel.launch(device.args, options, nullptr);
      ATTNRES_CUDA_CHECK(cudaStreamSynchronize(nullptr));
      device.download(tensors, nullptr);
    });
  }

  // One device copy of the tensors for the kernel; the reference makes its own copy later,
  // after the first is freed, plus its float64 intermediates and cuBLAS's workspace.
  std::optional<std::int64_t> device_bytes(const AttnResShape& shape, const AttnResStrides& strides,
                                           bool device_reference) const override {
    const std::optional<std::int64_t> tensors = case_storage_bytes(shape, strides);
    if (!tensors || !device_reference) return tensors;
    const std::optional<std::int64_t> reference = cublas_reference_device_bytes(shape, strides);
    if (!reference) return std::nullopt;
    return (CheckedSize(*tensors) + *reference + kCublasWorkspaceBytes).get();
  }

  std::optional<std::int64_t> free_device_bytes() const override {
    std::size_t free = 0, total = 0;
    ATTNRES_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return std::int64_t(free);
  }

  // Generated on the device (the generator gives the host's bits there) and copied into the
  // canary-filled host tensors, logical elements only: much faster than generating on the host.
  CaseTensors make_inputs(const CaseSpec& spec) override {
    CaseTensors tensors = allocate_case_tensors(spec.shape, spec.strides());
    guarded([&] {
      for (const GeneratedTensor& g : generated_tensors(tensors)) {
        HostTensor& t = *g.tensor;
        if (t.empty()) continue;
        DeviceBuffer<bf16_bits> device(std::size_t(t.span()));
        generate_on_device(device.get(), t.rows, t.columns, t.row_stride, make_generator_key(spec.seed, to_string(g.which)),
                           resolve(spec.distributions[int(g.which)], spec.shape.hidden), nullptr);
        const std::size_t pitch = std::size_t(t.row_stride) * sizeof(bf16_bits);
        ATTNRES_CUDA_CHECK(cudaMemcpy2D(t.data(), pitch, device.get(), pitch, std::size_t(t.columns) * sizeof(bf16_bits),
                                        std::size_t(t.rows), cudaMemcpyDeviceToHost));
      }
    });
    return tensors;
  }

  std::optional<std::vector<double>> device_reference(const CaseTensors& inputs) override {
    std::vector<double> out;
    guarded([&] {
      DeviceTensors device(inputs, nullptr);
      out = cublas_reference(device.args, nullptr);
    });
    return out;
  }

 private:
  template <class F>
  void guarded(F&& body) {
    try {
      body();
    } catch (const CudaError& e) {
      if (e.context_lost()) usable_ = false;
      throw;
    }
  }

  DeviceDescription device_;
  NativeImages images_;
  bool usable_ = true;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(DeviceDescription model, NativeImages images) {
  return std::make_unique<CpuBackend>(std::move(model), images);
}

std::unique_ptr<Backend> make_cuda_backend(std::string& why, int ordinal) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    cudaGetLastError();
    why = status != cudaSuccess ? fmt::format("no CUDA device ({})", cudaGetErrorString(status)) : "no CUDA device";
    return nullptr;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_note = visible ? fmt::format(" with CUDA_VISIBLE_DEVICES={}", visible) : "";
  if (ordinal < 0 || ordinal >= count)
    throw std::invalid_argument(fmt::format("--device {}: this process sees {} CUDA device{} (0..{}){}", ordinal, count,
                                            count == 1 ? "" : "s", count - 1, visible_note));
  ATTNRES_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp props{};
  ATTNRES_CUDA_CHECK(cudaGetDeviceProperties(&props, ordinal));
  // The name says which device ran the case wherever more than one could have.
  const std::string name = count > 1 || visible ? fmt::format("{} [device {}{}]", props.name, ordinal, visible_note) : props.name;
  DeviceDescription device{true, name, props.major, props.minor};
  // The native image for this device's family counts only if it really loads here.
  NativeImages images;
  const NativeImageQuery query = query_native_image();
  images.sm90a = query.loadable && query.binary_version == 90;
  images.sm100a = query.loadable && query.binary_version / 10 == 10;
  return std::make_unique<CudaBackend>(std::move(device), images);
}

}  // namespace attnres
