#!/usr/bin/env python3
"""Writes a sweep of cases for a multi-GPU run (`run --devices all`) to the path given:
T in 1..16384 x num_blocks 0..8 at H=7168, with and without delta, output norm and a block write.
Too large for the CPU stand-ins; on GPUs it runs in seconds.  Usage: scripts/make_sweep.py sweep.json
"""
import json
import sys

TOKENS = [1, 2, 3, 5, 7, 17, 33, 64, 128, 320, 1024, 4096]


def main(path):
    cases = []
    for T in TOKENS:
        for num_blocks in range(9):
            for variant in range(2):
                cases.append({
                    "schema_version": 1, "name": f"sweep-t{T}-b{num_blocks}-v{variant}", "T": T, "H": 7168,
                    "max_blocks": 8, "num_blocks": num_blocks,
                    "block_write_idx": num_blocks if variant == 1 and num_blocks < 8 else -1,
                    "has_delta": variant == 0 or num_blocks % 2 == 0,
                    "has_output_norm": variant == 1 or num_blocks % 3 == 0,
                    "seed": 5000 + len(cases), "kernel": "auto"})
    for num_blocks in (0, 4, 8):
        cases.append({
            "schema_version": 1, "name": f"sweep-t16384-b{num_blocks}", "T": 16384, "H": 7168, "max_blocks": 8,
            "num_blocks": num_blocks, "block_write_idx": -1, "has_delta": True, "has_output_norm": True,
            "seed": 6000 + num_blocks, "kernel": "auto"})
    with open(path, "w") as f:
        json.dump(cases, f, indent=0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
