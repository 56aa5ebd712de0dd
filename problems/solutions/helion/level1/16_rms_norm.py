"""Helion: RMS norm over the last dimension with a learned scale, one row per program."""
import helion
import helion.language as hl
import torch
import torch.nn as nn


@helion.kernel(config=helion.Config(block_sizes=[1], reduction_loops=[None], num_warps=8), static_shapes=False)
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :]
        rms = (1.0 / torch.sqrt(torch.mean(row * row, dim=-1, keepdim=True) + eps))
        out[tile_m, :] = row * rms * weight[None, :]
    return out


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.contiguous().view(-1, x.shape[-1])
        return rms_norm(rows, self.weight, self.eps).view(x.shape)
