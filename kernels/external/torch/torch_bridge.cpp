// The torch-op bridge: `--kernel torch-op:NAMESPACE::OP [--torch-library PATH]` calls a torch
// custom op (vLLM's _C::kimi_k3_attn_res, or any op with the same argument names) through the
// dispatcher, boxed, on the tool's own buffers wrapped with their real strides. Built only
// where CMake finds Torch; the tool loads it with dlopen.
#include <dlfcn.h>

#include <optional>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <c10/util/Type.h>
// Built against a torch with CUDA (CMake defines ATTNRES_TORCH_HAS_CUDA), the bridge launches
// ops on the stream it is given; a torch without CUDA has no CUDA ops to launch.
#if ATTNRES_TORCH_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/external/bridge_abi.h"
#include "kernels/external/bridge_text.h"

namespace {

using attnres::bridge::copy_text;

// The contract's operands and scalars, by the argument names of vLLM's schema
// kimi_k3_attn_res(Tensor! prefix, Tensor delta, Tensor blocks, Tensor norm_weight,
//   Tensor qk_weight, Tensor output_norm_weight, Tensor! output, int num_blocks, float eps,
//   float output_norm_eps) -> (); an op may also take `Tensor? delta`, `Tensor?
// output_norm_weight`, `int block_write_idx`, or return the output instead of taking it.
enum class Slot {
  prefix,
  delta,
  blocks,
  norm_weight,
  qk_weight,
  output_norm_weight,
  output,
  num_blocks,
  block_write_idx,
  eps,
  output_norm_eps
};

const std::pair<const char*, Slot> kSlotNames[] = {{"prefix", Slot::prefix},
                                                   {"delta", Slot::delta},
                                                   {"blocks", Slot::blocks},
                                                   {"norm_weight", Slot::norm_weight},
                                                   {"qk_weight", Slot::qk_weight},
                                                   {"output_norm_weight", Slot::output_norm_weight},
                                                   {"output", Slot::output},
                                                   {"out", Slot::output},
                                                   {"num_blocks", Slot::num_blocks},
                                                   {"block_write_idx", Slot::block_write_idx},
                                                   {"eps", Slot::eps},
                                                   {"output_norm_eps", Slot::output_norm_eps}};

std::optional<Slot> slot_of(const std::string& name) {
  for (const auto& [n, slot] : kSlotNames)
    if (name == n) return slot;
  return std::nullopt;
}

const char* slot_name(Slot slot) {
  for (const auto& [n, s] : kSlotNames)
    if (s == slot) return n;
  return "?";
}

bool is_tensor(const c10::TypePtr& type) { return type->kind() == c10::TypeKind::TensorType; }
bool is_optional_tensor(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::OptionalType && is_tensor(type->castRaw<c10::OptionalType>()->getElementType());
}

struct Argument {
  std::optional<Slot> slot;  // nothing: an argument of the op's own, left at its default
  bool optional_tensor = false;
  c10::IValue default_value;
};

struct TorchOp {
  std::string target;
  c10::optional<c10::OperatorHandle> handle;
  std::vector<Argument> arguments;
  bool takes[11] = {};
  bool optional[11] = {};
  bool returns_output = false;
  std::string unusable;  // why no case can run on it, when none can
};

bool takes(const TorchOp& op, Slot slot) { return op.takes[int(slot)]; }

// Reads the schema into argument slots, or says why the op cannot be called with the contract.
void bind_schema(TorchOp& op) {
  const c10::FunctionSchema& schema = op.handle->schema();
  for (const c10::Argument& a : schema.arguments()) {
    Argument arg;
    arg.slot = slot_of(a.name());
    if (!arg.slot) {
      if (!a.default_value()) {
        op.unusable = "argument \"" + a.name() + "\" of " + schema.name() +
                      " has no counterpart in the AttnRes contract "
                      "and no default (known names: prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, "
                      "output, num_blocks, block_write_idx, eps, output_norm_eps)";
        return;
      }
      arg.default_value = *a.default_value();
    } else {
      const int s = int(*arg.slot);
      op.takes[s] = true;
      op.optional[s] = arg.optional_tensor = is_optional_tensor(a.type());
      const bool tensor_slot = *arg.slot <= Slot::output;
      if (tensor_slot && !is_tensor(a.type()) && !arg.optional_tensor) {
        op.unusable = "argument \"" + a.name() + "\" of " + schema.name() + " is " + a.type()->str() + ", not a Tensor";
        return;
      }
    }
    op.arguments.push_back(std::move(arg));
  }
  const auto& returns = schema.returns();
  op.returns_output = returns.size() == 1 && is_tensor(returns[0].type());
  for (Slot required : {Slot::prefix, Slot::blocks, Slot::norm_weight, Slot::qk_weight, Slot::num_blocks})
    if (!takes(op, required)) {
      op.unusable = std::string(schema.name()) + " takes no \"" + slot_name(required) + "\" argument";
      return;
    }
  if (!takes(op, Slot::output) && !op.returns_output)
    op.unusable = std::string(schema.name()) + " neither takes an \"output\" argument nor returns a Tensor";
}

void* open(const char* target, const char* library, const char* /*signature*/, int32_t /*device_type*/,
           AttnResBridgeReport* report) {
  try {
    auto* op = new TorchOp;
    op->target = target;
    if (library && *library && !dlopen(library, RTLD_NOW | RTLD_GLOBAL)) {
      copy_text(report->message, report->message_capacity, std::string("cannot load the torch library: ") + dlerror());
      delete op;
      return nullptr;
    }
    std::string name = target, overload;
    if (const std::size_t dot = name.find('.', name.find("::")); dot != std::string::npos) {
      overload = name.substr(dot + 1);
      name.resize(dot);
    }
    op->handle = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!op->handle)
      op->unusable = "torch op " + op->target + " is not registered" +
                     (library && *library ? std::string(" after loading ") + library
                                          : std::string(" (no --torch-library given)")) +
                     "; a build without this op (vLLM built for CUDA 12 has no _C::kimi_k3_attn_res) cannot run it";
    else
      bind_schema(*op);
    return op;
  } catch (const std::exception& e) {
    copy_text(report->message, report->message_capacity, e.what());
    return nullptr;
  }
}

