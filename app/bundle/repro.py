#!/usr/bin/env python3
"""Standalone repro of an attnres-check bundle (written by `attnres-check repro`).

Loads inputs.safetensors, rebuilds the exact strided views with torch.as_strided, computes the
AttnRes contract in float64 with PyTorch, and compares it with the kernel output captured in
outputs.safetensors. On a GPU it also calls, with the same strided views, every entry point it
can import: vLLM's torch.ops._C.kimi_k3_attn_res, vLLM's Python dispatch
vllm.models.kimi_k3.nvidia.ops.attn_res:attn_res, FlashInfer's
flashinfer.kimi_k3_attn_res:kimi_k3_attn_res, the kernel the bundle was made with (a torch op or
Python function, on the CPU where the bundle was made on the CPU backend), and any --call SPEC,
each in a process of its own: a kernel that crashes or breaks the CUDA context costs only its line.
Needs: torch (the safetensors files are read without the safetensors package).
"""
import argparse
import faulthandler
import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # nothing written into the bundle: `repro --force` empties only its own files
import attnres_binding  # noqa: E402  (beside this file in the bundle: how Python entry points are called)

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
          "I16": torch.int16, "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "I8": torch.int8}


def load(name):
    """The tensors and __metadata__ of a safetensors file: an 8-byte little-endian header size, a
    JSON header ({name: {dtype, shape, data_offsets}}), then the little-endian data."""
    if sys.byteorder != "little":
        sys.exit("repro.py reads safetensors data as little-endian; this host is big-endian")
    with open(os.path.join(HERE, name), "rb") as f:
        data = f.read()
    header_size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + header_size])
    metadata = header.pop("__metadata__", None) or {}
    body = memoryview(data)[8 + header_size:]
    tensors = {}
    for key, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[key] = flat.reshape(entry["shape"])
    return tensors, metadata


def layout(metadata, name):
    """(shape, stride, storage offset) of `name`'s logical tensor over its stored storage."""
    return (json.loads(metadata[name + ".shape"]), json.loads(metadata[name + ".stride"]),
            int(metadata.get(name + ".storage_offset", "0")))


def view(tensors, metadata, name):
    """The logical tensor over its stored storage, padding and all."""
    if name not in tensors:
        return None
    return torch.as_strided(tensors[name], *layout(metadata, name))


def bits(t):
    """A bf16 tensor's bits, on the CPU, for bit-exact comparisons (-0.0 and NaN payloads count)."""
    return t.cpu().view(torch.int16)


def changed_outside_view(before, after, metadata, name):
    """How many elements of `name`'s storage outside its logical view (row padding, the room
    before a storage offset) differ between `before` and `after`: a kernel must not write there."""
    covered = torch.zeros(before.numel(), dtype=torch.bool)
    torch.as_strided(covered, *layout(metadata, name)).fill_(True)
    changed = bits(before.reshape(-1)) != bits(after.reshape(-1))
    return int((changed & ~covered).sum())


def reference(case, prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight):
    """The contract: p = bf16(prefix + delta) (a float32 sum rounded once), block write,
    softmax over sources of RMS-normalised logits, weighted mix, output RMSNorm."""
    p = (prefix.float() + delta.float()).to(torch.bfloat16) if delta is not None else prefix.clone()
    blocks = blocks.clone()
    if case["block_write_idx"] >= 0:
        blocks[:, case["block_write_idx"]] = p
    sources = torch.cat([blocks[:, : case["num_blocks"]], p.unsqueeze(1)], dim=1).double()  # [T, S, H]
    gate = norm_weight.double() * qk_weight.double()
    logits = (sources * gate).sum(-1) * torch.rsqrt(sources.pow(2).mean(-1) + case["eps"])
    weights = torch.softmax(logits, dim=1)
    mixed = (weights.unsqueeze(-1) * sources).sum(1)
    if output_norm_weight is not None:
        mixed = mixed * torch.rsqrt(mixed.pow(2).mean(-1, keepdim=True) + case["output_norm_eps"])
        mixed = mixed * output_norm_weight.double()
    return p, blocks, mixed


