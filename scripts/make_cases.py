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
"""
import json
import os

H = 7168
MESSAGE = "Kimi K3 AttnRes requires densely packed rows; got strides {}, {}, {} for hidden_size {}"


def case(name, description, T, num_blocks, max_blocks=8, H=H, has_delta=True, has_output_norm=True,
         block_write_idx=-1, seed=0, tensors=None, kernel="auto", expect=None):
    c = {"schema_version": 1, "name": name, "description": description, "T": T, "H": H,
         "max_blocks": max_blocks, "num_blocks": num_blocks, "block_write_idx": block_write_idx,
         "has_delta": has_delta, "has_output_norm": has_output_norm, "seed": seed, "kernel": kernel}
    if tensors:
        c["tensors"] = tensors
    if expect:
        c["expect"] = expect
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
    reject = lambda p, d, o: {"verdict": "reject", "message": MESSAGE.format(p, d, o, H)}
    return [
        case("seed-repro-prefix-stride-7175",
             "The original bug: prefix rows 7175 apart. Unguarded, the native kernel reads and writes them 7168 apart and "
             "silently corrupts the output; guarded, it must refuse before launching.",
             320, 4, seed=7, kernel="native", tensors={"prefix": {"row_stride": 7175}}, expect=reject(7175, 7168, 7168)),
        case("guard-delta-stride", "Padded delta rows must be refused by the native kernel.", 17, 2, seed=8,
             kernel="native", tensors={"delta": {"row_padding": 64}}, expect=reject(7168, 7232, 7168)),
        case("guard-output-stride", "Padded output rows must be refused by the native kernel.", 3, 8, seed=9,
             kernel="native", tensors={"output": {"row_padding": 8}}, expect=reject(7168, 7168, 7176)),
        case("guard-no-delta-prefix-stride", "Without delta the message prints its stride as none.", 1, 1, seed=10,
             has_delta=False, kernel="native", tensors={"prefix": {"row_padding": 1}}, expect=reject(7169, "none", 7168)),
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
