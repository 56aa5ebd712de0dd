"""LLaMA-style decoder layer: RMSNorm, causal attention with rotary embeddings, RMSNorm, SwiGLU MLP (fp32).

flops (hand): projections 2 * T * (4 * D^2 + 3 * D * F) with T = B * S, plus causal attention
4 * B * H * Dh * S * (S + 1) / 2 (the FLOP counter counts the full S x S products).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
SEQ = 1024
HIDDEN = 1024
HEADS = 16
FFN = 2816

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, see the docstring.
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["transformer", "llama", "attention", "causal", "rope", "rmsnorm", "swiglu"],
    "flops": 56912510976,
    "flops_method": "hand",
    "bytes": 68689920,
    "small": {"BATCH": 2, "SEQ": 24, "HIDDEN": 64, "HEADS": 4, "FFN": 96},
}


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, max_seq: int, base: float = 10000.0):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.attn_norm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)
        inv_freq = 1.0 / (base ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rope(self, t: torch.Tensor) -> torch.Tensor:
        seq, half = t.shape[-2], self.head_dim // 2
        rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * self.cos[:seq] + rotated * self.sin[:seq]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        h = self.attn_norm(x)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = self._rope(heads(self.q_proj(h))), self._rope(heads(self.k_proj(h))), heads(self.v_proj(h))
        scores = torch.matmul(q, k.transpose(-2, -1)) / self.head_dim**0.5
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=x.device), diagonal=1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        x = x + self.o_proj(torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS, FFN, SEQ]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, SEQ // 4 + 3, HIDDEN)]]
