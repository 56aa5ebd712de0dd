"""Weight-only int8 linear: y = x @ (W_int8 * scale)^T + bias, per-output-channel scales (fp32)."""

import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 4096
OUT_FEATURES = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "quantization", "int8", "dequantize", "fusion"],
    "flops": 137438953472,
    "bytes": 151027712,
    "small": {"BATCH": 64, "IN_FEATURES": 96, "OUT_FEATURES": 80},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.register_buffer("weight", torch.randint(-127, 128, (out_features, in_features), dtype=torch.int8))
        self.register_buffer("scale", (torch.rand(out_features) + 0.5) / (127 * in_features**0.5))
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.to(x.dtype) * self.scale[:, None]
        return torch.nn.functional.linear(x, w, self.bias)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 3, IN_FEATURES)]]
