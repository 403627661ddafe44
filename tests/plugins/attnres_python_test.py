"""Test kernels for the Python bridge (`--kernel python:attnres_python_test:FUNCTION`), written
apart from the tool's own kernels.

vLLM's signature (positional, returns the output):
  attn_res_eager            torch eager, the fixed kernel: refuses rows that are not densely packed
                            with the exact message, as RuntimeError (what TORCH_CHECK raises)
  attn_res_eager_any_stride torch eager on every stride (as vLLM's dispatch, which routes padded
                            rows to its Triton kernel)
  attn_res_eager_hardcoded  torch eager with the seed bug: prefix and delta rows read H apart
  attn_res_triton           a Triton kernel, one program per row, with the same packed-row check
  attn_res_triton_any_stride  the same Triton kernel on every stride
  attn_res_wrong_dtype      returns float32: the bridge must call it a wrong result
  attn_res_import_vllm      imports vLLM's custom ops, as vLLM's dispatch does: ImportError here
  attn_res_without_op_check calls torch.ops._C.kimi_k3_attn_res without asking whether it exists,
                            as the seed's dispatch did (AttributeError on a torch without the op)
  attn_res_kills_its_process  SIGSEGV, as a native kernel that faults on the host does
  attn_res_hangs            never returns, as a kernel stuck on a barrier
  attn_res_batch_dependent  torch eager on every stride, but from 256 tokens on its softmax weights
                            are rounded to bf16 (as a large-batch path that keeps them in bf16):
                            within tolerance, and a row's bits depend on the batch
  attn_res_leaks_garbage    torch eager on every stride, times 1 + 0 * a sum over the whole batch
                            (as a batch-wide amax for a quantization scale): a NaN or Inf in any
                            row of the batch makes every row NaN
FlashInfer's signature (keyword scalars, caller-owned out=):
  attn_res_flashinfer       torch eager on every stride, the output's too (as FlashInfer's API)
  attn_res_triton_peer      a Triton kernel for bench to time the native kernel against, on every
                            stride, writing into out= (so it pays for no copy of a returned
                            output), in the design and launch configuration that timed fastest on
                            an H100 (docs/results/kernel-speed.md): with at most 4 blocks, all the
                            blocks in one [next_pow2(num_blocks), next_pow2(H)] bf16 tile read
                            before p is stored, p beside it, a one-pass softmax with exp2, 16 warps;
                            with more, the row kernel, 8 warps and 3 stages below 1024 tokens, 4
                            warps and 2 stages from 1024
  attn_res_triton_peer_pdl  the same, launched with programmatic dependent launch (its loads wait
                            for the previous kernel in the stream, its successor may start once
                            its loads are issued), as the native kernel under `bench --pdl`
Other signatures, bound by name (--signature auto):
  kimi_k3_attn_res          a third-party entry point: the contract's operands under other names
                            (prefix_sum, block_residual, projection_weight), in another order,
                            optional ones with defaults; torch eager on every stride
  kimi_k3_attn_res_hardcoded  the same signature with the seed bug
  fused_depth_mix           names no alias knows (x, stack, ...): bound only with --arg
  attn_res_without_delta    has no delta, block_write_idx or output norm: such cases are skipped
"""
import os
import signal
import time

import torch

MESSAGE = "Kimi K3 AttnRes requires densely packed rows; got strides {}, {}, {} for hidden_size {}"


def _require_packed(prefix, delta, output_stride):
    hidden = prefix.shape[1]
    delta_stride = None if delta is None else delta.stride(0)
    if prefix.stride(0) != hidden or delta_stride not in (None, hidden) or output_stride != hidden:
        raise RuntimeError(MESSAGE.format(prefix.stride(0), "none" if delta is None else delta_stride, output_stride, hidden))


def _contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
              output_norm_eps, weights_in_bf16=False):
    p = prefix.clone() if delta is None else (prefix.float() + delta.float()).to(torch.bfloat16)
    prefix.copy_(p)
    if block_write_idx >= 0:
        blocks[:, block_write_idx].copy_(p)
    sources = torch.cat([blocks[:, :num_blocks].float(), p.float().unsqueeze(1)], dim=1)
    gate = norm_weight.float() * qk_weight.float()
    logits = (sources * gate).sum(-1) * torch.rsqrt(sources.pow(2).mean(-1) + eps)
    weights = torch.softmax(logits, dim=1)
    if weights_in_bf16:
        weights = weights.to(torch.bfloat16).float()
    mixed = (weights.unsqueeze(-1) * sources).sum(1)
    if output_norm_weight is not None:
        mixed = mixed * torch.rsqrt(mixed.pow(2).mean(-1, keepdim=True) + output_norm_eps) * output_norm_weight.float()
    return mixed.to(torch.bfloat16)


