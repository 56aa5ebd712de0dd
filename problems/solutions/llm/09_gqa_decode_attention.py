"""Triton solution for LLM/09_gqa_decode_attention: split-KV ("flash decoding") attention for one query token.

Stage 1: a program per (batch, KV head, cache split) loads its K/V slice once and serves all the
query heads of that KV group at once (GQA: 4 query heads share it, padded to the 16 rows a
tensor-core product needs), keeping a running max, sum and weighted value sum in fp32. Stage 2 merges the splits. The 4096-token cache is thus read
exactly once, by 32 * 8 * SPLITS programs in parallel, instead of once per query head.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

# Triton's CPU interpreter (TRITON_INTERPRET=1) multiplies the raw bits of bf16 operands in
# tl.dot and truncates fp32 -> bf16 casts. Under the interpreter the kernels therefore feed tl.dot
# fp32 copies of the bf16 values (exactly the same numbers) and round by hand to nearest even,
# so the CPU check sees the GPU's numerics. On the GPU both branches below compile away.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _to_bf16(x, INTERPRET: tl.constexpr):
    if INTERPRET:
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = x.to(tl.bfloat16)
    return out


@triton.jit
def _dot(a, b, INTERPRET: tl.constexpr):
    if INTERPRET:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def _decode_split_kernel(q_ptr, k_ptr, v_ptr, m_ptr, l_ptr, acc_ptr, heads, kv_heads, cache, split_len, qk_scale,
                         GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                         INTERPRET: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    kv = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    splits = tl.num_programs(2)
    g = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    head = kv * GROUP + g  # query heads of this KV group
    q = tl.load(q_ptr + (b * heads + head[:, None]) * HEAD_DIM + dims[None, :], mask=g[:, None] < GROUP, other=0.0)
    kv_base = (b * kv_heads + kv) * cache * HEAD_DIM
    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, cache)
    for start in range(lo, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        valid = cols < hi
        offsets = kv_base + cols[:, None] * HEAD_DIM + dims[None, :]
        k = tl.load(k_ptr + offsets, mask=valid[:, None], other=0.0)
        v = tl.load(v_ptr + offsets, mask=valid[:, None], other=0.0)
        s = _dot(q, tl.trans(k), INTERPRET) * qk_scale  # (GROUP_PAD, BLOCK_N); padded rows are wasted MMA work
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _dot(_to_bf16(p, INTERPRET), v, INTERPRET)
        m_i = m_new
    slot = ((b * heads + head) * splits + split)  # partial results, one slot per (query head, split)
    tl.store(m_ptr + slot, m_i, mask=g < GROUP)
    tl.store(l_ptr + slot, l_i, mask=g < GROUP)
    tl.store(acc_ptr + slot[:, None] * HEAD_DIM + dims[None, :], acc, mask=g[:, None] < GROUP)


@triton.jit
def _decode_merge_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, splits, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                         INTERPRET: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)  # flattened (batch, query head)
    s = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, HEAD_DIM)
    valid = s < splits
    m = tl.load(m_ptr + bh * splits + s, mask=valid, other=float("-inf"))
    l = tl.load(l_ptr + bh * splits + s, mask=valid, other=0.0)
    acc = tl.load(acc_ptr + (bh * splits + s)[:, None] * HEAD_DIM + dims[None, :], mask=valid[:, None], other=0.0)
    m_max = tl.max(m, axis=0)
    w = tl.where(valid, tl.exp2(m - m_max), 0.0)
    out = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
    tl.store(o_ptr + bh * HEAD_DIM + dims, _to_bf16(out, INTERPRET))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        batch, heads, head_dim = q.shape
        kv_heads, cache = k_cache.shape[1], k_cache.shape[2]
        q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
        group = heads // kv_heads
        block_n = 64
        split_len = max(block_n, triton.cdiv(triton.cdiv(cache, 16), block_n) * block_n)  # ~16 splits of whole blocks
        splits = triton.cdiv(cache, split_len)
        m = torch.empty(batch * heads * splits, dtype=torch.float32, device=q.device)
        l = torch.empty_like(m)
        acc = torch.empty(batch * heads * splits, head_dim, dtype=torch.float32, device=q.device)
        qk_scale = 1.4426950408889634 / head_dim**0.5
        _decode_split_kernel[(batch, kv_heads, splits)](
            q, k_cache, v_cache, m, l, acc, heads, kv_heads, cache, split_len, qk_scale,
            GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, BLOCK_N=block_n,
            INTERPRET=INTERPRET, num_warps=8,
        )
        out = torch.empty_like(q)
        _decode_merge_kernel[(batch * heads,)](m, l, acc, out, splits, SPLITS_PAD=triton.next_power_of_2(splits),
                                               HEAD_DIM=head_dim, INTERPRET=INTERPRET, num_warps=4)
        return out
