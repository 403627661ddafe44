"""Designs and launch configurations of the Triton test kernels (tests/plugins/attnres_python_test.py:
the row kernel, one source at a time, and the tile kernel, every block in one tile), timed as
`bench` times kernels: CUDA-graph replays of 20 launches on rotating input sets (together > 4x L2),
median per launch. H=7168, delta and output norm, no block write. attn_res_triton_peer launches
the fastest of these at each size. A measurement aid, not part of the build; on a GPU with Triton:
  PYTHONPATH=tests/plugins python3 scripts/probes/triton_peer_configs.py
"""
import statistics

import torch

import attnres_python_test as kernels

HIDDEN = 7168
# (design, warps, pipeline stages of the row kernel's source loop)
CONFIGS = [("row", 4, 2), ("row", 8, 2), ("row", 8, 3), ("tile", 8, None), ("tile", 16, None)]


def input_sets(tokens, num_blocks):
    set_bytes = tokens * HIDDEN * 2 * (num_blocks + 3)
    count = max(20, -(-4 * torch.cuda.get_device_properties(0).L2_cache_size // set_bytes))
    generator = torch.Generator(device="cuda").manual_seed(1)

    def draw(*shape):
        return (torch.randn(*shape, device="cuda", generator=generator) * 0.5).to(torch.bfloat16)

    return [dict(prefix=draw(tokens, HIDDEN), delta=draw(tokens, HIDDEN), blocks=draw(tokens, num_blocks, HIDDEN),
                 norm_weight=draw(HIDDEN) + 1, qk_weight=draw(HIDDEN) * 0.1, output_norm_weight=draw(HIDDEN) + 1,
                 out=torch.empty(tokens, HIDDEN, dtype=torch.bfloat16, device="cuda")) for _ in range(count)]


def launch(sets, i, num_blocks, design, warps, stages):
    s = sets[i % len(sets)]
    operands = (s["prefix"], s["delta"], s["blocks"], s["norm_weight"], s["qk_weight"], s["output_norm_weight"],
                num_blocks, -1, 1e-6, 1e-6, s["out"])
    if design == "row":
        kernels._launch_row_kernel(*operands, num_stages=stages, num_warps=warps)
    else:
        kernels._launch_tile_kernel(*operands, num_warps=warps)


def median_us(sets, num_blocks, design, warps, stages):
    launch(sets, 0, num_blocks, design, warps, stages)  # compiles outside the capture
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for i in range(20):
            launch(sets, i, num_blocks, design, warps, stages)
    times = []
    for _ in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / 20)
    return statistics.median(times)


def main():
    print(torch.cuda.get_device_name(0))
    for tokens in (1, 64, 320, 1024, 4096):
        for num_blocks in (1, 2, 4, 8):
            sets = input_sets(tokens, num_blocks)
            row = [f"{design} w{warps}" + (f"/s{stages}" if stages else "") +
                   f" {median_us(sets, num_blocks, design, warps, stages):.2f}" for design, warps, stages in CONFIGS]
            print(f"T={tokens} blocks={num_blocks}: " + ", ".join(row) + " us", flush=True)


if __name__ == "__main__":
    main()
