"""Pre-norm GPT transformer block: causal multi-head self-attention and a GELU MLP, with residuals (fp32).

flops (hand): linear layers 2 * T * 12 * D^2 with T = B * S tokens, plus causal attention
4 * B * H * Dh * S * (S + 1) / 2 for the lower triangles of Q K^T and P V (the FLOP counter
counts the full S x S products).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
SEQ = 1024
HIDDEN = 1024
HEADS = 16

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, see the docstring.
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["transformer", "attention", "causal", "mlp", "layernorm"],
    "flops": 111677538304,
    "flops_method": "hand",
    "bytes": 83939328,
    "small": {"BATCH": 2, "SEQ": 24, "HIDDEN": 64, "HEADS": 4},
}


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def _attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        head_dim = hidden // self.heads
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / head_dim**0.5
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=x.device), diagonal=1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden)
        return self.proj(out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, SEQ // 4 + 3, HIDDEN)]]