def judge(label, out, ref, atol, rtol):
    if out.numel() == 0:
        print(f"{label}: no elements to compare (T = 0, an empty batch)")
        return True
    out = out.double().cpu()
    diff = (out - ref).abs()
    bad = ~(diff <= atol + rtol * ref.abs())
    worst = int(torch.nan_to_num(diff, nan=float("inf")).argmax())
    index = (worst // ref.shape[1], worst % ref.shape[1])
    print(f"{label}: max-abs error {float(diff.nan_to_num(nan=float('inf')).max()):.6g} at {list(index)} "
          f"(got {float(out[index]):.6g}, reference {float(ref[index]):.6g}); "
          f"Mismatched elements: {int(bad.sum())} / {bad.numel()} ({100.0 * float(bad.sum()) / bad.numel():.1f}%); "
          f"NaN {int(out.isnan().sum())}, Inf {int(out.isinf().sum())}")
    return int(bad.sum()) == 0


# The entry points users ship, by the names in the public vLLM and FlashInfer sources, and how
# each is called: vLLM's torch op (by its schema's argument names: no optional delta or output
# norm, no block write, the caller's output), vLLM's Python dispatch (returns the output),
# FlashInfer's API (keyword scalars, out=).
ENTRY_POINTS = [
    ("torch-op:_C::kimi_k3_attn_res", "torch-op"),
    ("python:vllm.models.kimi_k3.nvidia.ops.attn_res:attn_res", "vllm"),
    ("python:flashinfer.kimi_k3_attn_res:kimi_k3_attn_res", "flashinfer"),
]


def split_spec(spec):
    """("torch-op", NAMESPACE, OP) or ("python", MODULE, FUNCTION); empty parts where spec lacks them."""
    if spec.startswith("torch-op:"):
        namespace, _, op = spec[len("torch-op:"):].partition("::")
        return "torch-op", namespace, op
    module, _, function = spec[len("python:"):].rpartition(":") if spec.startswith("python:") else ("", "", "")
    return "python", module, function


def resolve(spec, library=""):
    """(callable, None) for a torch-op:NS::OP or python:MODULE:FUNCTION spec, or (None, why not).
    `library` (the bundle's --torch-library) is loaded first where given."""
    kind, scope, name = split_spec(spec)
    if kind == "python":
        try:
            return getattr(importlib.import_module(scope), name), None
        except Exception as error:  # ImportError, AttributeError, or whatever the module's import raises
            return None, f"{type(error).__name__}: {error}"
    if library:
        try:
            torch.ops.load_library(library)
        except Exception as error:  # a library's own initialisation may raise anything
            return None, f"{library} does not load: {type(error).__name__}: {error}"
    elif scope == "_C":
        try:
            importlib.import_module("vllm._C")  # registers vLLM's ops
        except Exception as error:  # ImportError, or whatever vLLM's import raises
            return None, f"vllm._C is not importable: {type(error).__name__}: {error}"
    op, _, overload = name.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, scope), op), overload or "default"), None
    except (AttributeError, RuntimeError) as error:
        return None, f"not registered: {error}"


def absent(spec, library=""):
    """Why `spec` cannot be resolved here, where that shows without importing or loading it (its
    top-level package or its library is not there), or None."""
    kind, scope, name = split_spec(spec)
    if not scope or not name:
        return "expected torch-op:NAMESPACE::OP" if kind == "torch-op" else "expected python:MODULE:FUNCTION"
    if kind == "torch-op":
        if library:
            return None if os.path.exists(library) else f"{library} does not exist"
        package = "vllm" if scope == "_C" else None
    else:
        package = scope.partition(".")[0]
    if package and importlib.util.find_spec(package) is None:
        return f"ModuleNotFoundError: No module named '{package}'"
    return None


class CannotExpress(Exception):
    """The entry point's signature cannot take this case (the tool reports it skipped)."""


def call_torch_op(overload, values):
    """Calls a torch op with the contract's values matched to its schema's argument names, as the
    tool's bridge does (vLLM's schema: prefix, delta, blocks, ..., output, num_blocks, eps, ...);
    returns the output it wrote into values["output"] or returned. Raises CannotExpress where the
    schema cannot take this case."""
    output = values["output"]
    schema = overload._schema
    arguments = {}
    for argument in schema.arguments:
        if argument.name in values:
            value = values[argument.name]
            if value is None and argument.type.kind() != "OptionalType":
                raise CannotExpress(f"the op's {argument.name} is {argument.type}, and this case has none")
            arguments[argument.name] = value
        elif not argument.has_default_value():
            raise CannotExpress(f"the op's argument {argument.name} is not part of the AttnRes contract")
    if values["block_write_idx"] >= 0 and "block_write_idx" not in arguments:
        raise CannotExpress("this case writes a block, and the op has no block_write_idx")
    writes_output = "output" in arguments or "out" in arguments
    if not writes_output and output.stride(0) != output.shape[1]:
        raise CannotExpress("this case has a padded output, and the op returns a fresh one")
    result = overload(**arguments)
    return output if writes_output else result