def attn_res_eager(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                   output_norm_eps):
    _require_packed(prefix, delta, prefix.shape[1])
    return _contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                     output_norm_eps)


def attn_res_eager_any_stride(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                              block_write_idx, eps, output_norm_eps):
    return _contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                     output_norm_eps)


def attn_res_batch_dependent(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                             block_write_idx, eps, output_norm_eps):
    return _contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                     output_norm_eps, weights_in_bf16=prefix.shape[0] >= 256)


def attn_res_leaks_garbage(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                           block_write_idx, eps, output_norm_eps):
    batch_sum = prefix.float().abs().sum() if delta is None else (prefix.float() + delta.float()).abs().sum()
    out = _contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                    output_norm_eps)
    return (out.float() * (1 + 0 * batch_sum)).to(torch.bfloat16)


def attn_res_checks_on_host(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                            block_write_idx, eps, output_norm_eps):
    """attn_res_eager_any_stride behind a check of its weights read on the host: right on every
    call, and it cannot be captured in a CUDA graph (the read waits for the device)."""
    if not bool(torch.isfinite(norm_weight).all()):
        raise ValueError("norm_weight holds NaN or Inf")
    return _contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                     output_norm_eps)


def attn_res_keeps_residual_out_of_graphs(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight,
                                          num_blocks, block_write_idx, eps, output_norm_eps):
    """attn_res_eager_any_stride, but while a CUDA graph is being captured it works on copies of
    prefix and blocks (a host-side branch on capture): its output is right on every replay, and a
    replay never writes p back into prefix or the block written."""
    if torch.cuda.is_current_stream_capturing():
        prefix, blocks = prefix.clone(), blocks.clone()
    return _contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                     output_norm_eps)


def attn_res_eager_hardcoded(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                             block_write_idx, eps, output_norm_eps):
    tokens, hidden = prefix.shape

    def dense(t):
        return None if t is None else t.as_strided((tokens, hidden), (hidden, 1))

    return _contract(dense(prefix), dense(delta), blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                     block_write_idx, eps, output_norm_eps)


def attn_res_flashinfer(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, *, num_blocks,
                        block_write_idx, eps, output_norm_eps, out):
    out.copy_(_contract(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx,
                        eps, output_norm_eps))


def kimi_k3_attn_res(prefix_sum, block_residual, norm_weight, projection_weight, eps, output_norm_weight=None,
                     output_norm_eps=None, delta=None, num_blocks=None, block_write_idx=-1):
    num_blocks = block_residual.shape[1] if num_blocks is None else num_blocks
    return _contract(prefix_sum, delta, block_residual, norm_weight, projection_weight, output_norm_weight, num_blocks,
                     block_write_idx, eps, output_norm_eps)


def kimi_k3_attn_res_hardcoded(prefix_sum, block_residual, norm_weight, projection_weight, eps,
                               output_norm_weight=None, output_norm_eps=None, delta=None, num_blocks=None,
                               block_write_idx=-1):
    return attn_res_eager_hardcoded(prefix_sum, delta, block_residual, norm_weight, projection_weight,
                                    output_norm_weight, block_residual.shape[1] if num_blocks is None else num_blocks,
                                    block_write_idx, eps, output_norm_eps)


def fused_depth_mix(x, stack, gamma, w, epsilon, /, dx=None, *, n_used, slot=-1, gamma_out=None, epsilon_out=1e-6,
                    y):
    y.copy_(_contract(x, dx, stack, gamma, w, gamma_out, n_used, slot, epsilon, epsilon_out))


def attn_res_without_delta(prefix, blocks, norm_weight, qk_weight, num_blocks, eps):
    return _contract(prefix, None, blocks, norm_weight, qk_weight, None, num_blocks, -1, eps, 0.0)


def attn_res_wrong_dtype(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                         block_write_idx, eps, output_norm_eps):
    return attn_res_eager(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                          block_write_idx, eps, output_norm_eps).float()


def attn_res_import_vllm(*args):
    from vllm import _custom_ops  # noqa: F401  (not installed here)
    raise AssertionError("unreachable without vLLM")


def attn_res_unprintable_error(*args):
    raise RuntimeError("a NUL \x00 here, a lone surrogate \ud800 there")


def attn_res_kills_its_process(*args):
    os.kill(os.getpid(), signal.SIGSEGV)


def attn_res_hangs(*args):
    while True:
        time.sleep(60)


