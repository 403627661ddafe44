#include "app/plugin_kernel.h"

#include <dlfcn.h>

#include <array>
#include <vector>

#include <attnres/kernel_abi.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "kernels/cuda_check.h"

namespace attnres {

namespace {

constexpr std::size_t kErrorCapacity = 4096;

// One operand as DLPack sees it; shape and strides live here for the call's duration.
struct Operand {
  std::array<std::int64_t, 3> shape{}, strides{};
  DLTensor tensor{};

  const DLTensor* set(const void* data, DLDevice device, std::vector<std::int64_t> dims, std::vector<std::int64_t> steps) {
    if (!data) return nullptr;
    std::copy(dims.begin(), dims.end(), shape.begin());
    std::copy(steps.begin(), steps.end(), strides.begin());
    tensor.data = const_cast<void*>(data);
    tensor.device = device;
    tensor.ndim = int(dims.size());
    tensor.dtype = DLDataType{kDLBfloat, 16, 1};
    tensor.shape = shape.data();
    tensor.strides = strides.data();
    tensor.byte_offset = 0;
    return &tensor;
  }
};

class SharedLibraryKernel : public KernelEntry {
 public:
  SharedLibraryKernel(std::string name, AttnResKernelFn kernel, const AttnResKernelInfo& info)
      : name_(std::move(name)), kernel_(kernel), device_type_(info.device_type) {}

  std::string name() const override { return name_; }
  OperandPlace operands() const override {
    return device_type_ == kDLCUDA ? OperandPlace::cuda_device : OperandPlace::host;
  }
  std::optional<std::string> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription& device) const override {
    if (device_type_ == kDLCUDA && !device.present) return std::string("the plugin takes CUDA operands; no CUDA device");
    return std::nullopt;
  }

  void launch(const AttnResArgs& a, const LaunchOptions&, cudaStream_t stream) override {
    DLDevice device{device_type_ == kDLCUDA ? kDLCUDA : kDLCPU, 0};
    if (device_type_ == kDLCUDA) ATTNRES_CUDA_CHECK(cudaGetDevice(&device.device_id));
    const AttnResShape& s = a.shape;
    const std::int64_t t = s.tokens, h = s.hidden;
    std::array<Operand, 7> operands;
    AttnResKernelCall call{};
    call.abi_version = ATTNRES_KERNEL_ABI_VERSION;
    call.prefix = operands[0].set(a.prefix, device, {t, h}, {a.strides.prefix, 1});
    call.delta = operands[1].set(a.delta, device, {t, h}, {a.strides.delta, 1});
    call.blocks = operands[2].set(a.blocks, device, {t, s.max_blocks, h}, {a.strides.blocks_token, a.strides.blocks_row, 1});
    call.norm_weight = operands[3].set(a.norm_weight, device, {h}, {1});
    call.qk_weight = operands[4].set(a.qk_weight, device, {h}, {1});
    call.output_norm_weight = operands[5].set(a.output_norm_weight, device, {h}, {1});
    call.output = operands[6].set(a.output, device, {t, h}, {a.strides.output, 1});
    call.num_blocks = s.num_blocks;
    call.block_write_idx = s.block_write_idx;
    call.eps = s.eps;
    call.output_norm_eps = s.output_norm_eps;
    call.stream = device_type_ == kDLCUDA ? stream : nullptr;
    std::vector<char> error(kErrorCapacity, '\0');
    call.error = error.data();
    call.error_capacity = error.size();
    int status = 0;
    try {
      status = kernel_(&call);
    } catch (const std::exception& e) {  // a C++ plugin that let an exception through its C entry
      throw KernelFailure(fmt::format("{} threw an exception: {}", name_, e.what()));
    } catch (...) {
      throw KernelFailure(fmt::format("{} threw an exception that is not a std::exception", name_));
    }
    error.back() = '\0';
    const std::string message = error.data();
    if (status == ATTNRES_KERNEL_REFUSED) throw KernelRejection(message);
    if (status != ATTNRES_KERNEL_OK)
      throw KernelFailure(fmt::format("{} returned {}{}", name_, status, message.empty() ? "" : ": " + message));
    if (device_type_ == kDLCUDA) ATTNRES_CHECK_LAUNCH("plugin kernel");
  }

 private:
  std::string name_;
  AttnResKernelFn kernel_;
  std::int32_t device_type_;
};

}  // namespace

std::unique_ptr<KernelEntry> load_shared_library_kernel(const std::string& spec) {
  const std::string body = spec.substr(3);  // after "so:"
  const std::size_t colon = body.rfind(':');
  const bool has_symbol = colon != std::string::npos && body.find('/', colon) == std::string::npos && colon + 1 < body.size();
  const std::string path = has_symbol ? body.substr(0, colon) : body;
  const std::string symbol = has_symbol ? body.substr(colon + 1) : "attnres_kernel";
  auto fail = [&](const std::string& what) { return PluginError(fmt::format("--kernel {}: {}", spec, what)); };
  if (path.empty()) throw fail("expected so:PATH or so:PATH:SYMBOL");
  dlerror();
  // Never closed: a kernel library may register state (CUDA modules, atexit handlers) for the
  // life of the process.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) throw fail(fmt::format("cannot load the library: {}", dlerror()));
  auto find = [&](const std::string& name) {
    dlerror();
    void* address = dlsym(library, name.c_str());
    if (const char* error = dlerror()) throw fail(fmt::format("no symbol {}: {}", name, error));
    if (!address) throw fail(fmt::format("symbol {} is null", name));
    return address;
  };
  const auto info_fn = reinterpret_cast<AttnResKernelInfoFn>(find(symbol + "_info"));
  const auto kernel = reinterpret_cast<AttnResKernelFn>(find(symbol));
  const AttnResKernelInfo* info = info_fn();
  if (!info) throw fail(symbol + "_info returned null");
  if (info->abi_version != ATTNRES_KERNEL_ABI_VERSION)
    throw fail(fmt::format("built for kernel ABI version {}, this attnres-check speaks version {}", info->abi_version,
                           ATTNRES_KERNEL_ABI_VERSION));
  if (info->device_type != kDLCPU && info->device_type != kDLCUDA)
    throw fail(fmt::format("device_type {} is neither kDLCPU ({}) nor kDLCUDA ({})", info->device_type, int(kDLCPU),
                           int(kDLCUDA)));
  return std::make_unique<SharedLibraryKernel>(spec, kernel, *info);
}

}  // namespace attnres
