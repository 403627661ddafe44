"""Capture a serving engine's AttnRes calls as attnres-check case files (and, on request, tensors).

    from attnres_check import capture
    capture.install("vllm.models.kimi_k3.nvidia.ops.attn_res", "attn_res", "/tmp/capture")

or, before the engine starts, ATTNRES_CAPTURE_DIR=/tmp/capture with this module imported early
(`python -c 'import attnres_check.capture, runpy; ...'`, a sitecustomize.py, or an import in the
launcher): it then wraps the entry points in ATTNRES_CAPTURE_TARGETS ("module:function:signature,...",
default vLLM's Python dispatch and FlashInfer's API) as soon as their modules are imported.

Any signature attnres_check.binding can bind is captured: `signature` is auto (parameters bound by
name, with `arguments` as --arg gives them), vllm or flashinfer; in ATTNRES_CAPTURE_TARGETS it is
the signature text the tool uses ("auto;prefix=prefix_sum").

For each distinct call signature (every shape, stride, storage offset and dtype, num_blocks,
block_write_idx, eps values, whether delta and the output norm are given, the device and its
compute capability) one case file `attnres-<key>.json` in the tool's schema: `expect` pass, or
reject with the exact message when the wrapped call raised. Its description counts how often the
signature was seen. With ATTNRES_CAPTURE_TENSORS=1 the first call's inputs, taken before the call
(it overwrites prefix), go to `attnres-<key>.inputs.safetensors` with the strides and storage
offsets the tool replays:

    attnres-check run /tmp/capture
    attnres-check run /tmp/capture/attnres-<key>.json --inputs /tmp/capture/attnres-<key>.inputs.safetensors

Capturing never changes what the wrapped call returns or raises and never raises into the
caller: a failure to capture is reported once on stderr and the call goes on. Limits:
ATTNRES_CAPTURE_MAX_FILES distinct signatures (default 1000; later ones are counted, not
written) and ATTNRES_CAPTURE_MAX_BYTES of tensor files (default 4 GiB).

A function without num_blocks, block_write_idx or output_norm_eps is captured with all its blocks,
no block write and eps. No dependency beyond the standard library: tensors are read through their own methods
(shape, stride(), storage_offset(), dtype, device), and only to save tensors does it use torch
(and numpy, where installed, for speed).
"""
import datetime
import functools
import hashlib
import atexit
import importlib
import importlib.abc
import importlib.util
import json
import os
import struct
import sys
import threading

from .binding import Binding, parse_signature

__all__ = ["install", "wrap", "Capture", "call_signature", "case_for"]

INPUTS = ("prefix", "delta", "blocks", "norm_weight", "qk_weight", "output_norm_weight")
DEFAULT_TARGETS = ("vllm.models.kimi_k3.nvidia.ops.attn_res:attn_res:vllm,"
                   "flashinfer.kimi_k3_attn_res:kimi_k3_attn_res:flashinfer")
DTYPES = {"torch.bfloat16": "bf16"}


def _describe(tensor):
    """(shape, stride, storage_offset, dtype, device) of a tensor-like object, or None."""
    if tensor is None:
        return None
    return (tuple(int(n) for n in tensor.shape), tuple(int(s) for s in tensor.stride()), int(tensor.storage_offset()),
            str(tensor.dtype), str(tensor.device))


def _capability(tensor):
    """"sm_90" for a CUDA tensor (torch already imported by the caller), else "cpu"."""
    device = getattr(tensor, "device", None)
    if getattr(device, "type", None) != "cuda":
        return "cpu"
    torch = sys.modules.get("torch")
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _raw_key(value):
    """A call argument as the hashable objects it already has (no conversions: this runs on every
    call): a tensor's layout and dtype, any other value as it is."""
    if hasattr(value, "stride"):
        return (value.shape, value.stride(), value.storage_offset(), value.dtype)
    return value


def _raw_signature(args, kwargs):
    """The call's layouts, scalars and first argument's device as a tuple, cheap to build and to
    look up on every call."""
    key = tuple(_raw_key(a) for a in args)
    if kwargs:
        key += tuple((name, _raw_key(v)) for name, v in sorted(kwargs.items()))
    return key + (getattr(args[0] if args else next(iter(kwargs.values()), None), "device", None),)


def _bound(binding, args, kwargs):
    """The contract's values of the call; output_norm_eps as eps where the function has none."""
    bound = binding.contract_values(args, kwargs)
    if bound["output_norm_eps"] is None:
        bound["output_norm_eps"] = bound["eps"]
    return bound


def call_signature(bound, capability):
    """Everything a case file holds about a call, as a JSON-able dict."""
    return {
        "tensors": {name: _describe(bound[name]) for name in INPUTS + ("output",)},
        "num_blocks": int(bound["num_blocks"]), "block_write_idx": int(bound["block_write_idx"]),
        "eps": float(bound["eps"]), "output_norm_eps": float(bound["output_norm_eps"]), "capability": capability,
    }


