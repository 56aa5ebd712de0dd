"""Two-layer LSTM over a batch of sequences, returning the top layer's outputs (fp32, batch first)."""

import torch
import torch.nn as nn

BATCH = 32
SEQ = 256
INPUT = 256
HIDDEN = 512
LAYERS = 2

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, as torch.utils.flop_counter does not see inside aten.lstm on the CPU:
# SEQ * sum over layers of 2 * BATCH * 4 * HIDDEN * (layer input + HIDDEN), the gate matmuls.
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["rnn", "lstm", "recurrent", "matmul"],
    "flops": 60129542144,
    "flops_method": "hand",
    "bytes": 39878656,
    "small": {"BATCH": 3, "SEQ": 12, "INPUT": 16, "HIDDEN": 24},
}


class Model(nn.Module):
    def __init__(self, input_size: int, hidden: int, layers: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, num_layers=layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return out


def get_inputs():
    return [torch.randn(BATCH, SEQ, INPUT)]


def get_init_inputs():
    return [INPUT, HIDDEN, LAYERS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, SEQ // 4 + 3, INPUT)]]
