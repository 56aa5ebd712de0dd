"""Gluon: LayerNorm over the last dimension, one row per program: mean and variance in fp32 from the row in registers."""
import torch
import torch.nn as nn
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

NUM_WARPS = 8


@gluon.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: gl.constexpr, NUM_WARPS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32], warps_per_cta=[NUM_WARPS],
                                            order=[0])
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, BLOCK, layout=layout)
    mask = cols < n_cols
    x = gl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    centred = gl.where(mask, x - gl.sum(x, axis=0) / n_cols, 0.0)
    inv_std = 1.0 / gl.sqrt(gl.sum(centred * centred, axis=0) / n_cols + eps)
    w = gl.load(w_ptr + cols, mask=mask, other=0.0)
    b = gl.load(b_ptr + cols, mask=mask, other=0.0)
    gl.store(out_ptr + row * n_cols + cols, centred * inv_std * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)  # the same parameters as the reference's, in the same order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        block = max(triton.next_power_of_2(n_cols), 4 * 32 * NUM_WARPS)
        layer_norm_kernel[(x.numel() // n_cols,)](x, self.norm.weight, self.norm.bias, out, n_cols, self.norm.eps,
                                                  BLOCK=block, NUM_WARPS=NUM_WARPS, num_warps=NUM_WARPS)
        return out
