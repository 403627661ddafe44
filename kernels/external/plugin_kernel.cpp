#include "kernels/external/plugin_kernel.h"

#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include <attnres/kernel_abi.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "kernels/common/cuda_check.h"
#include "kernels/external/bridge_abi.h"
#include "kernels/external/install_paths.h"

namespace attnres {

namespace {

constexpr std::size_t kTextCapacity = 16384;
// Version 1 plugins take version 2 calls: what version 2 added, they never read.
constexpr std::uint32_t kOldestKernelAbi = 1;

// One call as the C ABI sees it: every operand a DLTensor with its real shape and strides.
// Without data (a can-implement question) the operands are there with NULL data pointers.
class DlpackCall {
 public:
  DlpackCall(const AttnResArgs& a, DLDevice device) {
    const AttnResShape& s = a.shape;
    const std::int64_t t = s.tokens, h = s.hidden;
    call_.abi_version = ATTNRES_KERNEL_ABI_VERSION;
    call_.prefix = set(0, a.prefix, true, device, {t, h}, {a.strides.prefix, 1});
    call_.delta = set(1, a.delta, s.has_delta, device, {t, h}, {a.strides.delta, 1});
    call_.blocks =
        set(2, a.blocks, true, device, {t, s.max_blocks, h}, {a.strides.blocks_token, a.strides.blocks_row, 1});
    call_.norm_weight = set(3, a.norm_weight, true, device, {h}, {1});
    call_.qk_weight = set(4, a.qk_weight, true, device, {h}, {1});
    call_.output_norm_weight = set(5, a.output_norm_weight, s.has_output_norm, device, {h}, {1});
    call_.output = set(6, a.output, true, device, {t, h}, {a.strides.output, 1});
    call_.num_blocks = s.num_blocks;
    call_.block_write_idx = s.block_write_idx;
    call_.eps = s.eps;
    call_.output_norm_eps = s.output_norm_eps;
  }
  DlpackCall(const DlpackCall&) = delete;
  DlpackCall& operator=(const DlpackCall&) = delete;
  AttnResKernelCall& get() { return call_; }

 private:
  struct Operand {
    std::array<std::int64_t, 3> shape{}, strides{};
    DLTensor tensor{};
  };
  const DLTensor* set(int index, const void* data, bool present, DLDevice device, std::vector<std::int64_t> dims,
                      std::vector<std::int64_t> steps) {
    if (!present) return nullptr;
    Operand& o = operands_[std::size_t(index)];
    std::copy(dims.begin(), dims.end(), o.shape.begin());
    std::copy(steps.begin(), steps.end(), o.strides.begin());
    o.tensor.data = const_cast<void*>(data);
    o.tensor.device = device;
    o.tensor.ndim = int(dims.size());
    o.tensor.dtype = DLDataType{kDLBfloat, 16, 1};
    o.tensor.shape = o.shape.data();
    o.tensor.strides = o.strides.data();
    o.tensor.byte_offset = 0;
    return &o.tensor;
  }

  std::array<Operand, 7> operands_;
  AttnResKernelCall call_{};
};

DLDevice dlpack_device(OperandPlace place) {
  DLDevice device{place == OperandPlace::cuda_device ? kDLCUDA : kDLCPU, 0};
  if (place == OperandPlace::cuda_device) ATTNRES_CUDA_CHECK(cudaGetDevice(&device.device_id));
  return device;
}

// A NUL-terminated text buffer for a plugin or bridge to fill.
struct TextBuffer {
  std::vector<char> bytes = std::vector<char>(kTextCapacity, '\0');
  std::string text() {
    bytes.back() = '\0';
    return bytes.data();
  }
};

class SharedLibraryKernel : public KernelEntry {
 public:
  SharedLibraryKernel(std::string name, AttnResKernelFn kernel, const AttnResKernelInfo& info,
                      KernelPreconditions preconditions)
      : name_(std::move(name)),
        kernel_(kernel),
        device_type_(info.device_type),
        preconditions_(std::move(preconditions)) {}

  std::string name() const override { return name_; }
  OperandPlace operands() const override {
    return device_type_ == kDLCUDA ? OperandPlace::cuda_device : OperandPlace::host;
  }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription& device) const override {
    if (device_type_ == kDLCUDA && !device.present)
      return Unsupported{Unsupported::Kind::here, "the plugin takes CUDA operands; no CUDA device"};
    return std::nullopt;
  }
  KernelPreconditions preconditions() const override { return preconditions_; }

