"""Helion: row-wise L2 normalisation x / max(||x||_2, eps), one row per program held whole in registers."""
import helion
import helion.language as hl
import torch
import torch.nn as nn


@helion.kernel(config=helion.Config(block_sizes=[1], reduction_loops=[None], num_warps=8), static_shapes=False)
def l2_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        norm = torch.sqrt(torch.sum(row * row, dim=-1, keepdim=True))
        out[tile_m, :] = row / torch.clamp(norm, min=eps)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.contiguous().view(-1, x.shape[-1])
        return l2_normalize(rows, 1e-12).view(x.shape)
