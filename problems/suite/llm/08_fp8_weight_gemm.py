"""Linear layer with FP8 (e4m3) weights and per-output-channel scales: y = (x @ W^T) * scale (bf16 activations).

The scale is applied to the fp32-accumulated product (e4m3 -> bf16 is exact, so the product is
exact up to summation order); dequantising W to bf16 first would round every weight and move
outputs by up to ~1.3x the bf16 tolerance.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
IN_FEATURES = 4096
OUT_FEATURES = 8192

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["matmul", "quantization", "fp8", "dequantize"],
    "flops": 274877906944,
    "bytes": 134250496,
    "small": {"TOKENS": 64, "IN_FEATURES": 96, "OUT_FEATURES": 80},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.register_buffer("weight", (torch.randn(out_features, in_features) * 16).to(torch.float8_e4m3fn))
        self.register_buffer("scale", (torch.rand(out_features) + 0.5) / (16 * in_features**0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight.to(x.dtype))
        return (y.float() * self.scale).to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, IN_FEATURES, dtype=torch.bfloat16)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_extra_inputs():
    return [[torch.randn(TOKENS // 8 + 3, IN_FEATURES, dtype=torch.bfloat16)]]
