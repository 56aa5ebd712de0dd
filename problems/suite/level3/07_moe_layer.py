"""Mixture-of-experts layer: softmax router, top-2 of 8 GELU experts, weighted combine (fp32).

Deterministic by construction: tokens are grouped per expert with a stable sort and every result
is written to its own slot (no atomic scatter-add), then the two slots per token are summed.
The router weights are scaled so routing margins are wide: a candidate whose router logits differ
in the last bits flips a token's expert choice with probability ~1e-3 per evaluation.
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
    "bytes": 201359360,
    "small": {"TOKENS": 64, "HIDDEN": 32, "FFN": 48, "EXPERTS": 4},
}


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        with torch.no_grad():
            self.router.weight.normal_(0.0, 4.0 / hidden**0.5)
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


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, FFN, EXPERTS, TOP_K]


def get_extra_inputs():
    return [[torch.randn(TOKENS // 4 + 3, HIDDEN)]]
