import torch
import torch.nn as nn
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def add_relu_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: gl.constexpr):
    # Gluon makes the layout explicit: each thread holds 4 contiguous elements (16-byte accesses), 32 threads
    # per warp, 4 warps per program (the launch's num_warps=4); a larger BLOCK_SIZE repeats the pattern.
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32], warps_per_cta=[4], order=[0])
    pid = gl.program_id(0)
    offsets = pid * BLOCK_SIZE + gl.arange(0, BLOCK_SIZE, layout=layout)
    mask = offsets < n_elements  # the last block may run past the end
    a = gl.load(a_ptr + offsets, mask=mask)
    b = gl.load(b_ptr + offsets, mask=mask)
    gl.store(out_ptr + offsets, gl.maximum(a + b, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n_elements = out.numel()
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
        # num_warps must match the layout's warps_per_cta
        add_relu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
        return out
