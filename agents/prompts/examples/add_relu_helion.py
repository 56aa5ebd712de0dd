import helion
import helion.language as hl
import torch
import torch.nn as nn


# A fixed config: the evaluator does not autotune (a kernel without one fails). block_sizes has one entry per
# hl.tile dimension; static_shapes=False compiles once for every shape.
@helion.kernel(config=helion.Config(block_sizes=[1024], num_warps=4), static_shapes=False)
def add_relu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(a)  # host code: runs on the CPU side, allocates only
    for tile in hl.tile(out.numel()):  # device code: each tile becomes one Triton program
        out[tile] = torch.relu(a[tile] + b[tile])
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_relu(a.contiguous().view(-1), b.contiguous().view(-1)).view(a.shape)
