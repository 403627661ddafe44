// The Python bridge: `--kernel python:MODULE:FUNCTION [--signature auto|vllm|flashinfer] [--arg
// CONTRACT=PARAMETER ...]` calls a Python function (vLLM's dispatch attn_res, FlashInfer's
// kimi_k3_attn_res, a Triton kernel of your own), its parameters bound to the contract by name,
// in an embedded interpreter. Operands cross as DLPack capsules that torch turns into
// tensors with the tool's real strides. Built only where CMake finds Python's development files;
// the tool loads it with dlopen.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "kernels/external/bridge_abi.h"
#include "kernels/external/bridge_text.h"

// The binding of the function's parameters to the contract: python/attnres_check/binding.py,
// compiled in (cmake/EmbedPython.cmake) so that the bridge needs nothing installed beside torch.
const char* attnres_binding_script();

namespace {

using attnres::bridge::copy_text;

// The glue: the binding made, capsules to tensors, the call, the result checked.
constexpr const char* kGlue = R"PY(
import torch
import torch.utils.dlpack


class WrongResult(Exception):
    """The function ran, but what it returned cannot be the output."""


def bind_or_why(function, signature):
    """(the Binding, its limits) or (None, why it cannot be bound)."""
    try:
        binding = bind(function, signature)
    except BindingError as error:
        return None, str(error)
    return binding, binding.limits()


def call(binding, arguments, stream):
    """The call on torch's current stream, made the CUDA stream `stream` where it is not 0."""
    if not stream:
        return call_here(binding, *arguments)
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        return call_here(binding, *arguments)


# Graphs captured and not yet released, by key: they hold the memory torch gave them.
graphs = {}


def capture(binding, calls, stream):
    """The calls, in order, recorded under one torch.cuda.graph on the CUDA stream `stream`; the
    graph's key. The kernel's own error while capturing is raised, not the one ending the broken
    capture gives."""
    graph = torch.cuda.CUDAGraph()
    failure = None
    try:
        with torch.cuda.graph(graph, stream=torch.cuda.ExternalStream(stream)):
            try:
                for arguments in calls:
                    call_here(binding, *arguments)
            except Exception as error:
                failure = error
    except Exception:
        if failure is None:
            raise
    if failure is not None:
        raise failure
    graphs[id(graph)] = graph
    return id(graph)


def replay(key, stream):
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        graphs[key].replay()


def release(key):
    del graphs[key]


def call_here(binding, capsules, num_blocks, block_write_idx, eps, output_norm_eps):
    names = ("prefix", "delta", "blocks", "norm_weight", "qk_weight", "output_norm_weight", "output")
    values = {name: None if c is None else torch.utils.dlpack.from_dlpack(c) for name, c in zip(names, capsules)}
    values.update(num_blocks=num_blocks, block_write_idx=block_write_idx, eps=eps, output_norm_eps=output_norm_eps)
    output = values["output"]
    result = binding.call(values)
    if binding.writes_output:
        return
    if not isinstance(result, torch.Tensor):
        raise WrongResult(f"returned {type(result).__name__}, not a torch.Tensor")
    if tuple(result.shape) != tuple(output.shape) or result.dtype != torch.bfloat16 or result.device != output.device:
        raise WrongResult(f"returned a {result.dtype} tensor of shape {list(result.shape)} on {result.device}; "
                          f"expected torch.bfloat16 of shape {list(output.shape)} on {output.device}")
    output.copy_(result)


def cuda_unavailable():
    return None if torch.cuda.is_available() else f"torch {torch.__version__} in this Python cannot use CUDA"
)PY";

// What the binding cannot express (binding.py's Binding.limits), each with its reason.
struct BindingLimits {
  std::string delta, output_norm, block_write, partial_blocks, padded_output;
};

struct PythonKernel {
  PyObject* binding = nullptr;
  BindingLimits limits;
  PyObject* glue_call = nullptr;
  PyObject* glue_capture = nullptr;
  PyObject* glue_replay = nullptr;
  PyObject* glue_release = nullptr;
  PyObject* wrong_result = nullptr;
  std::string unusable;  // why no case can run on it, when none can
};

