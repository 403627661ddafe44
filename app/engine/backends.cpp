#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "app/engine/backend.h"
#include "app/engine/device_workspace.h"
#include "kernels/builtin/builtin_kernels.h"
#include "kernels/common/cuda_check.h"
#include "kernels/native/launch_native.h"

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
  // The host workspace keeps the inputs as made whether or not a bundle asks for them.
  std::unique_ptr<CaseWorkspace> prepare(const CaseSpec& spec, const InputSource* inputs, bool) override {
    const HostExecutor launch = [](KernelEntry& kernel, const LaunchOptions& options, CaseTensors& tensors) {
      kernel.launch(tensors.args(), options, nullptr);
    };
    return make_host_workspace(inputs ? inputs->make() : make_case_tensors(spec), launch);
  }
  CaseFootprint footprint(const AttnResShape& shape, const AttnResStrides& strides, bool, bool) const override {
    return {host_workspace_bytes(shape, strides), 0};
  }
  std::optional<std::int64_t> free_device_bytes() const override { return std::nullopt; }

 private:
  DeviceDescription model_;
  NativeImages images_;
};

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

  std::unique_ptr<CaseWorkspace> prepare(const CaseSpec& spec, const InputSource* inputs,
                                         bool keep_artifacts) override {
    return make_device_workspace(spec, inputs, keep_artifacts, device_, usable_);
  }

  CaseFootprint footprint(const AttnResShape& shape, const AttnResStrides& strides, bool keep_artifacts,
                          bool replayed) const override {
    return device_workspace_footprint(shape, strides, keep_artifacts, replayed);
  }

  std::optional<std::int64_t> free_device_bytes() const override {
    std::size_t free = 0, total = 0;
    ATTNRES_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return std::int64_t(free);
  }

 private:
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
  const std::string name =
      count > 1 || visible ? fmt::format("{} [device {}{}]", props.name, ordinal, visible_note) : props.name;
  DeviceDescription device{true, name, props.major, props.minor};
  // The native image for this device's family counts only if it really loads here.
  NativeImages images;
  const NativeImageQuery query = query_native_image();
  images.sm90a = query.loadable && query.binary_version == 90;
  images.sm100a = query.loadable && query.binary_version / 10 == 10;
  return std::make_unique<CudaBackend>(std::move(device), images);
}

}  // namespace attnres