def call(function, style, case, t, output_stride):
    """Calls `function` on the tensors `t` (modified in place) and returns the output: a torch op
    by its schema, a Python function as the signature text `style` binds it (attnres_binding)."""
    tokens, hidden = t["prefix"].shape
    out = torch.empty_strided((tokens, hidden), (output_stride, 1), dtype=torch.bfloat16, device=t["prefix"].device)
    values = dict(t, output=out, num_blocks=case["num_blocks"], block_write_idx=case["block_write_idx"],
                  eps=case["eps"], output_norm_eps=case["output_norm_eps"])
    if style == "torch-op":
        return call_torch_op(function, dict(values, out=out))
    binding = attnres_binding.bind(function, style)
    why = binding.cannot_express(values)
    if why:
        raise CannotExpress(why)
    result = binding.call(values)
    return out if binding.writes_output else result


NAMES = ["prefix", "delta", "blocks", "norm_weight", "qk_weight", "output_norm_weight"]


def load_case():
    """The case, its stored inputs (each input's whole storage) and their metadata."""
    with open(os.path.join(HERE, "case.json")) as f:
        case = json.load(f)
    inputs, meta = load("inputs.safetensors")
    return case, inputs, meta


def logical_views(inputs, meta):
    """Every input's logical tensor (None for an absent one), as reference() takes them."""
    return {n: view(inputs, meta, n) for n in NAMES}


def call_entry(spec, style, device, library):
    """Calls one entry point on the case's inputs and judges what it did: 0, or 1 where its output
    or its writes break the contract. Runs in a process of its own (main passes --entry), so that
    a kernel that kills the process or leaves the CUDA context broken costs only its own line."""
    style = "torch-op" if split_spec(spec)[0] == "torch-op" else style
    function, why_not = resolve(spec, library)
    if function is None:
        print(f"{spec}: skipped ({why_not})")
        return 0
    case, stored, meta = load_case()
    output_stride = json.loads(meta["output.stride"])[0] if "output.stride" in meta else layout(meta, "prefix")[0][1]
    # Copies the kernel runs on (.to() alone would hand it the stored tensors on the CPU).
    flats = {n: t.to(device, copy=True) for n, t in stored.items()}
    placed = logical_views(flats, meta)
    try:
        out = call(function, style, case, placed, output_stride)
        if device == "cuda":
            torch.cuda.synchronize()
    except attnres_binding.BindingError as why:
        print(f"{spec}: its parameters cannot be bound: {why}")
        return 2
    except CannotExpress as why:
        print(f"{spec}: skipped ({why})")
        return 0
    except Exception as error:  # a rejection, or a kernel's error, is the result to show
        print(f"{spec} raised {type(error).__name__}: {error}")
        return 0
    # The reference only where there is an output to judge: a skipped or refusing entry costs none.
    p, blocks_after, ref = reference(case, **logical_views(stored, meta))
    ok = judge(f"{spec} vs PyTorch float64", out, ref, case["tolerance"]["atol"], case["tolerance"]["rtol"])
    # The rest of the contract, as the tool checks it: p written back and the block write bit for
    # bit, the other inputs untouched, nothing written outside the views.
    prefix_exact = torch.equal(bits(placed["prefix"]), bits(p))
    blocks_exact = torch.equal(bits(placed["blocks"]), bits(blocks_after))
    read_only = [n for n in ("delta", "norm_weight", "qk_weight", "output_norm_weight") if n in stored]
    changed_inputs = [n for n in read_only if not torch.equal(bits(placed[n]), bits(view(stored, meta, n)))]
    outside = {n: changed_outside_view(stored[n], flats[n], meta, n) for n in stored}
    outside_words = ", ".join(f"{n} {count}" for n, count in outside.items() if count) or "none"
    print(f"{spec}: prefix bit-exact: {prefix_exact}; blocks bit-exact: {blocks_exact}; "
          f"inputs it changed: {', '.join(changed_inputs) or 'none'}; "
          f"elements changed outside the views: {outside_words}")
    return 0 if ok and prefix_exact and blocks_exact and not changed_inputs and outside_words == "none" else 1