def _key(signature):
    return hashlib.sha1(json.dumps(signature, sort_keys=True).encode()).hexdigest()[:16]


def case_for(signature, key, target, count, first_seen, rejection=None):
    """The case file (schema_version 1) of a captured call signature."""
    tensors = signature["tensors"]
    prefix, blocks = tensors["prefix"], tensors["blocks"]
    layouts = {}
    for name in INPUTS + ("output",):
        described = tensors.get(name)
        if described is None:
            continue
        _, stride, offset, _, _ = described
        layout = {"stride": list(stride)}
        if offset:
            layout["storage_offset"] = offset
        layouts[name] = layout
    dtypes = sorted({described[3] for described in tensors.values() if described is not None})
    device = prefix[4]
    case = {
        "schema_version": 1, "name": f"captured-{key}",
        "description": f"Captured by attnres_check.capture from {target} on {device} ({signature['capability']}); "
                       f"seen {count} time{'s' if count != 1 else ''} since {first_seen}.",
        "T": prefix[0][0], "H": prefix[0][1], "max_blocks": blocks[0][1], "num_blocks": signature["num_blocks"],
        "block_write_idx": signature["block_write_idx"], "has_delta": tensors["delta"] is not None,
        "has_output_norm": tensors["output_norm_weight"] is not None, "eps": signature["eps"],
        "output_norm_eps": signature["output_norm_eps"],
        # Any dtype but bf16 is written as it is, for the tool to refuse by name.
        "dtype": DTYPES.get(dtypes[0], dtypes[0]) if len(dtypes) == 1 else "/".join(dtypes),
        "tensors": layouts,
    }
    case["expect"] = {"verdict": "pass"} if rejection is None else {"verdict": "reject", "message": rejection}
    return case


def _write_atomically(path, data):
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def _storage_bytes(tensor, elements):
    """The first `elements` bf16 elements of the tensor's storage, as little-endian bytes."""
    flat = tensor.detach().as_strided((elements,), (1,), 0).cpu().contiguous()
    torch = sys.modules["torch"]
    bits = flat.view(torch.int16)
    try:
        return bits.numpy().astype("<i2").tobytes()
    except (ImportError, RuntimeError, TypeError):
        return struct.pack(f"<{elements}h", *bits.tolist())


