#!/usr/bin/env python3
"""Writes the bundled case files under cases/ (run from the repository root).

public.json   the public suite's shapes: T in 1,3,17,320 x num_blocks 0..8, cycling through
              every combination of delta / output norm / block write (inside and outside the
              sources), H=7168, max_blocks=8, dense rows, dispatcher's choice of kernel.
portable-padded.json   row padding 7 on prefix, delta, output and blocks, portable kernel.
guard.json    the seed repro (T=320, H=7168, 4 blocks, prefix stride 7175) and its siblings:
              the native kernel must refuse each with the exact message.
fallback.json shapes the native kernel does not take: the dispatcher must fall back.
large/        one T=4096, 8-block case (judged by the cuBLAS reference on a GPU).
vllm/         one case per test id of vLLM's tests/models/kimi_k3/test_attn_res.py (docs/cases.md).
flashinfer/   FlashInfer's Kimi-K3 AttnRes device grid, semantic variants and row-padded case.
empty.json    T=0: an empty serving batch.
depth.json    realistic values: block RMS growing with depth, zero slots, large logits.
layouts.json  PyTorch views: storage offsets (x[1:], x[:, 1:]), block-major blocks, misaligned weights.
ring.json     the native ring's shared-memory layouts with the ring wrapping (sized for 132 SMs):
              two rows per reduction on both copy paths, a lone last row, blocks held in registers.
"""
import json
import os

H = 7168


def case(name, description, T, num_blocks, max_blocks=8, H=H, has_delta=True, has_output_norm=True,
         block_write_idx=-1, seed=0, tensors=None, kernel="auto", eps=None, output_norm_eps=None):
    c = {"schema_version": 1, "name": name, "description": description, "T": T, "H": H,
         "max_blocks": max_blocks, "num_blocks": num_blocks, "block_write_idx": block_write_idx,
         "has_delta": has_delta, "has_output_norm": has_output_norm, "seed": seed, "kernel": kernel}
    if eps is not None:
        c["eps"] = eps
    if output_norm_eps is not None:
        c["output_norm_eps"] = output_norm_eps
    if tensors:
        c["tensors"] = tensors
    return c