// The interpreter whose environment is reproduced: $ATTNRES_PYTHON, else the one built against.
std::string interpreter() {
  const char* chosen = std::getenv("ATTNRES_PYTHON");
  return chosen && *chosen ? chosen : ATTNRES_BUILD_PYTHON;
}

// Starts the interpreter once, as `python3` would start with that executable: its prefix, a
// virtual environment's pyvenv.cfg and site-packages, PYTHONPATH. Returns why it failed.
std::string start_python() {
  if (Py_IsInitialized()) return "";
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;  // Ctrl-C stays the tool's
  config.parse_argv = 0;
  const std::string executable = interpreter();
  char* argv[] = {const_cast<char*>(executable.c_str())};
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, executable.c_str());
  if (!PyStatus_Exception(status)) status = PyConfig_SetBytesArgv(&config, 1, argv);
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status))
    return std::string("cannot start Python as ") + executable + ": " +
           (status.err_msg ? status.err_msg : "unknown error");
  PyEval_SaveThread();  // the GIL is taken around each call, so Python's own threads can run
  return "";
}

// The pending Python exception as kind, str() and traceback; clears it.
struct PythonError {
  std::string kind, message, traceback;
  PyObject* type = nullptr;
};

// str(object) as UTF-8. A lone surrogate is written as Python escapes it (\ud800) and a NUL as
// \x00: the text crosses the bridge as a C string, and the rest of the message is still news.
std::string text_of(PyObject* object) {
  if (!object) return "";
  PyObject* text = PyObject_Str(object);
  PyObject* bytes = text ? PyUnicode_AsEncodedString(text, "utf-8", "backslashreplace") : nullptr;
  char* data = nullptr;
  Py_ssize_t size = 0;
  std::string out = "(cannot be printed)";
  if (bytes && PyBytes_AsStringAndSize(bytes, &data, &size) == 0) {
    out.clear();
    for (Py_ssize_t i = 0; i < size; ++i) out += data[i] == '\0' ? std::string("\\x00") : std::string(1, data[i]);
  }
  Py_XDECREF(bytes);
  Py_XDECREF(text);
  PyErr_Clear();
  return out;
}

// Fills `error` from the pending exception; the caller owns error.type.
PythonError fetch_error() {
  PythonError error;
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (!type) return error;
  if (PyObject* name = PyObject_GetAttrString(type, "__qualname__")) {
    error.kind = text_of(name);
    Py_DECREF(name);
  }
  PyErr_Clear();
  error.message = text_of(value);
  if (PyObject* module = PyImport_ImportModule("traceback")) {
    if (PyObject* lines = PyObject_CallMethod(module, "format_exception", "OOO", type, value ? value : Py_None,
                                              traceback ? traceback : Py_None)) {
      PyObject* empty = PyUnicode_FromString("");
      PyObject* joined = empty ? PyUnicode_Join(empty, lines) : nullptr;
      error.traceback = text_of(joined);
      Py_XDECREF(joined);
      Py_XDECREF(empty);
      Py_DECREF(lines);
    }
    Py_DECREF(module);
  }
  PyErr_Clear();
  error.type = type;
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return error;
}

void report_error(const PythonError& error, AttnResBridgeReport* report) {
  copy_text(report->message, report->message_capacity, error.message);
  copy_text(report->kind, report->kind_capacity, error.kind);
  copy_text(report->detail, report->detail_capacity, error.traceback);
}

// The pending exception as a failure in `report`: ATTNRES_KERNEL_FAILED.
int report_failure(AttnResBridgeReport* report) {
  PythonError error = fetch_error();
  report_error(error, report);
  Py_XDECREF(error.type);
  return ATTNRES_KERNEL_FAILED;
}

// Holds the GIL for a scope.
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