  void launch(const AttnResArgs& a, const LaunchOptions& options, cudaStream_t stream) override {
    DlpackCall dlpack(a, dlpack_device(operands()));
    AttnResKernelCall& call = dlpack.get();
    call.stream = device_type_ == kDLCUDA ? stream : nullptr;
    call.enable_pdl = device_type_ == kDLCUDA && options.programmatic_dependent_launch;
    TextBuffer error;
    call.error = error.bytes.data();
    call.error_capacity = error.bytes.size();
    int status = 0;
    try {
      status = kernel_(&call);
    } catch (const std::exception& e) {  // a C++ plugin that let an exception through its C entry
      throw KernelFailure(fmt::format("{} threw an exception: {}", name_, e.what()));
    } catch (...) {
      throw KernelFailure(fmt::format("{} threw an exception that is not a std::exception", name_));
    }
    const std::string message = error.text();
    if (status == ATTNRES_KERNEL_REFUSED) throw KernelRejection(message);
    if (status != ATTNRES_KERNEL_OK)
      throw KernelFailure(fmt::format("{} returned {}{}", name_, status, message.empty() ? "" : ": " + message));
    if (device_type_ == kDLCUDA) ATTNRES_CHECK_LAUNCH("plugin kernel");
  }

 private:
  std::string name_;
  AttnResKernelFn kernel_;
  std::int32_t device_type_;
  KernelPreconditions preconditions_;
};

// The three texts of a bridge's report, owned here.
struct BridgeTexts {
  TextBuffer message, kind, detail;
  AttnResBridgeReport report{};
  BridgeTexts() {
    report = {message.bytes.data(), message.bytes.size(), kind.bytes.data(),
              kind.bytes.size(),    detail.bytes.data(),  detail.bytes.size()};
  }
  BridgeTexts(const BridgeTexts&) = delete;
  BridgeTexts& operator=(const BridgeTexts&) = delete;
  // "kind: message", as a bridge's error is reported.
  std::string error() {
    const std::string type = kind.text();
    return (type.empty() ? "" : type + ": ") + message.text();
  }
  // The error with the detail (a traceback) on the lines after it, where there is one.
  std::string error_and_detail() {
    const std::string context = detail.text();
    return error() + (context.empty() ? "" : "\n" + context);
  }
};

// A torch op or a Python function, through its bridge library.
class BridgeKernel : public KernelEntry {
 public:
  BridgeKernel(std::string name, const AttnResBridge* bridge, void* handle, OperandPlace place,
               KernelPreconditions preconditions)
      : name_(std::move(name)),
        bridge_(bridge),
        handle_(handle),
        place_(place),
        preconditions_(std::move(preconditions)) {}

  std::string name() const override { return name_; }
  OperandPlace operands() const override { return place_; }
  std::optional<Unsupported> cannot_implement(const AttnResShape& shape, const AttnResStrides& strides,
                                              const DeviceDescription& device) const override {
    if (place_ == OperandPlace::cuda_device && !device.present)
      return Unsupported{Unsupported::Kind::here, "no CUDA device"};
    AttnResArgs question;
    question.shape = shape;
    question.strides = strides;
    DlpackCall dlpack(question, DLDevice{place_ == OperandPlace::cuda_device ? kDLCUDA : kDLCPU, 0});
    TextBuffer reason;
    switch (bridge_->cannot_implement(handle_, &dlpack.get(), reason.bytes.data(), reason.bytes.size())) {
      case 0: return std::nullopt;
      case ATTNRES_BRIDGE_INEXPRESSIBLE: return Unsupported{Unsupported::Kind::signature, reason.text()};
      default: return Unsupported{Unsupported::Kind::here, reason.text()};
    }
  }
  KernelPreconditions preconditions() const override { return preconditions_; }

