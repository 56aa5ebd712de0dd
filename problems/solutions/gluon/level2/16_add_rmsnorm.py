"""Gluon: fused residual add + RMS norm, returning (normalised, new residual), one row per program."""
import torch
import torch.nn as nn
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

NUM_WARPS = 8


@gluon.jit
def add_rms_norm_kernel(x_ptr, r_ptr, w_ptr, normed_ptr, summed_ptr, n_cols, eps, BLOCK: gl.constexpr,
                        NUM_WARPS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32], warps_per_cta=[NUM_WARPS],
                                            order=[0])
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, BLOCK, layout=layout)
    mask = cols < n_cols
    offsets = row * n_cols + cols
    h = gl.load(x_ptr + offsets, mask=mask, other=0.0) + gl.load(r_ptr + offsets, mask=mask, other=0.0)
    w = gl.load(w_ptr + cols, mask=mask, other=0.0)
    rms = 1.0 / gl.sqrt(gl.sum(h * h, axis=0) / n_cols + eps)
    gl.store(summed_ptr + offsets, h, mask=mask)
    gl.store(normed_ptr + offsets, h * rms * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        x, residual = x.contiguous(), residual.contiguous()
        normed, summed = torch.empty_like(x), torch.empty_like(x)
        n_cols = x.shape[-1]
        block = max(triton.next_power_of_2(n_cols), 4 * 32 * NUM_WARPS)
        add_rms_norm_kernel[(x.numel() // n_cols,)](x, residual, self.weight, normed, summed, n_cols, self.eps,
                                                    BLOCK=block, NUM_WARPS=NUM_WARPS, num_warps=NUM_WARPS)
        return normed, summed
