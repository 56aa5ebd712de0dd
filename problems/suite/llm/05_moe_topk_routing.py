"""Mixture-of-experts router: softmax over 128 expert logits, top-8 experts, renormalised weights (fp32 logits).

Router logits are kept in fp32 (as MoE models do): in bf16, equal logits are common and the
top-k order of equal values is arbitrary. The inputs are also built without ties (see
`_logits`), so exactly one answer is correct.
"""

import torch
import torch.nn as nn

TOKENS = 262144
EXPERTS = 128
TOP_K = 8

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "float32",
    "tags": ["moe", "routing", "topk", "softmax", "memory-bound"],
    "flops": 0,
    "bytes": 159383552,
    "small": {"TOKENS": 64, "EXPERTS": 16, "TOP_K": 4},
}


class Model(nn.Module):
    def __init__(self, top_k: int):
        super().__init__()
        self.top_k = top_k

    def forward(self, logits: torch.Tensor):
        probs = torch.softmax(logits, dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), experts


def _logits(tokens: int, experts: int) -> torch.Tensor:
    # randn logits plus rank * 1e-3: the order is unchanged and neighbours differ by >= 1e-3
    x = torch.randn(tokens, experts) * 2
    ranks = x.argsort(dim=-1).argsort(dim=-1).float()
    return x + ranks * 1e-3


def get_inputs():
    return [_logits(TOKENS, EXPERTS)]


def get_init_inputs():
    return [TOP_K]


def get_extra_inputs():
    return [[_logits(TOKENS // 16 + 3, EXPERTS)], [_logits(TOKENS // 16, EXPERTS // 2)]]