  void launch(const AttnResArgs& a, const LaunchOptions&, cudaStream_t stream) override {
    DlpackCall dlpack(a, dlpack_device(place_));
    dlpack.get().stream = place_ == OperandPlace::cuda_device ? stream : nullptr;
    BridgeTexts texts;
    const int status = bridge_->launch(handle_, &dlpack.get(), &texts.report);
    if (status == ATTNRES_KERNEL_REFUSED)
      throw KernelRejection(texts.message.text(), texts.kind.text(), texts.detail.text());
    if (status == ATTNRES_BRIDGE_WRONG_RESULT) throw KernelWrongResult(texts.message.text());
    if (status != ATTNRES_KERNEL_OK) throw KernelFailure(texts.error(), texts.detail.text());
    if (place_ == OperandPlace::cuda_device) ATTNRES_CHECK_LAUNCH("bridged kernel");
  }

  std::unique_ptr<CapturedCall> capture(const std::vector<AttnResArgs>& calls, const LaunchOptions& options,
                                        cudaStream_t stream) override {
    if (!bridge_->capture) return KernelEntry::capture(calls, options, stream);
    // The operands' descriptions stay where they are made while the bridge reads them.
    std::vector<std::unique_ptr<DlpackCall>> described;
    std::vector<AttnResKernelCall> dlpack;
    for (const AttnResArgs& a : calls) {
      described.push_back(std::make_unique<DlpackCall>(a, dlpack_device(place_)));
      dlpack.push_back(described.back()->get());
      dlpack.back().stream = stream;
    }
    BridgeTexts texts;
    void* graph = nullptr;
    if (bridge_->capture(handle_, dlpack.data(), dlpack.size(), &graph, &texts.report) != ATTNRES_KERNEL_OK || !graph) {
      cudaGetLastError();  // a failed capture's error is not sticky: later calls must not see it
      throw GraphCaptureError(texts.error_and_detail(), true);
    }
    return std::make_unique<BridgeGraph>(bridge_, handle_, graph);
  }

 private:
  // A graph the bridge captured and keeps; released with this.
  class BridgeGraph : public CapturedCall {
   public:
    BridgeGraph(const AttnResBridge* bridge, void* handle, void* graph)
        : bridge_(bridge), handle_(handle), graph_(graph) {}
    ~BridgeGraph() override { bridge_->release(handle_, graph_); }
    BridgeGraph(const BridgeGraph&) = delete;
    BridgeGraph& operator=(const BridgeGraph&) = delete;
    void replay(cudaStream_t stream) override {
      BridgeTexts texts;
      if (bridge_->replay(handle_, graph_, stream, &texts.report) != ATTNRES_KERNEL_OK)
        throw KernelFailure("replaying the captured graph: " + texts.error(), texts.detail.text());
      ATTNRES_CHECK_LAUNCH("replayed graph");
    }

   private:
    const AttnResBridge* bridge_;
    void* handle_;
    void* graph_;
  };

  std::string name_;
  const AttnResBridge* bridge_;
  void* handle_;
  OperandPlace place_;
  KernelPreconditions preconditions_;
};

// Never closed: a kernel library may register state (CUDA modules, torch ops, atexit
// handlers) for the life of the process.
void* open_library(const std::string& path, int flags, const std::string& spec) {
  dlerror();
  void* library = dlopen(path.c_str(), flags);
  if (!library) throw PluginError(fmt::format("--kernel {}: cannot load the library {}: {}", spec, path, dlerror()));
  return library;
}

void* find_symbol(void* library, const std::string& name, const std::string& spec) {
  dlerror();
  void* address = dlsym(library, name.c_str());
  if (const char* error = dlerror()) throw PluginError(fmt::format("--kernel {}: no symbol {}: {}", spec, name, error));
  if (!address) throw PluginError(fmt::format("--kernel {}: symbol {} is null", spec, name));
  return address;
}

}  // namespace

