"""Vision-transformer encoder block: pre-norm bidirectional attention over 197 patch tokens + GELU MLP (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
TOKENS = 197
HIDDEN = 768
HEADS = 12

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["transformer", "vit", "attention", "mlp", "layernorm"],
    "flops": 93053091840,
    "bytes": 67083264,
    "small": {"BATCH": 2, "TOKENS": 17, "HIDDEN": 48, "HEADS": 4},
}


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden, eps=1e-6)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-6)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        head_dim = hidden // self.heads
        q, k, v = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        probs = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / head_dim**0.5, dim=-1)
        attn = torch.matmul(probs, v).transpose(1, 2).reshape(batch, tokens, hidden)
        x = x + self.proj(attn)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def get_inputs():
    return [torch.randn(BATCH, TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, TOKENS // 2 + 1, HIDDEN)]]