def safetensors_of(bound, case):
    """An inputs file as the tool's repro bundles write it: each input's storage (from its
    start, as far as the view reaches), with its shape, strides and storage offset."""
    header, blobs, offset = {}, [], 0
    metadata = {"format": "attnres-check inputs v1", "case": json.dumps(case)}
    for name in INPUTS:
        tensor = bound[name]
        if tensor is None:
            continue
        shape, stride = list(tensor.shape), list(tensor.stride())
        reach = tensor.storage_offset() + max([n * s for n, s in zip(shape, stride)] + [shape[-1]])
        storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
        stored = storage.nbytes() // 2
        blob = _storage_bytes(tensor, min(reach, stored)) if all(shape) else b""
        header[name] = {"dtype": "BF16", "shape": [len(blob) // 2], "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
        metadata[f"{name}.shape"] = json.dumps(shape, separators=(",", ":"))
        metadata[f"{name}.stride"] = json.dumps(stride, separators=(",", ":"))
        metadata[f"{name}.storage_offset"] = str(tensor.storage_offset())
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


class Capture:
    """The state behind wrapped callables: one directory, its limits and what was seen."""

    def __init__(self, directory, tensors=None, max_files=None, max_bytes=None):
        self.directory = directory
        env = os.environ
        self.tensors = env.get("ATTNRES_CAPTURE_TENSORS", "0") == "1" if tensors is None else tensors
        self.max_files = int(env.get("ATTNRES_CAPTURE_MAX_FILES", "1000")) if max_files is None else max_files
        self.max_bytes = int(env.get("ATTNRES_CAPTURE_MAX_BYTES", str(4 << 30))) if max_bytes is None else max_bytes
        self.seen = {}  # key -> [count, first_seen, rejection, signature, target]
        self.keys = {}  # _raw_signature -> key (the device string in it stands for its capability)
        self.bytes_written = 0
        self.failures = 0
        self._lock = threading.Lock()
        os.makedirs(directory, exist_ok=True)

    def _report_failure(self, error):
        self.failures += 1
        if self.failures == 1:
            print(f"attnres_check.capture: capturing stopped for this call ({type(error).__name__}: {error}); "
                  "the call itself was not affected", file=sys.stderr)

    def _count(self, key):
        entry = self.seen[key]
        entry[0] += 1
        if entry[0] & (entry[0] - 1) == 0:  # a power of two: refresh the count on disk
            self._write_case(key, entry)

    def before(self, target, binding, args, kwargs):
        """The call's key and bound arguments (None: not captured), saving tensors of a new one."""
        try:
            raw = _raw_signature(args, kwargs)
            with self._lock:
                key = self.keys.get(raw)
                if key is not None:
                    self._count(key)
                    return None
            # The same call made another way (by keyword, say) is the same case.
            bound = _bound(binding, args, kwargs)
            signature = call_signature(bound, _capability(bound["prefix"]))
            key = _key(signature)
            with self._lock:
                if key in self.seen:
                    self.keys[raw] = key
                    self._count(key)
                    return None
                if len(self.seen) >= self.max_files:
                    return None
                self.keys[raw] = key
                first_seen = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                self.seen[key] = [1, first_seen, None, signature, target]
            if self.tensors:
                self._save_tensors(key, bound, case_for(signature, key, target, 1, first_seen))
            return key
        except Exception as error:  # noqa: BLE001 (a capture failure must not reach the caller)
            self._report_failure(error)
            return None

    def after(self, key, rejection):
        if key is None:
            return
        try:
            with self._lock:
                entry = self.seen[key]
                entry[2] = rejection
                self._write_case(key, entry)
        except Exception as error:  # noqa: BLE001
            self._report_failure(error)

    def _write_case(self, key, entry):
        count, first_seen, rejection, signature, target = entry
        case = case_for(signature, key, target, count, first_seen, rejection)
        _write_atomically(os.path.join(self.directory, f"attnres-{key}.json"), (json.dumps(case, indent=2) + "\n").encode())

    def _save_tensors(self, key, bound, case):
        data = safetensors_of(bound, case)
        with self._lock:
            if self.bytes_written + len(data) > self.max_bytes:
                return
            self.bytes_written += len(data)
        _write_atomically(os.path.join(self.directory, f"attnres-{key}.inputs.safetensors"), data)

    def flush(self):
        """Every case file with its final count (also run at exit)."""
        with self._lock:
            for key, entry in self.seen.items():
                try:
                    self._write_case(key, entry)
                except Exception as error:  # noqa: BLE001
                    self._report_failure(error)


def wrap(function, directory=None, signature="auto", target=None, capture=None, arguments=()):
    """`function` with every call captured into `directory` (or an existing Capture). `signature`
    and `arguments` ((contract, parameter) pairs) bind its parameters as the tool's --signature and
    --arg do; a function they cannot bind raises attnres_check.binding.BindingError here."""
    kind, named = parse_signature(signature)
    binding = Binding(function, kind, named + list(arguments))
    capture = capture or _capture_for(directory)
    target = target or f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', '?')}"

    @functools.wraps(function)
    def captured(*args, **kwargs):
        key = capture.before(target, binding, args, kwargs)
        try:
            result = function(*args, **kwargs)
        except BaseException as error:
            capture.after(key, str(error))
            raise
        capture.after(key, None)
        return result

    captured.attnres_capture = capture
    return captured


_captures = {}


def _capture_for(directory):
    directory = os.path.abspath(directory or os.environ["ATTNRES_CAPTURE_DIR"])
    if not _captures:
        atexit.register(lambda: [capture.flush() for capture in _captures.values()])
    if directory not in _captures:
        _captures[directory] = Capture(directory)
    return _captures[directory]


def install(module_name, function_name, directory=None, signature="auto"):
    """Replaces module.function by its captured wrapper (once); returns the wrapper."""
    module = importlib.import_module(module_name)
    function = getattr(module, function_name)
    if hasattr(function, "attnres_capture"):
        return function
    wrapped = wrap(function, directory, signature, f"{module_name}:{function_name}")
    setattr(module, function_name, wrapped)
    return wrapped


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Wraps a target function right after its module is first imported."""

    def __init__(self, targets):
        self.targets = targets  # module name -> [(function, signature)]

    def find_spec(self, name, path, target=None):
        if name not in self.targets:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        execute, finder = spec.loader.exec_module, self

        def exec_module(module):
            execute(module)
            for function, signature in finder.targets.get(name, ()):
                try:
                    install(name, function, None, signature)
                except Exception as error:  # noqa: BLE001
                    print(f"attnres_check.capture: cannot wrap {name}:{function}: {error}", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


def _install_from_environment():
    if not os.environ.get("ATTNRES_CAPTURE_DIR"):
        return
    targets = {}
    for entry in os.environ.get("ATTNRES_CAPTURE_TARGETS", DEFAULT_TARGETS).split(","):
        module, function, *rest = entry.strip().split(":")
        targets.setdefault(module, []).append((function, ":".join(rest) or "auto"))
    for module in [m for m in targets if m in sys.modules]:
        for function, signature in targets.pop(module):
            try:
                install(module, function, None, signature)
            except Exception as error:  # noqa: BLE001 (capturing must never stop the engine)
                print(f"attnres_check.capture: cannot wrap {module}:{function}: {error}", file=sys.stderr)
    if targets:
        sys.meta_path.insert(0, _InstallOnImport(targets))


_install_from_environment()
