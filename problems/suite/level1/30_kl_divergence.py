"""Per-row KL divergence KL(p || q) from log-probabilities log q and probabilities p (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 4096
COLS = 16384

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["loss", "kl-divergence", "reduction", "memory-bound"],
    "flops": 0,
    "bytes": 536887296,
    "small": {"ROWS": 16, "COLS": 5000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return F.kl_div(log_q, p, reduction="none").sum(dim=-1)


def _pair(rows: int, cols: int):
    temperature = torch.rand(rows, 1) * 3 + 0.5
    log_q = torch.log_softmax(torch.randn(rows, cols) * temperature, dim=-1)
    p = torch.softmax(torch.randn(rows, cols) * 2, dim=-1)
    return [log_q, p]


def get_inputs():
    return _pair(ROWS, COLS)


def get_init_inputs():
    return []


def get_extra_inputs():
    return [_pair(ROWS // 4 + 1, COLS // 2 + 3)]
