"""Output captures: a keyed, per-repetition fingerprint of a tensor, the specification of the
worker's CUDA capture kernels (eval/worker/native/capture.cu), in plain torch so the trusted
parent (and CPU tests) can compute the same numbers and check them.

A capture of one output tensor `x` for repetition `rep`, leaf `leaf`, under the secret `key`
is a float64 vector of `samples + CAPTURE_EXTRA` values:

    [0, S)       samples: element j for j < n when n <= S (the rest NaN), else element g(j) mod n
    S + 0..7     projections: sum over finite elements of s_k(i) * x_i, s_k(i) = -1 if bit k of h(i) else +1
    S + 8        sum_abs: sum of |x_i| over finite elements
    S + 9        sum_sq: sum of x_i**2 over finite elements
    S + 10..12   counts of NaN, +Inf, -Inf
    S + 13       nonfinite_proj: sum over non-finite elements of s_0(i) * code (NaN 1, +Inf 2, -Inf 3)
    S + 14       n (numel)
    S + 15       reserved (0)

Elements are numbered by their logical row-major (C-order) index i, whatever the strides, and
converted to float64. With all arithmetic on 64-bit unsigned integers (mod 2**64):

    splitmix64(z) = mix(z + 0x9E3779B97F4A7C15), the standard SplitMix64 output function
    rl   = splitmix64(rep * 0x9E3779B97F4A7C15 + leaf * 0xBF58476D1CE4E5B9)   (rep taken mod 2**64)
    h(i) = splitmix64(key ^ rl ^ i)
    g(j) = splitmix64(key ^ 0xD1B54A32D192ED03 ^ rl ^ j)

Sums are in float64; their order is not specified, so two implementations agree to rounding.
"""

from __future__ import annotations

import torch

CAPTURE_EXTRA = 16  # values after the samples (see the module docstring for the layout)
PROJECTIONS = 8
PROJ, SUM_ABS, SUM_SQ, N_NAN, N_POSINF, N_NEGINF, NONFINITE_PROJ, NUMEL = 0, 8, 9, 10, 11, 12, 13, 14

def self_overlap(sizes: list[int], strides: list[int]) -> bool:
    """Whether two elements of a tensor of these sizes and strides may share memory: a dimension over 1 with stride 0
    (an `expand`), or one whose stride does not pass every element the smaller strides reach (`as_strided` over
    itself). Such an output is not dense: one computed row stands in for many. Every layout PyTorch's own ops make
    (contiguous, transposed, permuted, sliced) passes. The native loop applies the same rule in C (`describe`)."""
    if 0 in sizes:
        return False  # no elements, none shared
    reach = 0  # the largest offset the dimensions of smaller strides reach
    for size, stride in sorted(((n, abs(st)) for n, st in zip(sizes, strides) if n > 1), key=lambda d: d[1]):
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
SAMPLE_SALT = 0xD1B54A32D192ED03

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
                    torch.int16, torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)

_CHUNK = 1 << 22  # elements per step, bounds the memory of the hashes on large tensors


def _s64(u: int) -> int:
    """The int64 holding the same 64 bits as the unsigned value u."""
    u &= MASK64
    return u - (1 << 64) if u >= 1 << 63 else u


def splitmix64_int(z: int) -> int:
    """SplitMix64 on a Python int (unsigned 64-bit result)."""
    z = (z + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 tensors holding unsigned 64-bit values (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def splitmix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64 on an int64 tensor, bit-exact with the unsigned version (int64 arithmetic wraps)."""
    z = z + _s64(GOLDEN)
    z = (z ^ _shr(z, 30)) * _s64(MIX1)
    z = (z ^ _shr(z, 27)) * _s64(MIX2)
    return z ^ _shr(z, 31)


def rep_leaf_seed(rep: int, leaf: int) -> int:
    """rl of the module docstring (the key does not enter it; it is XORed in per element)."""
    return splitmix64_int((rep * GOLDEN + leaf * MIX1) & MASK64)


def hashes(key: int, rep: int, leaf: int, index: torch.Tensor) -> torch.Tensor:
    """h(i) for int64 logical indices, as int64 bit patterns."""
    return splitmix64(index ^ _s64(key ^ rep_leaf_seed(rep, leaf)))


def signs(key: int, rep: int, leaf: int, index: torch.Tensor) -> torch.Tensor:
    """s_k(i) for k = 0..7, shape [len(index), 8], float64 values +1/-1."""
    h = hashes(key, rep, leaf, index)
    bits = (h.unsqueeze(1) >> torch.arange(PROJECTIONS, dtype=torch.int64)) & 1
    return (1 - 2 * bits).to(torch.float64)


def positions(key: int, rep: int, leaf: int, n: int, samples: int) -> torch.Tensor:
    """Logical element index of each sample slot (int64, length `samples`); -1 for a NaN slot (n <= samples)."""
    j = torch.arange(samples, dtype=torch.int64)
    if n <= samples:
        return torch.where(j < n, j, torch.full_like(j, -1))
    g = splitmix64(j ^ _s64(key ^ SAMPLE_SALT ^ rep_leaf_seed(rep, leaf)))
    # unsigned g mod n from the signed bit pattern: g_u = g + 2**64 when g < 0 (n < 2**62, so no overflow)
    return (torch.remainder(g, n) + torch.where(g < 0, (1 << 64) % n, 0)) % n


def capture(tensor: torch.Tensor, key: int, rep: int, leaf: int, samples: int) -> torch.Tensor:
    """The capture of `tensor` (any device, strides, supported dtype) as a CPU float64 vector."""
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"capture: unsupported dtype {tensor.dtype}")
    key &= MASK64
    flat = tensor.detach().to("cpu").reshape(-1).to(torch.float64)  # logical C order
    n = flat.numel()
    out = torch.zeros(samples + CAPTURE_EXTRA, dtype=torch.float64)
    pos = positions(key, rep, leaf, n, samples)
    taken = flat[pos.clamp(min=0)] if n else torch.zeros(samples, dtype=torch.float64)
    out[:samples] = torch.where(pos >= 0, taken, torch.full_like(taken, float("nan")))
    extra = out[samples:]
    for start in range(0, n, _CHUNK):
        x = flat[start:start + _CHUNK]
        s = signs(key, rep, leaf, torch.arange(start, start + x.numel(), dtype=torch.int64))
        finite = torch.isfinite(x)
        xf = torch.where(finite, x, torch.zeros_like(x))
        extra[PROJ:PROJ + PROJECTIONS] += (s * xf.unsqueeze(1)).sum(0)
        extra[SUM_ABS] += xf.abs().sum()
        extra[SUM_SQ] += (xf * xf).sum()
        nan, pinf, ninf = torch.isnan(x), x == float("inf"), x == float("-inf")
        extra[N_NAN] += nan.sum()
        extra[N_POSINF] += pinf.sum()
        extra[N_NEGINF] += ninf.sum()
        code = nan.to(torch.float64) + 2 * pinf.to(torch.float64) + 3 * ninf.to(torch.float64)
        extra[NONFINITE_PROJ] += (s[:, 0] * code).sum()
    extra[NUMEL] = n
    return out