namespace {

std::unique_ptr<KernelEntry> load_shared_library_kernel(const KernelSpec& kernel_spec,
                                                        const ExternalKernelOptions& options) {
  const std::string spec = kernel_spec.to_string();
  const std::string& path = kernel_spec.library;
  const std::string symbol = kernel_spec.symbol.empty() ? "attnres_kernel" : kernel_spec.symbol;
  auto fail = [&](const std::string& what) { return PluginError(fmt::format("--kernel {}: {}", spec, what)); };
  void* library = open_library(path, RTLD_NOW | RTLD_LOCAL, spec);
  const auto info_fn = reinterpret_cast<AttnResKernelInfoFn>(find_symbol(library, symbol + "_info", spec));
  const auto kernel = reinterpret_cast<AttnResKernelFn>(find_symbol(library, symbol, spec));
  const AttnResKernelInfo* info = info_fn();
  if (!info) throw fail(symbol + "_info returned null");
  if (info->abi_version < kOldestKernelAbi || info->abi_version > ATTNRES_KERNEL_ABI_VERSION)
    throw fail(fmt::format("built for kernel ABI version {}, this attnres-check speaks versions {} to {}",
                           info->abi_version, kOldestKernelAbi, ATTNRES_KERNEL_ABI_VERSION));
  if (info->device_type != kDLCPU && info->device_type != kDLCUDA)
    throw fail(fmt::format("device_type {} is neither kDLCPU ({}) nor kDLCUDA ({})", info->device_type, int(kDLCPU),
                           int(kDLCUDA)));
  return std::make_unique<SharedLibraryKernel>(spec, kernel, *info, options.preconditions);
}

// Where bridge libraries are looked for: $ATTNRES_BRIDGE_DIR, beside the executable, and the
// installed lib/attnres-check beside its bin/.
std::vector<std::filesystem::path> bridge_directories() {
  std::vector<std::filesystem::path> dirs;
  if (const char* dir = std::getenv("ATTNRES_BRIDGE_DIR"); dir && *dir) dirs.emplace_back(dir);
  if (const std::filesystem::path bin = executable_directory(); !bin.empty()) {
    dirs.push_back(bin);
    dirs.push_back(bin.parent_path() / "lib" / "attnres-check");
  }
  return dirs;
}

std::unique_ptr<KernelEntry> load_bridge_kernel(const KernelSpec& kernel_spec, const ExternalKernelOptions& options) {
  const std::string spec = kernel_spec.to_string();
  const std::string& bridge_name = kernel_spec.bridge;
  const std::string& target = kernel_spec.target;
  // The library the bridge loads first (--torch-library; the command line allows it only with torch-op:).
  const std::string& library = options.torch_library;
  const std::string file = "libattnres_" + bridge_name + "_bridge.so";
  std::string looked;
  for (const std::filesystem::path& dir : bridge_directories()) {
    const std::filesystem::path path = dir / file;
    looked += (looked.empty() ? "" : ", ") + dir.string();
    if (!std::filesystem::exists(path)) continue;
    // RTLD_GLOBAL: the op library or Python extension modules the bridge loads resolve against
    // the libtorch / libpython it brought in.
    void* handle = open_library(path.string(), RTLD_NOW | RTLD_GLOBAL, spec);
    const auto bridge = reinterpret_cast<AttnResBridgeFn>(find_symbol(handle, ATTNRES_BRIDGE_SYMBOL, spec))();
    if (!bridge || bridge->abi_version != ATTNRES_BRIDGE_ABI_VERSION)
      throw PluginError(fmt::format("--kernel {}: {} was built for another attnres-check", spec, path.string()));
    BridgeTexts texts;
    void* opened = bridge->open(target.c_str(), library.c_str(), options.signature.c_str(),
                                options.place == OperandPlace::cuda_device ? kDLCUDA : kDLCPU, &texts.report);
    if (!opened) throw PluginError(fmt::format("--kernel {}: {}", spec, texts.error_and_detail()));
    return std::make_unique<BridgeKernel>(spec, bridge, opened, options.place, options.preconditions);
  }
  throw PluginError(
      fmt::format("--kernel {}: this build has no {} bridge ({} not found in {}); it is built where CMake "
                  "finds {}",
                  spec, bridge_name, file, looked, bridge_build_requirement(bridge_name)));
}

}  // namespace

std::unique_ptr<KernelEntry> load_external_kernel(const KernelSpec& spec, const ExternalKernelOptions& options) {
  switch (spec.kind) {
    case KernelSpec::Kind::shared_library: return load_shared_library_kernel(spec, options);
    case KernelSpec::Kind::bridge: return load_bridge_kernel(spec, options);
    case KernelSpec::Kind::builtin: break;
  }
  throw PluginError(fmt::format("--kernel {}: not an external kernel (so:, torch-op: or python:)", spec.to_string()));
}

}  // namespace attnres
