"""Helion: fused residual add + RMS norm, returning (normalised, new residual), one row per program."""
import helion
import helion.language as hl
import torch
import torch.nn as nn


@helion.kernel(config=helion.Config(block_sizes=[1], reduction_loops=[None], num_warps=8), static_shapes=False)
def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    normed = torch.empty_like(x)
    summed = torch.empty_like(x)
    for tile_m in hl.tile(m):
        h = x[tile_m, :] + residual[tile_m, :]
        summed[tile_m, :] = h
        normed[tile_m, :] = h * (1.0 / torch.sqrt(torch.mean(h * h, dim=-1, keepdim=True) + eps)) * weight[None, :]
    return normed, summed


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        rows = x.contiguous().view(-1, x.shape[-1])
        normed, summed = add_rms_norm(rows, residual.contiguous().view(-1, x.shape[-1]), self.weight, self.eps)
        return normed.view(x.shape), summed.view(x.shape)
