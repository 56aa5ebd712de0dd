"""Dynamic per-token FP8 (e4m3) quantisation of bf16 activations: returns (q, scale) with x ~ q * scale.

scale = amax(|x|) / 448 per token, q = round_to_e4m3(x / scale). The inputs make every token's
amax 448 * 2^k (one entry sits at the maximum, as outlier channels do), so the scale is an exact
power of two and x / scale is exact in fp32 however it is computed (divide, multiply by the
reciprocal, fast division): the only rounding left is the one to e4m3, which correct kernels
agree on bit for bit. With arbitrary amax, values that land within an fp32 ulp of an e4m3
rounding boundary would round differently in correct kernels, one e4m3 step (up to 12.5%) apart.
"""

import torch
import torch.nn as nn

TOKENS = 16384
HIDDEN = 8192
FP8_MAX = 448.0

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["quantization", "fp8", "reduction", "memory-bound"],
    "flops": 0,
    "bytes": 402718720,
    "small": {"TOKENS": 16, "HIDDEN": 4500},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-4)
        scale = amax / FP8_MAX
        q = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q, scale


def _activations(tokens: int, hidden: int) -> torch.Tensor:
    scale = 2.0 ** torch.randint(-10, 3, (tokens, 1)).float()  # per-token magnitudes over 4 decades
    x = (torch.randn(tokens, hidden) * 96).clamp(-440.0, 440.0)
    outlier = torch.randint(0, hidden, (tokens, 1))
    sign = torch.randint(0, 2, (tokens, 1)).float() * 2 - 1
    x.scatter_(1, outlier, sign * FP8_MAX)
    return (x * scale).to(torch.bfloat16)


def get_inputs():
    return [_activations(TOKENS, HIDDEN)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[_activations(TOKENS // 8 + 3, HIDDEN // 2 + 8)]]
