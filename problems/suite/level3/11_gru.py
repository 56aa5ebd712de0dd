"""Two-layer GRU encoder, returning the top layer's outputs (fp32, batch first)."""

import torch
import torch.nn as nn

BATCH = 32
SEQ = 256
INPUT = 256
HIDDEN = 512
LAYERS = 2

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["rnn", "gru", "recurrent", "matmul"],
    "flops": 45097156608,
    "bytes": 36200448,
    "small": {"BATCH": 3, "SEQ": 12, "INPUT": 16, "HIDDEN": 24},
}


class Model(nn.Module):
    def __init__(self, input_size: int, hidden: int, layers: int):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden, num_layers=layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return out


def get_inputs():
    return [torch.randn(BATCH, SEQ, INPUT)]


def get_init_inputs():
    return [INPUT, HIDDEN, LAYERS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, SEQ // 4 + 3, INPUT)]]