int cannot_implement(void* handle, const AttnResKernelCall* call, char* reason, size_t capacity) {
  const TorchOp& op = *static_cast<const TorchOp*>(handle);
  if (!op.unusable.empty()) {
    copy_text(reason, capacity, op.unusable);
    return ATTNRES_BRIDGE_UNUSABLE;
  }
  std::string why;
  auto absent_but_required = [&](bool present, Slot slot, const char* what) {
    if (why.empty() && !present && takes(op, slot) && !op.optional[int(slot)])
      why = op.target + " takes " + what + " as a Tensor (not Tensor?): a case without it cannot be expressed";
    if (why.empty() && present && !takes(op, slot))
      why = op.target + " takes no " + what + ": a case with it cannot be expressed";
  };
  absent_but_required(call->delta != nullptr, Slot::delta, "delta");
  absent_but_required(call->output_norm_weight != nullptr, Slot::output_norm_weight, "output_norm_weight");
  if (why.empty() && call->block_write_idx >= 0 && !takes(op, Slot::block_write_idx))
    why = op.target + " takes no block_write_idx: a case with a block write cannot be expressed";
  if (why.empty() && !takes(op, Slot::output) && call->output->strides[0] != call->output->shape[1])
    why = op.target + " returns a fresh output: a case with a padded output row stride cannot be expressed";
  copy_text(reason, capacity, why);
  return why.empty() ? 0 : ATTNRES_BRIDGE_INEXPRESSIBLE;
}