def attn_res_without_op_check(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                              block_write_idx, eps, output_norm_eps):
    output = torch.empty_like(prefix)
    torch.ops._C.kimi_k3_attn_res(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, output,
                                  num_blocks, eps, output_norm_eps)
    return output


try:  # the Triton kernels are defined where Triton is installed (not on a CPU-only machine)
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:
    # exp(x) is computed as exp2(x * log2(e)).

    @triton.jit
    def _residual(prefix, delta, blocks, t, cols, mask, prefix_stride, delta_stride, block_token_stride, block_stride,
                  block_write_idx, HAS_DELTA: tl.constexpr):
        p = tl.load(prefix + t * prefix_stride + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_DELTA:
            p += tl.load(delta + t * delta_stride + cols, mask=mask, other=0.0).to(tl.float32)
        p_bf16 = p.to(tl.bfloat16)
        tl.store(prefix + t * prefix_stride + cols, p_bf16, mask=mask)
        if block_write_idx >= 0:
            tl.store(blocks + t * block_token_stride + block_write_idx * block_stride + cols, p_bf16, mask=mask)
        return p_bf16.to(tl.float32)

    @triton.jit
    def _finish(mixed, output_norm_weight, out, out_stride, t, cols, mask, hidden, output_norm_eps,
                HAS_NORM: tl.constexpr):
        if HAS_NORM:
            mixed = mixed * tl.rsqrt(tl.sum(mixed * mixed) / hidden + output_norm_eps) * \
                tl.load(output_norm_weight + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out + t * out_stride + cols, mixed.to(tl.bfloat16), mask=mask)

    # One program per row; an online softmax over the sources, one at a time: blocks
    # 0..num_blocks, then p. With PDL, nothing is read before the previous kernel has finished.
    @triton.jit
    def _row_kernel(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, out, out_stride, prefix_stride,
                    delta_stride, block_token_stride, block_stride, hidden, num_blocks, block_write_idx, eps,
                    output_norm_eps, HAS_DELTA: tl.constexpr, HAS_NORM: tl.constexpr, BLOCK_H: tl.constexpr,
                    NUM_STAGES: tl.constexpr, PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_wait()
        t = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_H)
        mask = cols < hidden
        p = _residual(prefix, delta, blocks, t, cols, mask, prefix_stride, delta_stride, block_token_stride,
                      block_stride, block_write_idx, HAS_DELTA)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        gate = tl.load(norm_weight + cols, mask=mask, other=0.0).to(tl.float32) * \
            tl.load(qk_weight + cols, mask=mask, other=0.0).to(tl.float32)
        running_max = tl.full((), float("-inf"), tl.float32)
        total = tl.zeros((), tl.float32)
        acc = tl.zeros((BLOCK_H,), tl.float32)
        for s in tl.range(0, num_blocks + 1, num_stages=NUM_STAGES):
            v = tl.load(blocks + t * block_token_stride + s * block_stride + cols, mask=mask & (s < num_blocks),
                        other=0.0).to(tl.float32)
            # The block written this call is p: taken from registers, not read back from memory just stored.
            v = tl.where((s == num_blocks) | (s == block_write_idx), p, v)
            logit = tl.sum(v * gate) * tl.rsqrt(tl.sum(v * v) / hidden + eps)
            new_max = tl.maximum(running_max, logit)
            rescale = tl.exp2((running_max - new_max) * 1.4426950408889634)
            weight = tl.exp2((logit - new_max) * 1.4426950408889634)
            acc = acc * rescale + weight * v
            total = total * rescale + weight
            running_max = new_max
        _finish(acc / total, output_norm_weight, out, out_stride, t, cols, mask, hidden, output_norm_eps, HAS_NORM)

    # One program per row; every block in one bf16 tile, loaded before p is stored so that no load
    # waits behind a store, and p beside the tile; the softmax in one pass. The written block is p:
    # not read.
    @triton.jit
    def _tile_kernel(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, out, out_stride, prefix_stride,
                     delta_stride, block_token_stride, block_stride, hidden, num_blocks, block_write_idx, eps,
                     output_norm_eps, HAS_DELTA: tl.constexpr, HAS_NORM: tl.constexpr, BLOCK_H: tl.constexpr,
                     BLOCK_B: tl.constexpr, PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_wait()
        t = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_H)
        mask = cols < hidden
        b = tl.arange(0, BLOCK_B)
        read = (b < num_blocks) & (b != block_write_idx)
        v = tl.load(blocks + t * block_token_stride + b[:, None] * block_stride + cols[None, :],
                    mask=read[:, None] & mask[None, :], other=0.0)
        x = tl.load(prefix + t * prefix_stride + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_DELTA:
            x += tl.load(delta + t * delta_stride + cols, mask=mask, other=0.0).to(tl.float32)
        gate = tl.load(norm_weight + cols, mask=mask, other=0.0).to(tl.float32) * \
            tl.load(qk_weight + cols, mask=mask, other=0.0).to(tl.float32)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        p_bf16 = x.to(tl.bfloat16)
        p = p_bf16.to(tl.float32)
        v = tl.where((b == block_write_idx)[:, None], p[None, :], v.to(tl.float32))
        logits = tl.sum(v * gate[None, :], axis=1) * tl.rsqrt(tl.sum(v * v, axis=1) / hidden + eps)
        logits = tl.where(b < num_blocks, logits, float("-inf"))
        p_logit = tl.sum(p * gate) * tl.rsqrt(tl.sum(p * p) / hidden + eps)
        top = tl.maximum(tl.max(logits, axis=0), p_logit)
        weights = tl.exp2((logits - top) * 1.4426950408889634)
        p_weight = tl.exp2((p_logit - top) * 1.4426950408889634)
        mixed = (tl.sum(weights[:, None] * v, axis=0) + p_weight * p) / (tl.sum(weights, axis=0) + p_weight)
        tl.store(prefix + t * prefix_stride + cols, p_bf16, mask=mask)
        if block_write_idx >= 0:
            tl.store(blocks + t * block_token_stride + block_write_idx * block_stride + cols, p_bf16, mask=mask)
        _finish(mixed, output_norm_weight, out, out_stride, t, cols, mask, hidden, output_norm_eps, HAS_NORM)


def _launch(kernel, prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx,
            eps, output_norm_eps, out, num_warps, pdl, **config):
    """`kernel` over every row into `out`; an absent operand is passed as another tensor, never read."""
    tokens, hidden = prefix.shape
    if tokens == 0:
        return
    kernel[(tokens,)](prefix, delta if delta is not None else prefix, blocks, norm_weight, qk_weight,
                      output_norm_weight if output_norm_weight is not None else norm_weight, out, out.stride(0),
                      prefix.stride(0), delta.stride(0) if delta is not None else 0, blocks.stride(0),
                      blocks.stride(1), hidden, num_blocks, block_write_idx, eps, output_norm_eps,
                      HAS_DELTA=delta is not None, HAS_NORM=output_norm_weight is not None,
                      BLOCK_H=triton.next_power_of_2(hidden), PDL=pdl, num_warps=num_warps, launch_pdl=pdl, **config)


def _launch_row_kernel(*operands, num_stages, num_warps, pdl=False):
    _launch(_row_kernel, *operands, num_warps=num_warps, pdl=pdl, NUM_STAGES=num_stages)


def _launch_tile_kernel(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, *rest, num_warps,
                        pdl=False):
    _launch(_tile_kernel, prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, *rest,
            num_warps=num_warps, pdl=pdl, BLOCK_B=max(1, triton.next_power_of_2(num_blocks)))


def attn_res_triton(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx,
                    eps, output_norm_eps):
    _require_packed(prefix, delta, prefix.shape[1])
    return attn_res_triton_any_stride(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                                      block_write_idx, eps, output_norm_eps)


def attn_res_triton_any_stride(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks,
                               block_write_idx, eps, output_norm_eps):
    out = torch.empty(prefix.shape, dtype=torch.bfloat16, device=prefix.device)
    _launch_row_kernel(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx,
                       eps, output_norm_eps, out, num_stages=1,
                       num_warps=min(16, max(4, triton.next_power_of_2(prefix.shape[1]) // 1024)))
    return out


# The peer's design and launch configuration by size, the fastest of those timed on an H100 by
# scripts/probes/triton_peer_configs.py: the tile up to 4 blocks (with 8 its tile spills), the row
# kernel with more.
TILE_MAX_BLOCKS = 4


def _launch_peer(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                 output_norm_eps, out, pdl):
    operands = (prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                output_norm_eps, out)
    if num_blocks <= TILE_MAX_BLOCKS:
        _launch_tile_kernel(*operands, num_warps=16, pdl=pdl)
    elif prefix.shape[0] < 1024:
        _launch_row_kernel(*operands, num_stages=3, num_warps=8, pdl=pdl)
    else:
        _launch_row_kernel(*operands, num_stages=2, num_warps=4, pdl=pdl)


def attn_res_triton_peer(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, *, num_blocks,
                         block_write_idx, eps, output_norm_eps, out):
    _launch_peer(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                 output_norm_eps, out, pdl=False)


def attn_res_triton_peer_pdl(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, *, num_blocks,
                             block_write_idx, eps, output_norm_eps, out):
    _launch_peer(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                 output_norm_eps, out, pdl=True)
