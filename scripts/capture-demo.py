#!/usr/bin/env python3
"""The capture module end to end on a GPU, as the capture issue's proof asks, plus its overhead.

A torch implementation of the contract (tests/plugins/attnres_python_test.py: attn_res_eager, which
refuses rows that are not densely packed with the op's exact message) is wrapped and called from a
loop with packed, row-padded (7175), block-write and no-delta inputs; then attnres-check runs the
captured directory, says (info) which layouts the native path refuses, and replays each captured
tensors file, whose checksums must equal those of the original inputs.

Usage: scripts/capture-demo.py ATTNRES_CHECK CAPTURE_DIR
"""
import json
import pathlib
import subprocess
import sys
import time

import numpy
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests" / "plugins")]
from attnres_check import capture as attnres_capture  # noqa: E402
import attnres_python_test  # noqa: E402

BINARY, DIRECTORY = sys.argv[1], pathlib.Path(sys.argv[2])
T, H, MAXB, NB = 320, 7168, 8, 4


def mix64sum(tensor):
    """The tool's input checksum over the logical elements (app/casefile/input_checksum.h), vectorised."""
    bits = tensor.contiguous().view(torch.int16).cpu().numpy().astype(numpy.uint64).ravel() & numpy.uint64(0xFFFF)
    index = numpy.arange(bits.size, dtype=numpy.uint64)
    with numpy.errstate(over="ignore"):
        z = ((index << numpy.uint64(16)) | bits) + numpy.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> numpy.uint64(30))) * numpy.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> numpy.uint64(27))) * numpy.uint64(0x94D049BB133111EB)
        z = z ^ (z >> numpy.uint64(31))
    return f"mix64sum:{int(z.sum(dtype=numpy.uint64)):016x}"


def inputs(kind):
    cuda = torch.device("cuda")
    padded = kind == "row-padded"
    prefix = torch.randn(T, H + 7 if padded else H, device=cuda).to(torch.bfloat16)[:, :H]
    delta = None if kind == "no-delta" else torch.randn(T, H, device=cuda).to(torch.bfloat16)
    blocks = torch.randn(T, MAXB, H, device=cuda).to(torch.bfloat16)
    weights = [(1 + 0.1 * torch.randn(H, device=cuda)).to(torch.bfloat16), (torch.randn(H, device=cuda) / H**0.5).to(
        torch.bfloat16), (1 + 0.1 * torch.randn(H, device=cuda)).to(torch.bfloat16)]
    write = NB if kind == "block-write" else -1
    return [prefix, delta, blocks, *weights, NB, write, 1e-5, 1e-5]


def main():
    capture = attnres_capture.Capture(str(DIRECTORY), tensors=True)
    kernel = attnres_capture.wrap(attnres_python_test.attn_res_eager, capture=capture, target="attnres_python_test:attn_res_eager")
    kinds = ["packed", "row-padded", "block-write", "no-delta"]
    expected = {}
    for iteration in range(10):
        for kind in kinds:
            args = inputs(kind)
            names = ["prefix", "delta", "blocks", "norm_weight", "qk_weight", "output_norm_weight"]
            if iteration == 0:  # the first call's inputs are what the capture saved
                expected[kind] = {n: mix64sum(t) for n, t in zip(names, args) if t is not None}
            try:
                kernel(*args)
            except RuntimeError as error:
                assert kind == "row-padded", error
    capture.flush()
    torch.cuda.synchronize()

    files = sorted(DIRECTORY.glob("attnres-*.json"))
    print(f"{len(files)} case files from {10 * len(kinds)} calls:")
    by_kind = {}
    for path in files:
        case = json.loads(path.read_text())
        kind = ("row-padded" if case["tensors"]["prefix"]["stride"][0] == H + 7 else
                "no-delta" if not case["has_delta"] else "block-write" if case["block_write_idx"] >= 0 else "packed")
        by_kind[kind] = path
        print(f"  {path.name}: {kind}, prefix stride {case['tensors']['prefix']['stride']}, expect {case['expect']}, "
              f"{case['description'].split('; ')[1]}")
    report = DIRECTORY.parent / "capture-run.json"
    run = subprocess.run([BINARY, "run", str(DIRECTORY), "--json", str(report)], capture_output=True, text=True)
    print(run.stdout.strip().splitlines()[-1])
    for case in json.loads(report.read_text())["cases"]:
        print(f"  {case['name']}: {case['disposition']} on {case['kernel']}" +
              (f": {case['rejection']}" if case.get("rejection") else ""))
    info = subprocess.run([BINARY, "info", str(DIRECTORY)], capture_output=True, text=True)
    print("\n".join(line for line in info.stdout.splitlines() if "captured-" in line))
    for kind, path in sorted(by_kind.items()):
        tensors = path.with_name(path.stem + ".inputs.safetensors")
        replay = DIRECTORY.parent / f"replay-{kind}.json"
        command = [BINARY, "run", str(path), "--inputs", str(tensors), "--json", str(replay)]
        subprocess.run(command, capture_output=True)
        result = json.loads(replay.read_text())["cases"][0]
        line = f"replay {kind}: {result['disposition']}"
        if not result["input_checksums"]:  # refused before any input was read: run it unguarded for them
            subprocess.run(command + ["--no-layout-guard"], capture_output=True)
            result = json.loads(replay.read_text())["cases"][0]
            line += f" (unguarded: {result['disposition']})"
        same = result["input_checksums"] == expected[kind]
        print(f"{line}, checksums {'match' if same else 'DIFFER from'} the originals")

    # Overhead per call: a function that does nothing, so that only the capture is timed.
    args = inputs("packed")
    nothing = lambda *a: None  # noqa: E731
    wrapped = attnres_capture.wrap(nothing, capture=attnres_capture.Capture(str(DIRECTORY.parent / "overhead")))
    for label, function in (("unwrapped", nothing), ("wrapped", wrapped)):
        function(*args)
        start = time.perf_counter()
        for _ in range(20000):
            function(*args)
        print(f"{label}: {(time.perf_counter() - start) / 20000 * 1e6:.2f} us per call")


if __name__ == "__main__":
    main()
