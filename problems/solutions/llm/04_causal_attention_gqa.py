"""Triton solution for LLM/04_causal_attention_gqa: causal flash attention (bf16, GQA) in one kernel.

Each program owns BLOCK_M query rows of one head and streams the key/value blocks of the head's
KV group (h // group) with an online softmax: base-2 exponentials with the scale folded in, bf16
tensor-core products with fp32 accumulation, the mask applied only on the diagonal blocks, and
blocks above the diagonal never visited. No S x S matrix and no repeated K/V copy is ever made.
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

# Triton's CPU interpreter (TRITON_INTERPRET=1) multiplies the raw bits of bf16 operands in
# tl.dot and truncates fp32 -> bf16 casts. Under the interpreter the kernel therefore feeds tl.dot
# fp32 copies of the bf16 values (exactly the same numbers) and rounds by hand to nearest even,
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
def _attend_block(q, k_ptrs, v_ptrs, rows, cols, seq, m_i, l_i, acc, qk_scale,
                  MASKED: tl.constexpr, INTERPRET: tl.constexpr):
    if MASKED:
        k = tl.load(k_ptrs, mask=cols[:, None] < seq, other=0.0)
        v = tl.load(v_ptrs, mask=cols[:, None] < seq, other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    s = _dot(q, tl.trans(k), INTERPRET) * qk_scale
    if MASKED:
        s = tl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + _dot(_to_bf16(p, INTERPRET), v, INTERPRET)
    return m_new, l_i, acc


@triton.jit
def _flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, heads, kv_heads, seq, qk_scale,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            INTERPRET: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    kv = h // (heads // kv_heads)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + (b * heads + h) * seq * HEAD_DIM
    q = tl.load(q_base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq, other=0.0)
    kv_base = (b * kv_heads + kv) * seq * HEAD_DIM
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    diag_start = (pid_m * BLOCK_M // BLOCK_N) * BLOCK_N  # key blocks before this are visible to every row
    for start in range(0, diag_start, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        offsets = kv_base + cols[:, None] * HEAD_DIM + dims[None, :]
        m_i, l_i, acc = _attend_block(q, k_ptr + offsets, v_ptr + offsets, rows, cols, seq, m_i, l_i, acc, qk_scale,
                                      MASKED=False, INTERPRET=INTERPRET)
    for start in range(diag_start, tl.minimum((pid_m + 1) * BLOCK_M, seq), BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        offsets = kv_base + cols[:, None] * HEAD_DIM + dims[None, :]
        m_i, l_i, acc = _attend_block(q, k_ptr + offsets, v_ptr + offsets, rows, cols, seq, m_i, l_i, acc, qk_scale,
                                      MASKED=True, INTERPRET=INTERPRET)
    out = _to_bf16(acc / l_i[:, None], INTERPRET)
    tl.store(o_ptr + (b * heads + h) * seq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :], out,
             mask=rows[:, None] < seq)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batch, heads, seq, head_dim = q.shape
        kv_heads = k.shape[1]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = torch.empty_like(q)
        block_m, block_n = 128, 64
        qk_scale = 1.4426950408889634 / head_dim**0.5  # log2(e) / sqrt(d): exp2 instead of exp
        grid = (triton.cdiv(seq, block_m), batch * heads)
        _flash_attention_kernel[grid](q, k, v, out, heads, kv_heads, seq, qk_scale,
                                      HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, INTERPRET=INTERPRET,
                                      num_warps=8, num_stages=3)
        return out
