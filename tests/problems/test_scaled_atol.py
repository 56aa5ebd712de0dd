"""Off the published distribution the absolute tolerance follows the outputs' scale (`problems._compare.scaled_atol`).

The class: an honest kernel that sums large terms in another order than the reference (CUDA-L1's L3/50 fallback)
has rounding errors that grow with its inputs, like its outputs do. With inputs scaled by 4 the fp32 reference
itself missed the exact answer by 4.4 times KernelBench's 1e-4, so a fixed atol rejected the honest kernel. The
defence asserted: atol grows with the mean |output|, never shrinks, and never passes an error over 1 % of it."""

from __future__ import annotations

import math

import torch

from problems._compare import compare, magnitude, scaled_atol


def test_magnitude_is_the_mean_absolute_value_of_the_finite_elements():
    assert magnitude(torch.tensor([1.0, -3.0, float("nan"), float("inf")])) == 2.0
    assert magnitude(torch.tensor([1, -3])) == 0.0  # integers: exact, no tolerance to scale
    assert magnitude(torch.empty(0)) == 0.0


def test_atol_grows_with_the_outputs_and_never_shrinks():
    assert scaled_atol(1e-4, [2.0, 2.0], [128.0, 1.0]) == [1e-4 * 64, 1e-4]


def test_atol_never_passes_more_than_one_percent_of_the_trials_outputs():
    grown = scaled_atol(1e-4, [1e-9], [5.0])[0]  # published outputs near 0: the ratio alone would be 5e9
    assert math.isclose(grown, 0.01 * 5.0)
    assert scaled_atol(1e-4, [0.0], [0.0]) == [1e-4]


def test_a_sum_reordered_passes_scaled_and_a_wrong_answer_still_fails():
    """Sums of cubes, in 64-element pieces against torch's own order: within atol on published inputs, 64 times
    further off with the inputs scaled by 4, and within the grown atol there."""
    torch.manual_seed(0)
    x = torch.randn(256, 1024)

    def chunked(t: torch.Tensor) -> torch.Tensor:
        return sum((t[:, j:j + 64] ** 3).sum(-1) for j in range(0, t.shape[1], 64))

    atol = 1e-3
    assert compare([(x ** 3).sum(-1)], [chunked(x)], atol, 0.0) is None
    x4 = x * 4
    expected, honest = [(x4 ** 3).sum(-1)], [chunked(x4)]
    assert compare(expected, honest, atol, 0.0) is not None, "the case needs a fixed atol to fail"
    grown = scaled_atol(atol, [magnitude((x ** 3).sum(-1))], [magnitude(expected[0])])
    assert compare(expected, honest, grown, 0.0) is None
    shortcut = [expected[0] * 1.02]  # 2 % off: far beyond rounding
    assert compare(expected, shortcut, grown, 0.0) is not None