void* open(const char* target, const char* /*library*/, const char* signature, int32_t device_type,
           AttnResBridgeReport* report) {
  if (const std::string failure = start_python(); !failure.empty()) {
    copy_text(report->message, report->message_capacity, failure);
    return nullptr;
  }
  Gil gil;
  const std::string spec = target;
  const std::size_t colon = spec.rfind(':');
  const std::string module_name = spec.substr(0, colon), function_name = spec.substr(colon + 1);
  auto fail = [&](const std::string& context) -> void* {
    PythonError error = fetch_error();
    error.message = context + ": " + error.message;
    report_error(error, report);
    Py_XDECREF(error.type);
    return nullptr;
  };
  PyObject* glue = PyModule_New("attnres_check_glue");
  if (!glue) return fail("cannot make the glue module");
  PyObject* globals = PyModule_GetDict(glue);
  if (PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) != 0)
    return fail("cannot set up the glue module");
  PyObject* ran = PyRun_String(attnres_binding_script(), Py_file_input, globals, globals);
  if (!ran) return fail("cannot load the binding module");
  Py_DECREF(ran);
  ran = PyRun_String(kGlue, Py_file_input, globals, globals);
  if (!ran) return fail("the Python bridge needs torch in " + interpreter());
  Py_DECREF(ran);
  // Borrowed from the glue module, which lives as long as the interpreter.
  PyObject* const glue_call = PyDict_GetItemString(globals, "call");
  PyObject* const wrong_result = PyDict_GetItemString(globals, "WrongResult");
  PyObject* const cuda_unavailable = PyDict_GetItemString(globals, "cuda_unavailable");
  PyObject* const bind_or_why = PyDict_GetItemString(globals, "bind_or_why");
  PyObject* const glue_capture = PyDict_GetItemString(globals, "capture");
  PyObject* const glue_replay = PyDict_GetItemString(globals, "replay");
  PyObject* const glue_release = PyDict_GetItemString(globals, "release");
  if (!glue_call || !wrong_result || !cuda_unavailable || !bind_or_why || !glue_capture || !glue_replay ||
      !glue_release) {
    copy_text(report->message, report->message_capacity,
              "the glue module lacks call, capture, replay, release, WrongResult, cuda_unavailable or bind_or_why");
    return nullptr;
  }
  PyObject* module = PyImport_ImportModule(module_name.c_str());
  if (!module) return fail("cannot import " + module_name + " in " + interpreter());
  PyObject* function = PyObject_GetAttrString(module, function_name.c_str());
  Py_DECREF(module);
  if (!function) return fail(module_name + " has no " + function_name);
  if (!PyCallable_Check(function)) {
    Py_DECREF(function);
    copy_text(report->message, report->message_capacity, module_name + "." + function_name + " is not callable");
    return nullptr;
  }
  PyObject* bound = PyObject_CallFunction(bind_or_why, "Os", function, signature);
  Py_DECREF(function);
  if (!bound) return fail("cannot bind " + module_name + "." + function_name);
  // (binding, limits) or (None, why): a binding error is the user's to fix, said without a traceback.
  PyObject* binding = PyTuple_Check(bound) && PyTuple_Size(bound) == 2 ? PyTuple_GetItem(bound, 0) : nullptr;
  PyObject* limits = binding ? PyTuple_GetItem(bound, 1) : nullptr;
  if (!binding || binding == Py_None || !PyDict_Check(limits)) {
    copy_text(report->message, report->message_capacity, limits ? text_of(limits) : "bind_or_why returned no pair");
    Py_DECREF(bound);
    return nullptr;
  }
  auto* kernel = new PythonKernel;
  auto limit = [&](const char* name) {
    PyObject* reason = PyDict_GetItemString(limits, name);  // borrowed
    return reason ? text_of(reason) : std::string();
  };
  kernel->limits = {limit("delta"), limit("output_norm"), limit("block_write"), limit("partial_blocks"),
                    limit("padded_output")};
  kernel->binding = binding;
  Py_INCREF(kernel->binding);
  Py_DECREF(bound);
  kernel->glue_call = glue_call;
  kernel->glue_capture = glue_capture;
  kernel->glue_replay = glue_replay;
  kernel->glue_release = glue_release;
  kernel->wrong_result = wrong_result;
  for (PyObject* kept : {glue_call, glue_capture, glue_replay, glue_release, wrong_result}) Py_INCREF(kept);
  if (device_type == kDLCUDA) {
    if (PyObject* why = PyObject_CallObject(cuda_unavailable, nullptr)) {
      if (why != Py_None) kernel->unusable = text_of(why);
      Py_DECREF(why);
    } else {
      const PythonError error = fetch_error();
      kernel->unusable = error.message;
      Py_XDECREF(error.type);
    }
  }
  return kernel;
}

