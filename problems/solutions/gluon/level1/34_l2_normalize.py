"""Gluon: row-wise L2 normalisation x / max(||x||_2, eps), one row per program held in registers."""
import torch
import torch.nn as nn
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

NUM_WARPS = 8


@gluon.jit
def l2_normalize_kernel(x_ptr, out_ptr, n_cols, eps, BLOCK: gl.constexpr, NUM_WARPS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32], warps_per_cta=[NUM_WARPS],
                                            order=[0])
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, BLOCK, layout=layout)
    mask = cols < n_cols
    x = gl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    norm = gl.maximum(gl.sqrt(gl.sum(x * x, axis=0)), eps)
    gl.store(out_ptr + row * n_cols + cols, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        block = max(triton.next_power_of_2(n_cols), 4 * 32 * NUM_WARPS)
        l2_normalize_kernel[(x.numel() // n_cols,)](x, out, n_cols, 1e-12, BLOCK=block, NUM_WARPS=NUM_WARPS,
                                                    num_warps=NUM_WARPS)
        return out