at::Tensor wrap(const DLTensor* t) {
  if (!t) return {};
  const c10::Device device = t->device.device_type == kDLCUDA
                                 ? c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(t->device.device_id))
                                 : c10::Device(c10::DeviceType::CPU);
  return at::from_blob(t->data, at::IntArrayRef(t->shape, t->ndim), at::IntArrayRef(t->strides, t->ndim),
                       at::TensorOptions().dtype(at::kBFloat16).device(device));
}

int launch(void* handle, const AttnResKernelCall* call, AttnResBridgeReport* report) {
  const TorchOp& op = *static_cast<const TorchOp*>(handle);
#if !ATTNRES_TORCH_HAS_CUDA
  if (call->stream) {
    copy_text(report->message, report->message_capacity, "this torch is built without CUDA: it has no CUDA streams");
    return ATTNRES_KERNEL_FAILED;
  }
#endif
  try {
#if ATTNRES_TORCH_HAS_CUDA
    // The op runs on torch's current stream: the call's stream is made current for it.
    std::optional<c10::cuda::CUDAStreamGuard> on_stream;
    if (call->stream)
      on_stream.emplace(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(call->stream),
                                                         c10::DeviceIndex(call->prefix->device.device_id)));
#endif
    const at::Tensor output = wrap(call->output);
    std::vector<c10::IValue> stack;
    for (const Argument& a : op.arguments) {
      if (!a.slot) {
        stack.push_back(a.default_value);
        continue;
      }
      switch (*a.slot) {
        case Slot::prefix: stack.emplace_back(wrap(call->prefix)); break;
        case Slot::delta: stack.push_back(call->delta ? c10::IValue(wrap(call->delta)) : c10::IValue()); break;
        case Slot::blocks: stack.emplace_back(wrap(call->blocks)); break;
        case Slot::norm_weight: stack.emplace_back(wrap(call->norm_weight)); break;
        case Slot::qk_weight: stack.emplace_back(wrap(call->qk_weight)); break;
        case Slot::output_norm_weight:
          stack.push_back(call->output_norm_weight ? c10::IValue(wrap(call->output_norm_weight)) : c10::IValue());
          break;
        case Slot::output: stack.emplace_back(output); break;
        case Slot::num_blocks: stack.emplace_back(int64_t(call->num_blocks)); break;
        case Slot::block_write_idx: stack.emplace_back(int64_t(call->block_write_idx)); break;
        case Slot::eps: stack.emplace_back(call->eps); break;
        case Slot::output_norm_eps: stack.emplace_back(call->output_norm_eps); break;
      }
    }
    op.handle->callBoxed(&stack);
    if (!takes(op, Slot::output)) {
      const at::Tensor result = stack.at(0).toTensor();
      if (result.sizes() != output.sizes() || result.scalar_type() != at::kBFloat16 ||
          result.device() != output.device()) {
        std::ostringstream what;
        what << op.target << " returned a " << result.scalar_type() << " tensor of shape " << result.sizes() << " on "
             << result.device() << "; expected BFloat16 " << output.sizes() << " on " << output.device();
        copy_text(report->message, report->message_capacity, what.str());
        return ATTNRES_BRIDGE_WRONG_RESULT;
      }
      output.copy_(result);
    }
    return ATTNRES_KERNEL_OK;
  } catch (const c10::Error& e) {
    // TORCH_CHECK's own text, without the C++ backtrace: what a refusal is compared by.
    copy_text(report->message, report->message_capacity, e.what_without_backtrace());
    copy_text(report->kind, report->kind_capacity, c10::demangle(typeid(e).name()));
    return ATTNRES_KERNEL_REFUSED;
  } catch (const std::exception& e) {
    copy_text(report->message, report->message_capacity, e.what());
    copy_text(report->kind, report->kind_capacity, c10::demangle(typeid(e).name()));
    return ATTNRES_KERNEL_FAILED;
  }
}

// A torch op is captured as the tool captures any launch: it writes into the tool's buffers.
const AttnResBridge kBridge{ATTNRES_BRIDGE_ABI_VERSION, open, cannot_implement, launch, nullptr, nullptr, nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) const AttnResBridge* attnres_bridge(void) { return &kBridge; }
