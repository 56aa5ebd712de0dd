"""Helion: LayerNorm(x + bias + residual), one row per program: mean and variance in fp32 from the row in registers."""
import helion
import helion.language as hl
import torch
import torch.nn as nn


@helion.kernel(config=helion.Config(block_sizes=[1], reduction_loops=[None], num_warps=8), static_shapes=False)
def bias_residual_layer_norm(x: torch.Tensor, residual: torch.Tensor, bias: torch.Tensor, weight: torch.Tensor,
                             norm_bias: torch.Tensor, eps: float) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        h = x[tile_m, :] + bias[None, :] + residual[tile_m, :]
        centred = h - torch.mean(h, dim=-1, keepdim=True)
        inv_std = 1.0 / torch.sqrt(torch.mean(centred * centred, dim=-1, keepdim=True) + eps)
        out[tile_m, :] = centred * inv_std * weight[None, :] + norm_bias[None, :]
    return out


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.5)
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)
        self.norm_bias = nn.Parameter(torch.randn(hidden) * 0.2)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        rows = x.contiguous().view(-1, x.shape[-1])
        out = bias_residual_layer_norm(rows, residual.contiguous().view(-1, x.shape[-1]), self.bias, self.weight,
                                       self.norm_bias, 1e-5)
        return out.view(x.shape)
