// The repro.py written into bundles: shows the case to people who do not build attnres-check.
#include "app/repro.h"

namespace attnres {

std::string repro_script() {
  return R"PY(#!/usr/bin/env python3
"""Standalone repro of an attnres-check bundle (written by `attnres-check repro`).

Loads inputs.safetensors, rebuilds the exact strided views with torch.as_strided, computes the
AttnRes contract in float64 with PyTorch, and compares it with the kernel output captured in
outputs.safetensors. With --vllm-op MODULE:FUNCTION (or when vLLM is importable and exposes one
of the known names) it also calls the vLLM op on the GPU with the same strided views.
Needs: torch, safetensors.
"""
import argparse
import importlib
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    path = os.path.join(HERE, name)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
    return load_file(path), metadata


def view(tensors, metadata, name, device="cpu"):
    """The logical tensor over its stored storage, padding and all."""
    if name not in tensors:
        return None
    flat = tensors[name].to(device)
    shape = json.loads(metadata[name + ".shape"])
    stride = json.loads(metadata[name + ".stride"])
    offset = int(metadata.get(name + ".storage_offset", "0"))
    return torch.as_strided(flat, shape, stride, offset)


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


def find_vllm_op(spec):
    names = [spec] if spec else ["vllm._custom_ops:kimi_k3_attn_res", "vllm._custom_ops:attn_res"]
    for name in names:
        module, _, function = name.partition(":")
        try:
            op = getattr(importlib.import_module(module), function, None)
        except ImportError:
            op = None
        if op is not None:
            return name, op
    return None, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-op", help="MODULE:FUNCTION of the op to call, taking "
                        "(prefix, delta, blocks, num_blocks, norm_weight, qk_weight, output_norm_weight, "
                        "eps, output_norm_eps, block_write_idx) and returning out")
    args = parser.parse_args()
    with open(os.path.join(HERE, "case.json")) as f:
        case = json.load(f)
    inputs, meta = load("inputs.safetensors")
    names = ["prefix", "delta", "blocks", "norm_weight", "qk_weight", "output_norm_weight"]
    tensors = {n: view(inputs, meta, n) for n in names}
    for n, t in tensors.items():
        if t is not None:
            print(f"{n}: shape {list(t.shape)} stride {list(t.stride())} {t.dtype}")
    p, blocks_after, ref = reference(case, **tensors)
    atol, rtol = case["tolerance"]["atol"], case["tolerance"]["rtol"]
    ok = True
    if os.path.exists(os.path.join(HERE, "outputs.safetensors")):
        outputs, out_meta = load("outputs.safetensors")
        ok = judge("captured kernel output vs PyTorch float64", view(outputs, out_meta, "output"), ref, atol, rtol)
        prefix_exact = torch.equal(view(outputs, out_meta, "prefix_after").view(torch.int16), p.view(torch.int16))
        blocks_exact = torch.equal(view(outputs, out_meta, "blocks_after").view(torch.int16), blocks_after.view(torch.int16))
        print(f"prefix bit-exact: {prefix_exact}; blocks bit-exact: {blocks_exact}")
        ok = ok and prefix_exact and blocks_exact
    else:
        print("no outputs.safetensors: the kernel was rejected before launch (see REPORT.md)")
    name, op = find_vllm_op(args.vllm_op)
    if op is None:
        print("vLLM op: not importable here; skipped")
    elif not torch.cuda.is_available():
        print(f"vLLM op {name}: no CUDA device; skipped")
    else:
        gpu = {n: view(inputs, meta, n, "cuda") for n in names}
        try:
            out = op(gpu["prefix"], gpu["delta"], gpu["blocks"], case["num_blocks"], gpu["norm_weight"], gpu["qk_weight"],
                     gpu["output_norm_weight"], case["eps"], case["output_norm_eps"], case["block_write_idx"])
            torch.cuda.synchronize()
            ok = judge(f"vLLM op {name} vs PyTorch float64", out, ref, atol, rtol) and ok
        except Exception as error:  # the op's own rejection is a result worth printing
            print(f"vLLM op {name} raised: {error}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
)PY";
}

}  // namespace attnres
