"""Mixture-of-experts layer: softmax router, top-2 of 8 GELU experts, weighted combine (fp32).

Deterministic by construction: tokens are grouped per expert with a stable sort and every result
is written to its own slot (no atomic scatter-add), then the two slots per token are summed.

Routing is exact, so every correct candidate routes every token the same way: inputs lie on a
1/4 grid and router weights on a 1/64 grid, so each router logit is a multiple of 2^-8 below 256,
which fp32 sums exactly in any order; a bias of distinct multiples of 2^-12 (smaller than that
grid) rules out ties. With ordinary randn inputs and weights, two correct fp32 summation orders
differ by up to 1.2e-5 and 7 in 200 input sets hold a token whose 2nd and 3rd logits are closer
than that, so correct candidates would fail at random.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
HIDDEN = 1024
FFN = 2048
EXPERTS = 8
TOP_K = 2

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py)
# with a real forward (routing is data-dependent); flops are the expert and router matmuls actually run.
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["moe", "routing", "matmul", "gather"],
    "flops": 137573171200,
    "bytes": 201359392,
    "small": {"TOKENS": 64, "HIDDEN": 32, "FFN": 48, "EXPERTS": 4},
}


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(hidden, experts)
        with torch.no_grad():  # exact routing, see the docstring
            self.router.weight.copy_(torch.randint(-8, 9, (experts, hidden)) / 64)
            self.router.bias.copy_(torch.randperm(experts) / 4096)
        self.w_in = nn.Parameter(torch.randn(experts, ffn, hidden) / hidden**0.5)
        self.w_out = nn.Parameter(torch.randn(experts, hidden, ffn) / ffn**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens, hidden = x.shape
        probs = torch.softmax(self.router(x), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        flat_experts = experts.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)
        counts = torch.bincount(flat_experts, minlength=self.w_in.shape[0]).tolist()
        slots = torch.empty(tokens * self.top_k, hidden, dtype=x.dtype, device=x.device)
        start = 0
        for e, count in enumerate(counts):
            idx = order[start : start + count]
            start += count
            if count == 0:
                continue
            h = F.gelu(x[idx // self.top_k] @ self.w_in[e].T)
            slots[idx] = (h @ self.w_out[e].T) * weights.reshape(-1)[idx, None]
        return slots.view(tokens, self.top_k, hidden).sum(dim=1)


def _tokens(n: int) -> torch.Tensor:
    return torch.randint(-8, 9, (n, HIDDEN)) / 4  # on a 1/4 grid: exact router logits, see the docstring


def get_inputs():
    return [_tokens(TOKENS)]


def get_init_inputs():
    return [HIDDEN, FFN, EXPERTS, TOP_K]


def get_extra_inputs():
    return [[_tokens(TOKENS // 4 + 3)]]