int cannot_implement(void* handle, const AttnResKernelCall* call, char* reason, size_t capacity) {
  const PythonKernel& kernel = *static_cast<const PythonKernel*>(handle);
  if (!kernel.unusable.empty()) {
    copy_text(reason, capacity, kernel.unusable);
    return ATTNRES_BRIDGE_UNUSABLE;
  }
  // In the order of binding.py's Binding.cannot_express: the first that holds is the reason.
  const BindingLimits& limits = kernel.limits;
  const std::pair<bool, const std::string&> facts[] = {
      {call->delta != nullptr, limits.delta},
      {call->output_norm_weight != nullptr, limits.output_norm},
      {call->block_write_idx >= 0, limits.block_write},
      {call->num_blocks != call->blocks->shape[1], limits.partial_blocks},
      {call->output->strides[0] != call->output->shape[1], limits.padded_output}};
  for (const auto& [holds, why] : facts)
    if (holds && !why.empty()) {
      copy_text(reason, capacity, why);
      return ATTNRES_BRIDGE_INEXPRESSIBLE;
    }
  return 0;
}

// A DLPack capsule for one operand; the DLManagedTensor owns copies of its shape and strides,
// never the data (the tool's buffer).
struct OwnedTensor {
  DLManagedTensor managed{};
  int64_t shape[3] = {}, strides[3] = {};
};

void delete_owned(DLManagedTensor* managed) { delete static_cast<OwnedTensor*>(managed->manager_ctx); }

void delete_unconsumed_capsule(PyObject* capsule) {
  // A consumer renames the capsule "used_dltensor" and takes over the deleter.
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  managed->deleter(managed);
}

PyObject* capsule_of(const DLTensor* tensor) {
  if (!tensor) Py_RETURN_NONE;
  auto* owned = new OwnedTensor;
  owned->managed.dl_tensor = *tensor;
  for (int d = 0; d < tensor->ndim; ++d) {
    owned->shape[d] = tensor->shape[d];
    owned->strides[d] = tensor->strides[d];
  }
  owned->managed.dl_tensor.shape = owned->shape;
  owned->managed.dl_tensor.strides = owned->strides;
  owned->managed.manager_ctx = owned;
  owned->managed.deleter = delete_owned;
  PyObject* capsule = PyCapsule_New(&owned->managed, "dltensor", delete_unconsumed_capsule);
  if (!capsule) delete owned;
  return capsule;
}

// The glue's arguments for one call, (capsules, num_blocks, block_write_idx, eps,
// output_norm_eps), with the GIL held; a new reference, or nullptr with the error pending.
PyObject* call_arguments(const AttnResKernelCall& call) {
  PyObject* capsules = PyTuple_New(7);
  const DLTensor* operands[7] = {
      call.prefix, call.delta, call.blocks, call.norm_weight, call.qk_weight, call.output_norm_weight, call.output};
  bool built = capsules != nullptr;
  for (int i = 0; built && i < 7; ++i) {
    PyObject* capsule = capsule_of(operands[i]);
    built = capsule != nullptr;
    if (built) PyTuple_SET_ITEM(capsules, i, capsule);  // steals the reference
  }
  PyObject* arguments =
      built ? Py_BuildValue("OLLdd", capsules, static_cast<long long>(call.num_blocks),
                            static_cast<long long>(call.block_write_idx), call.eps, call.output_norm_eps)
            : nullptr;
  Py_XDECREF(capsules);
  return arguments;
}

