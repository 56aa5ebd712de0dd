"""Embedding lookup: gather rows of a (vocab, dim) table by token ids (fp32)."""

import torch
import torch.nn as nn

VOCAB = 32768
DIM = 1024
BATCH = 32
SEQ = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
# BATCH * SEQ = 4 * VOCAB lookups touch ~98% of the table, so counting the whole table once is fair.
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["embedding", "gather", "memory-bound"],
    "flops": 0,
    "bytes": 672137216,
    "small": {"VOCAB": 500, "DIM": 48, "BATCH": 2, "SEQ": 100},
}


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    return [VOCAB, DIM]


def get_extra_inputs():
    return [[torch.randint(0, VOCAB, (BATCH // 2 + 1, SEQ // 4 + 3))], [torch.randint(0, VOCAB, (1000,))]]
