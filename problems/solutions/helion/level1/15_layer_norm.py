"""Helion: LayerNorm over the last dimension, one row per program: mean and variance in fp32 from the row in registers."""
import helion
import helion.language as hl
import torch
import torch.nn as nn


@helion.kernel(config=helion.Config(block_sizes=[1], reduction_loops=[None], num_warps=8), static_shapes=False)
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        centred = row - torch.mean(row, dim=-1, keepdim=True)
        inv_std = 1.0 / torch.sqrt(torch.mean(centred * centred, dim=-1, keepdim=True) + eps)
        out[tile_m, :] = centred * inv_std * weight[None, :] + bias[None, :]
    return out


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)  # the same parameters as the reference's, in the same order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.contiguous().view(-1, x.shape[-1])
        return layer_norm(rows, self.norm.weight, self.norm.bias, self.norm.eps).view(x.shape)