// glue(binding, what, stream) for the glue's call (`what`: one call's arguments) and capture (a
// list of them), with the GIL held; a new reference, or nullptr with the error pending.
PyObject* call_glue(PyObject* glue, const PythonKernel& kernel, PyObject* what, void* stream) {
  if (!what) return nullptr;
  PyObject* result = PyObject_CallFunction(glue, "OOK", kernel.binding, what,
                                           static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(stream)));
  Py_DECREF(what);
  return result;
}

int launch(void* handle, const AttnResKernelCall* call, AttnResBridgeReport* report) {
  const PythonKernel& kernel = *static_cast<const PythonKernel*>(handle);
  // Python code launches on torch's current stream: the glue makes the call's stream current.
  Gil gil;
  PyObject* result = call_glue(kernel.glue_call, kernel, call_arguments(*call), call->stream);
  if (result) {
    Py_DECREF(result);
    return ATTNRES_KERNEL_OK;
  }
  PythonError error = fetch_error();
  report_error(error, report);
  int status = ATTNRES_KERNEL_FAILED;
  if (error.type && PyErr_GivenExceptionMatches(error.type, kernel.wrong_result)) {
    status = ATTNRES_BRIDGE_WRONG_RESULT;
  } else if (error.type && (PyErr_GivenExceptionMatches(error.type, PyExc_RuntimeError) ||
                            PyErr_GivenExceptionMatches(error.type, PyExc_ValueError))) {
    // A kernel's refusal (TORCH_CHECK surfaces as RuntimeError; NotImplementedError is one too).
    status = ATTNRES_KERNEL_REFUSED;
  }
  Py_XDECREF(error.type);
  return status;
}

// The calls under torch.cuda.graph, so that what torch allocates while capturing comes from the
// graph's own pool. Any error while capturing is a capture failure, a refusal too.
int capture(void* handle, const AttnResKernelCall* calls, size_t count, void** graph, AttnResBridgeReport* report) {
  const PythonKernel& kernel = *static_cast<const PythonKernel*>(handle);
  Gil gil;
  PyObject* list = count > 0 ? PyList_New(Py_ssize_t(count)) : nullptr;
  for (size_t i = 0; list && i < count; ++i) {
    PyObject* arguments = call_arguments(calls[i]);
    if (!arguments)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, Py_ssize_t(i), arguments);  // steals the reference
  }
  if (!list && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "no calls to capture");
  PyObject* key = call_glue(kernel.glue_capture, kernel, list, count > 0 ? calls[0].stream : nullptr);
  if (!key) return report_failure(report);
  *graph = key;  // the reference is released with the graph
  return ATTNRES_KERNEL_OK;
}

int replay(void* handle, void* graph, void* stream, AttnResBridgeReport* report) {
  const PythonKernel& kernel = *static_cast<const PythonKernel*>(handle);
  Gil gil;
  PyObject* done = PyObject_CallFunction(kernel.glue_replay, "OK", static_cast<PyObject*>(graph),
                                         static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(stream)));
  if (!done) return report_failure(report);
  Py_DECREF(done);
  return ATTNRES_KERNEL_OK;
}

void release(void* handle, void* graph) {
  const PythonKernel& kernel = *static_cast<const PythonKernel*>(handle);
  Gil gil;
  PyObject* key = static_cast<PyObject*>(graph);
  if (PyObject* done = PyObject_CallFunctionObjArgs(kernel.glue_release, key, nullptr)) {
    Py_DECREF(done);
  } else {
    PyErr_Clear();  // nothing is left to release
  }
  Py_DECREF(key);
}

const AttnResBridge kBridge{ATTNRES_BRIDGE_ABI_VERSION, open, cannot_implement, launch, capture, replay, release};

}  // namespace

extern "C" __attribute__((visibility("default"))) const AttnResBridge* attnres_bridge(void) { return &kBridge; }