def public():
    cases = []
    for ti, T in enumerate([1, 3, 17, 320]):
        for nb in range(9):
            pattern = (ti * 9 + nb) % 8
            has_delta, has_norm, write = bool(pattern & 1), bool(pattern & 2), bool(pattern & 4)
            # Alternate the written block between a source (overwritten before it is read) and not.
            bwi = (nb // 2 if (nb + ti) % 2 else min(nb, 7)) if write else -1
            name = f"public-t{T}-b{nb}" + ("-delta" if has_delta else "") + ("-norm" if has_norm else "") + \
                   (f"-write{bwi}" if write else "")
            cases.append(case(name, f"Public suite shape T={T}, num_blocks={nb}.", T, nb, has_delta=has_delta,
                              has_output_norm=has_norm, block_write_idx=bwi, seed=1000 + ti * 9 + nb))
    return cases


def portable_padded():
    pad = {"row_padding": 7}
    cases = []
    for T in [1, 3, 17, 320]:
        for nb in [1, 4, 8]:
            cases.append(case(f"portable-padded-t{T}-b{nb}", "Row padding 7 on every [T, H] tensor and on block rows; "
                              "the portable kernel honours the strides.", T, nb, block_write_idx=nb - 1, seed=2000 + T + nb,
                              kernel="portable", tensors={"prefix": pad, "delta": pad, "output": pad, "blocks": pad}))
    return cases


def guard():
    # No expect: the native kernel declares that it must refuse rows that are not densely packed
    # (kernels/preconditions.h), and that declaration gives each verdict and message.
    return [
        case("seed-repro-prefix-stride-7175",
             "The original bug: prefix rows 7175 apart. Unguarded, the native kernel reads and writes them 7168 apart and "
             "silently corrupts the output; guarded, it must refuse before launching.",
             320, 4, seed=7, kernel="native", tensors={"prefix": {"row_stride": 7175}}),
        case("guard-delta-stride", "Padded delta rows must be refused by the native kernel.", 17, 2, seed=8,
             kernel="native", tensors={"delta": {"row_padding": 64}}),
        case("guard-output-stride", "Padded output rows must be refused by the native kernel.", 3, 8, seed=9,
             kernel="native", tensors={"output": {"row_padding": 8}}),
        case("guard-no-delta-prefix-stride", "Without delta the message prints its stride as none.", 1, 1, seed=10,
             has_delta=False, kernel="native", tensors={"prefix": {"row_padding": 1}}),
        case("guard-padded-blocks-ok", "Padded block rows are not the native kernel's concern (it honours blocks' "
             "strides); 8-element padding keeps its bulk copies aligned.", 17, 4, seed=11, kernel="auto",
             tensors={"blocks": {"row_padding": 8}}),
    ]


def fallback():
    return [
        case("fallback-h1000", "H=1000 is no multiple of 512: the dispatcher sends it to the portable kernel.", 17, 3,
             H=1000, seed=20),
        case("fallback-h8192", "H=8192 exceeds the native kernel's 7680.", 3, 2, H=8192, seed=21),
        case("fallback-12-blocks", "num_blocks=12 exceeds the native kernel's 8.", 3, 12, max_blocks=16, seed=22),
        case("fallback-odd-blocks-padding", "Block rows padded by 3 elements break the bulk copies' 16-byte alignment.",
             3, 2, seed=23, tensors={"blocks": {"row_padding": 3}}),
        case("native-h4096", "H=4096, another multiple of 512 the native kernel takes.", 17, 8, H=4096, seed=24),
    ]


def large():
    return [case("large-t4096-b8", "T=4096, 8 blocks: a bandwidth-sized case, judged by the cuBLAS reference on a GPU.",
                 4096, 8, block_write_idx=7, seed=30)]


# vLLM's tests/models/kimi_k3/test_attn_res.py: eps 1e-5, MAX_BLOCKS 8, H 7168, torch.randn
# activations, norm weights 1 + 0.1 N, qk N / sqrt(H), and a written block is always block
# num_blocks (the next slot, never a source).
VLLM_EPS = 1e-5
VLLM_WEIGHTS = {"norm_weight": {"dist": {"kind": "normal", "mean": 1, "std": 0.1}},
                "qk_weight": {"dist": {"kind": "normal", "std": 1, "divide_by_sqrt_hidden": True}},
                "output_norm_weight": {"dist": {"kind": "normal", "mean": 1, "std": 0.1}}}
UNIT = {"dist": {"kind": "constant", "value": 1}}


def vllm():
    cases = []
    # test_attn_res: (id, T, num_blocks, row_padding, write_block, has_delta)
    for i, (test_id, T, nb, pad, write, has_delta) in enumerate([
            ("triton-empty", 1, 0, 0, True, False), ("triton-empty-add", 1, 0, 0, True, True),
            ("triton-write", 17, 5, 7, True, False), ("triton-write-add", 17, 5, 7, True, True),
            ("triton-full", 3, 8, 0, False, False), ("triton-full-add", 3, 8, 0, False, True),
            ("nvidia-single-token", 1, 4, 0, False, True), ("nvidia-1", 320, 1, 0, False, True),
            ("nvidia-4", 320, 4, 0, False, True), ("nvidia-8", 320, 8, 0, False, True)]):
        tensors = dict(VLLM_WEIGHTS)
        if pad:
            tensors.update({"prefix": {"row_padding": pad}, "blocks": {"row_padding": pad}})
            if has_delta:
                tensors["delta"] = {"row_padding": pad}
        cases.append(case(f"vllm-attn_res-{test_id}", f"vLLM test_attn_res[{test_id}]: T={T}, num_blocks={nb}, row padding "
                          f"{pad} on prefix/delta/blocks, {'writes block num_blocks' if write else 'no block write'}, "
                          f"{'with' if has_delta else 'without'} delta.", T, nb, has_delta=has_delta,
                          block_write_idx=nb if write else -1, seed=3000 + i, tensors=tensors, eps=VLLM_EPS,
                          output_norm_eps=VLLM_EPS))
    for nb in range(9):
        cases.append(case(f"vllm-attn_res_block_counts-{nb}", f"vLLM test_attn_res_block_counts[{nb}]: T=1, unit norm "
                          "weights, no delta, no block write.", 1, nb, has_delta=False, seed=3100 + nb,
                          tensors={"norm_weight": UNIT, "qk_weight": VLLM_WEIGHTS["qk_weight"], "output_norm_weight": UNIT},
                          eps=VLLM_EPS, output_norm_eps=VLLM_EPS))
    cases.append(case("vllm-attn_res_without_output_norm", "vLLM test_attn_res_without_output_norm: T=7, 8 blocks, delta, "
                      "norm_weight N(0, 1), no output norm (output_norm_eps 0).", 7, 8, has_output_norm=False, seed=3200,
                      tensors={"norm_weight": {"dist": {"kind": "normal"}}, "qk_weight": VLLM_WEIGHTS["qk_weight"]},
                      eps=VLLM_EPS, output_norm_eps=0.0))
    for i, (nb, has_delta, has_norm, write) in enumerate([(0, False, True, True), (4, True, True, True),
                                                          (4, False, True, False), (8, True, False, False)]):
        tensors = {"norm_weight": UNIT, "qk_weight": VLLM_WEIGHTS["qk_weight"]}
        if has_norm:
            tensors["output_norm_weight"] = UNIT
        if has_delta:
            tensors["delta"] = {"dist": {"kind": "constant", "value": 0}}
        variant = f"{nb}-{'delta' if has_delta else 'nodelta'}-{'norm' if has_norm else 'nonorm'}-{'write' if write else 'nowrite'}"
        cases.append(case(f"vllm-sm100_variants-{variant}", f"vLLM test_sm100_variants_do_not_fall_back_to_triton"
                          f"[{nb}-{has_delta}-{has_norm}-{write}]: T=1, zero delta, unit weights.", 1, nb,
                          has_delta=has_delta, has_output_norm=has_norm, block_write_idx=nb if write else -1,
                          seed=3300 + i, tensors=tensors, eps=VLLM_EPS, output_norm_eps=VLLM_EPS))
    return cases


# FlashInfer's Kimi-K3 AttnRes tests: M tokens, K blocks of 8, H 7168, eps 1e-5; prefix and blocks
# uniform in [-1, 1], delta uniform in [-1/64, 1/64], norm weights N(1, 0.05), qk N(0, 0.02).
FLASHINFER_TENSORS = {"prefix": {"dist": {"kind": "uniform", "low": -1, "high": 1}},
                      "delta": {"dist": {"kind": "uniform", "low": -0.015625, "high": 0.015625}},
                      "blocks": {"dist": {"kind": "uniform", "low": -1, "high": 1}},
                      "norm_weight": {"dist": {"kind": "normal", "mean": 1, "std": 0.05}},
                      "qk_weight": {"dist": {"kind": "normal", "std": 0.02}},
                      "output_norm_weight": {"dist": {"kind": "normal", "mean": 1, "std": 0.05}}}


def flashinfer_tensors(has_delta=True, has_output_norm=True, padding=0):
    tensors = {k: dict(v) for k, v in FLASHINFER_TENSORS.items()
               if (has_delta or k != "delta") and (has_output_norm or k != "output_norm_weight")}
    if padding:
        for k in ("prefix", "delta", "blocks"):
            if k in tensors:
                tensors[k]["row_padding"] = padding
        tensors["output"] = {"row_padding": padding}
    return tensors


def flashinfer():
    grid = [(1, 0), (1, 4), (1, 5), (1, 6), (1, 7), (1, 8), (16, 8), (64, 4), (256, 1), (256, 8), (512, 1), (1024, 4),
            (4096, 5), (16384, 8)]
    cases = [case(f"flashinfer-grid-m{M}-k{K}", f"FlashInfer's device grid: M={M}, K={K}, delta, output norm, no block write.",
                  M, K, seed=4000 + i, tensors=flashinfer_tensors(), eps=VLLM_EPS, output_norm_eps=VLLM_EPS)
             for i, (M, K) in enumerate(grid)]
    for i, (M, K, has_delta, write, has_norm) in enumerate([(1, 0, False, 0, True), (17, 4, True, 4, True),
                                                            (3, 7, True, 7, True), (17, 4, False, -1, True),
                                                            (7, 8, True, -1, False)]):
        name = f"flashinfer-semantic-m{M}-k{K}-{'delta' if has_delta else 'nodelta'}-write{write}-{'norm' if has_norm else 'nonorm'}"
        cases.append(case(name, f"FlashInfer's semantic variant M={M}, K={K}, delta {has_delta}, block_write_idx {write}, "
                          f"output norm {has_norm}.", M, K, has_delta=has_delta, has_output_norm=has_norm,
                          block_write_idx=write, seed=4100 + i, tensors=flashinfer_tensors(has_delta, has_norm),
                          eps=VLLM_EPS, output_norm_eps=VLLM_EPS))
    # FlashInfer's API takes every row stride; of the built-in kernels only the portable one does
    # (the native one refuses padded rows, as vLLM's op does), so the case names it.
    cases.append(case("flashinfer-row-padded-64", "FlashInfer's row-padded case: M=17, K=4, every row stride (prefix, "
                      "delta, blocks, out) padded by 64 elements, block 4 written. Built in, the portable kernel runs it; "
                      "--kernel runs it on yours.", 17, 4, block_write_idx=4, seed=4200, kernel="portable",
                      tensors=flashinfer_tensors(padding=64), eps=VLLM_EPS, output_norm_eps=VLLM_EPS))
    return cases


# Residual streams grow with depth: later blocks have larger RMS than earlier ones, and a slot of
# the residual bank that no layer has written yet holds zeros. Cases whose sources differ in RMS
# catch a kernel that drops the key RMS-norm; zeros catch one that drops eps; large logits catch a
# softmax that skips the max subtraction.
DEPTH_SCALES = [1, 1.5, 2, 3, 4, 6, 8, 12]


def depth():
    cases = []
    for i, (T, nb, write) in enumerate([(1, 8, -1), (17, 5, 5), (320, 8, -1), (64, 3, 3)]):
        cases.append(case(f"depth-t{T}-b{nb}", f"Blocks whose RMS grows with depth (scales {DEPTH_SCALES[:nb]}), p the "
                          "largest: the keys' RMS-norm decides the softmax.", T, nb, block_write_idx=write, seed=5000 + i,
                          tensors={"blocks": {"dist": {"kind": "normal", "block_scales": DEPTH_SCALES}},
                                   "prefix": {"dist": {"kind": "normal", "std": 16}}},
                          eps=VLLM_EPS, output_norm_eps=VLLM_EPS))
    cases.append(case("zero-slots-t17-b4", "Blocks 0 and 2 hold zeros (residual-bank slots not written yet): "
                      "rsqrt(mean(v^2) + eps) is finite only because of eps.", 17, 4, block_write_idx=4, seed=5100,
                      tensors={"blocks": {"dist": {"kind": "normal", "block_scales": [0, 1, 0, 2]}}},
                      eps=VLLM_EPS, output_norm_eps=VLLM_EPS))
    cases.append(case("large-logits-t17-b6", "Activations with mean 1 and qk weights with mean 0.05 give logits near "
                      "H x 0.05 (about 300): exp overflows float unless the softmax subtracts the max.", 17, 6, seed=5200,
                      tensors={"prefix": {"dist": {"kind": "normal", "mean": 1, "std": 1}},
                               "blocks": {"dist": {"kind": "normal", "mean": 1, "std": 1, "block_scales": [1, 2, 0.5, 1, 3, 1]}},
                               "qk_weight": {"dist": {"kind": "normal", "mean": 0.05, "std": 0.01}}},
                      eps=VLLM_EPS, output_norm_eps=VLLM_EPS))
    return cases


def empty():
    return [case("empty-batch-b4-write", "T=0, an empty serving batch: every kernel returns without launching or writing.",
                 0, 4, block_write_idx=4, seed=6000),
            case("empty-batch-b0-nodelta-nonorm", "T=0 without blocks, delta or output norm.", 0, 0, has_delta=False,
                 has_output_norm=False, seed=6001)]


def layouts():
    T, B = 32, 5
    return [
        case("view-prefix-flat-offset-1",
             "prefix = torch.empty(T*H + 1)[1:].view(T, H): dense rows, base 2 bytes past an aligned address. The native "
             "kernel's bulk copies need 16-byte aligned operands: the dispatcher falls back.",
             T, 4, max_blocks=B, block_write_idx=4, seed=40, tensors={"prefix": {"storage_offset": 1}}),
        case("view-prefix-column-slice",
             "prefix = base[:, 8:] of base [T, H+8]: rows H+8 apart, 16 bytes into the storage; the layout guard must "
             "refuse it. (base[:, 1:] would also be misaligned: the dispatcher falls back to the portable kernel.)",
             T, 4, max_blocks=B, block_write_idx=4, seed=41,
             tensors={"prefix": {"stride": [H + 8, 1], "storage_offset": 8}}),
        case("view-blocks-block-major",
             "blocks stored block-major [MAXB, T, H] and passed transposed as [T, MAXB, H]: strides [H, T*H, 1].",
             T, 4, max_blocks=B, block_write_idx=4, seed=42, tensors={"blocks": {"stride": [H, T * H, 1]}}),
        case("view-blocks-block-major-padded-offset",
             "Block-major blocks with rows padded by 8, 8 more elements between blocks, and a storage offset of 8.",
             T, 3, max_blocks=B, block_write_idx=3, seed=43,
             tensors={"blocks": {"stride": [H + 8, T * (H + 8) + 8, 1], "storage_offset": 8}}),
        case("view-weights-misaligned",
             "norm_weight, qk_weight and output_norm_weight sliced from larger buffers at odd offsets.", T, 4,
             max_blocks=B, block_write_idx=4, seed=44,
             tensors={"norm_weight": {"storage_offset": 1}, "qk_weight": {"storage_offset": 3},
                      "output_norm_weight": {"storage_offset": 5}}),
        case("view-output-aligned-offset", "The output a view 64 elements into its storage (aligned): the native kernel's.",
             T, 4, max_blocks=B, block_write_idx=4, seed=45, tensors={"output": {"storage_offset": 64}}),
        case("view-everything-portable",
             "Every operand a view at an odd storage offset, padded rows, block-major blocks: the portable kernel.",
             T, 5, max_blocks=B, seed=46, kernel="portable",
             tensors={"prefix": {"stride": [H + 3, 1], "storage_offset": 1},
                      "delta": {"stride": [H + 5, 1], "storage_offset": 7},
                      "blocks": {"stride": [H + 1, T * (H + 1) + 3, 1], "storage_offset": 9},
                      "norm_weight": {"storage_offset": 11}, "qk_weight": {"storage_offset": 13},
                      "output_norm_weight": {"storage_offset": 15},
                      "output": {"stride": [H + 7, 1], "storage_offset": 17}}),
    ]


# Rows per CTA on the H200's 132 SMs: T=300 gives 3, 400 gives 4 (two paired iterations), 600 gives 5
# (the last row without a partner); every case loads more rows than the ring has stages, so stages
# are reused, which is what racecheck and synccheck on these cases look at (scripts/device-check).
def ring():
    shapes = [
        ("paired-bulk-h4096-t400-b3-write1", "Two rows per reduction, bulk copies; p is block 1.", 400, 3,
         dict(H=4096, block_write_idx=1)),
        ("paired-cpasync-t400-b2", "Two rows per reduction, cp.async copies.", 400, 2, {}),
        ("paired-bulk-h7680-t600-b1-lone-last",
         "Two rows per reduction, bulk copies; each CTA's fifth row alone (at H=7168 one block takes one row per CTA).",
         600, 1, dict(H=7680, block_write_idx=1, has_output_norm=False)),
        ("paired-cpasync-t400-b3-nodelta", "Two rows per reduction without delta (four loads a row), cp.async.", 400, 3,
         dict(has_delta=False, block_write_idx=3)),
        ("held-t300-b8", "One row per iteration, blocks 0-4 held in registers, 5-7 in their stages.", 300, 8, {}),
        ("held-t300-b6-write5", "Held blocks 0-4; block 5, the first one left in its stage, is p.", 300, 6,
         dict(block_write_idx=5)),
        ("held-t300-b5-write1-nodelta", "Every block held, block 1 being p; no delta.", 300, 5,
         dict(block_write_idx=1, has_delta=False)),
    ]
    bulk_fence = case(
        "ring-bulk-h7680-t394-b6-nodelta-nonorm-write6",
        "The dispatcher's bulk-copy ring at H=7680 with rows wrapping the ring (three per CTA on 132 SMs), no delta, "
        "no output norm, the block written past the sources: the shape where the producer's copies overwrote stages "
        "still being read until it fenced the async proxy.",
        394, 6, H=7680, max_blocks=9, block_write_idx=6, has_delta=False, has_output_norm=False, seed=7100)
    return [case(f"ring-{name}", description, T, nb, seed=7000 + i, **kw)
            for i, (name, description, T, nb, kw) in enumerate(shapes)] + [bulk_fence]


def write(path, cases):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(cases, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    write("cases/public.json", public())
    write("cases/portable-padded.json", portable_padded())
    write("cases/guard.json", guard())
    write("cases/fallback.json", fallback())
    write("cases/large/large.json", large())
    for c in vllm():
        write(f"cases/vllm/{c['name'][len('vllm-'):]}.json", c)
    for c in flashinfer():
        write(f"cases/flashinfer/{c['name'][len('flashinfer-'):]}.json", c)
    write("cases/depth.json", depth())
    write("cases/empty.json", empty())
    write("cases/layouts.json", layouts())
    write("cases/ring.json", ring())