def how_it_ended(returncode):
    """A child's exit status in words: negative is the signal that killed it."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"was killed by signal {-returncode} ({signal.Signals(-returncode).name})"
    except ValueError:
        return f"was killed by signal {-returncode}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--call", action="append", default=[], metavar="SPEC",
                        help="also call torch-op:NS::OP or python:MODULE:FUNCTION (with --signature)")
    parser.add_argument("--signature", choices=attnres_binding.SIGNATURES, default="auto",
                        help="how --call python:... functions are called (auto: parameters bound by name)")
    parser.add_argument("--arg", action="append", default=[], metavar="CONTRACT=PARAMETER",
                        help="with --signature auto: bind a --call function's PARAMETER to the contract's CONTRACT")
    parser.add_argument("--timeout", type=float, default=900, metavar="SECONDS",
                        help="seconds each call may take before it is killed as a hang (default 900; 0: no limit)")
    parser.add_argument("--entry", nargs=4, metavar=("SPEC", "SIGNATURE", "DEVICE", "LIBRARY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The kernels called below are native code: each line is out before the next call, and a crash
    # shows where it happened.
    sys.stdout.reconfigure(line_buffering=True)
    faulthandler.enable()
    if args.entry:
        return call_entry(*args.entry)
    case, inputs, meta = load_case()
    tensors = logical_views(inputs, meta)
    for n, t in tensors.items():
        if t is not None:
            print(f"{n}: shape {list(t.shape)} stride {list(t.stride())} {t.dtype}")
    ok = True
    if os.path.exists(os.path.join(HERE, "outputs.safetensors")):
        # The reference only where there is a captured output to judge (each entry's child makes its own).
        p, blocks_after, ref = reference(case, **tensors)
        outputs, out_meta = load("outputs.safetensors")
        ok = judge("captured kernel output vs PyTorch float64", view(outputs, out_meta, "output"), ref,
                   case["tolerance"]["atol"], case["tolerance"]["rtol"])
        prefix_exact = torch.equal(bits(view(outputs, out_meta, "prefix_after")), bits(p))
        blocks_exact = torch.equal(bits(view(outputs, out_meta, "blocks_after")), bits(blocks_after))
        print(f"prefix bit-exact: {prefix_exact}; blocks bit-exact: {blocks_exact}")
        ok = ok and prefix_exact and blocks_exact
    else:
        print("no outputs.safetensors: the kernel was rejected before launch (see REPORT.md)")
    with open(os.path.join(HERE, "environment.json")) as f:
        environment = json.load(f)
    # (spec, signature, device, torch library): the entry points users ship run on the GPU; the bundle's own
    # kernel runs where it ran when the bundle was made (the CPU backend passes it CPU tensors).
    called_with = ";".join([args.signature] + args.arg)
    entries = [(spec, style, "cuda", "") for spec, style in ENTRY_POINTS + [(spec, called_with) for spec in args.call]]
    if environment.get("kernel", "").startswith(("torch-op:", "python:")):
        device = "cpu" if environment.get("backend") == "cpu" else "cuda"
        made_with = ";".join([environment.get("signature", "auto")] + environment.get("arguments", []))
        entries.append((environment["kernel"], made_with, device, environment.get("torch_library", "")))
    for spec, style, device, library in entries:
        # This process loads no kernel's code: each is imported and called in a process of its own.
        why_not = absent(spec, library)
        if why_not:
            print(f"{spec}: skipped ({why_not})")
            continue
        if device == "cuda" and not torch.cuda.is_available():
            print(f"{spec}: no CUDA device; skipped")
            continue
        try:
            called = subprocess.run([sys.executable, os.path.abspath(__file__), "--entry", spec, style, device, library],
                                    timeout=args.timeout or None)
        except subprocess.TimeoutExpired:
            print(f"{spec}: still running after {args.timeout:g} s (--timeout); killed as a hang")
            ok = False
            continue
        if called.returncode not in (0, 1, 2):
            print(f"{spec}: the process calling it {how_it_ended(called.returncode)}; its stderr is above")
        ok = ok and called.returncode == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
