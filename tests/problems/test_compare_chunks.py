"""Comparisons walk outputs in bounded pieces: the same verdicts as over whole tensors, and scratch
memory bounded by the piece, not the output (a whole float64 copy of a multi-GB output ran an H100
out of memory)."""

from __future__ import annotations

import math
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import problems._compare as compare_module
import problems.lint as lint
from problems._compare import compare, compare_scratch_bytes, describe_structure

_PIECE = 7  # tiny, so every case spans several pieces
_WHOLE = 1 << 30  # larger than any tensor here: one piece, the unchunked result


class _NewBytes(TorchDispatchMode):
    """Peak bytes of the storages ops allocate and keep alive (views of `existing` tensors are not new)."""

    def __init__(self, *existing: torch.Tensor) -> None:
        super().__init__()
        self._existing = {t.untyped_storage().data_ptr() for t in existing}
        self._refs: dict[int, int] = {}
        self.current = self.peak = 0

    def _drop(self, ptr: int, nbytes: int) -> None:
        self._refs[ptr] -= 1
        if not self._refs[ptr]:
            del self._refs[ptr]
            self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            if ptr in self._existing:
                continue
            if ptr not in self._refs:
                self._refs[ptr] = 0
                self.current += nbytes
            self._refs[ptr] += 1
            weakref.finalize(t, self._drop, ptr, nbytes)
        self.peak = max(self.peak, self.current)
        return out


def _planted(base: torch.Tensor, changes: dict[int, float]) -> torch.Tensor:
    out = base.clone()
    for flat, value in changes.items():
        out.view(-1)[flat] = value
    return out


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    e = torch.randn(6, 9, generator=g)  # 54 elements: 8 pieces of 7
    nan, inf = float("nan"), float("inf")
    ties = _planted(e, {3: 0.5, 30: 0.25})
    big = torch.full((4, 5), 2**60, dtype=torch.int64)
    ints = torch.randint(-5, 5, (6, 9), generator=g)
    return {
        "match": (e, e + 1e-6),
        "NaN in a late piece": (e, _planted(e, {50: nan})),
        "NaN in the reference, values off elsewhere": (_planted(e, {3: nan}), _planted(e, {3: nan, 20: 9.0})),
        "Inf sign flipped": (_planted(e, {40: inf}), _planted(e, {40: -inf})),
        "Inf where the reference is finite": (e, _planted(e, {12: inf, 45: inf})),
        "values off in several pieces": (e, _planted(e, {2: e.view(-1)[2] + 0.5, 20: 7.0, 47: -3.0})),
        "equal worst errors in two pieces": (ties, _planted(ties, {3: 1.5, 30: 1.25})),
        "int": (ints, _planted(ints, {5: 9, 33: -9})),
        "int64 past 2**53": (big, _planted(big, {17: 2**60 + 1})),
        "0-d": (torch.tensor(1.0), torch.tensor(2.0)),
        "0-d NaN": (torch.tensor(1.0), torch.tensor(nan)),
        "transposed reference": (e.t(), _planted(e.t().contiguous(), {8: 5.0, 50: 5.0})),
        "expanded reference": (e[:1].expand(6, 9), _planted(e[:1].expand(6, 9).contiguous(), {41: 3.0})),
        "float16": (e.half(), _planted(e.half(), {29: 4.0, 53: -inf})),
        "float8, transposed": (e.to(torch.float8_e4m3fn).t(),
                               _planted(e.t().contiguous(), {9: 3.0}).to(torch.float8_e4m3fn)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_chunked_compare_equals_the_whole_tensor_compare(monkeypatch, name):
    expected, got = _cases()[name]
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", _WHOLE)
    whole = compare([expected], [got], 1e-4, 1e-4)
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", _PIECE)
    chunked = compare([expected], [got], 1e-4, 1e-4)
    assert repr(chunked) == repr(whole)  # every field; repr, as NaN != NaN
    assert (whole is None) == (name == "match")


def test_chunked_compare_picks_the_first_of_equal_worst_errors(monkeypatch):
    expected, got = _cases()["equal worst errors in two pieces"]
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", _PIECE)
    mismatch = compare([expected], [got], 1e-4, 1e-4)
    assert mismatch.worst_index == [0, 3] and mismatch.max_abs_err == 1.0
    assert mismatch.mismatch_fraction == 2 / 54


@pytest.mark.parametrize("plant", ["none", "inf", "values", "transposed reference"])
def test_compare_scratch_is_bounded_by_the_piece_not_the_output(monkeypatch, plant):
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", 1 << 14)
    expected = torch.randn(1 << 20, generator=torch.Generator().manual_seed(1))
    changes = {"none": {}, "inf": {1_000_000: float("inf")}, "values": {10: 5.0, 750_000: 6.0},
               "transposed reference": {5: 5.0}}[plant]
    got = _planted(expected, changes)
    if plant == "transposed reference":  # read piece by piece too, not copied whole
        expected = expected.reshape(1024, 1024).t()
        got = _planted(expected.contiguous(), changes)
    with _NewBytes(expected, got) as seen:
        mismatch = compare([expected], [got], 1e-4, 1e-4)
    assert (mismatch is None) == (plant == "none")
    # 64 pieces, as at full size: 1.6 MB; a float64 copy of the output alone is 8.4 MB
    assert seen.peak <= compare_scratch_bytes(expected.numel())


def _lint_results(a: torch.Tensor, b: torch.Tensor) -> tuple:
    """What lint's checks compute from a pair of outputs, `b` the expected one."""
    return (lint._excess(a, b, 1e-4, 1e-4), lint._identical(a, b), lint._identical(b, b),
            lint._all_finite(a), lint._all_finite(b), lint._finite_mean(b), lint._finite_median(b))


@pytest.mark.parametrize("transposed", [False, True])
def test_lint_comparisons_equal_the_whole_tensor_ones(monkeypatch, transposed):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(40, 30, generator=g)
    b = _planted(a + 1e-3 * torch.randn(40, 30, generator=g), {7: float("nan"), 900: float("inf")})
    if transposed:
        a, b = a.t(), b.t()
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", _WHOLE)
    whole = _lint_results(a, b)
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", _PIECE)
    chunked = _lint_results(a, b)
    assert chunked[:5] == whole[:5] and chunked[6] == whole[6]
    assert chunked[5] == pytest.approx(whole[5], rel=1e-12)  # the mean: summed in another order
    finite = b[torch.isfinite(b)].double()
    assert whole[5] == pytest.approx(float(finite.mean()), rel=1e-12)
    assert whole[6] == float(b[torch.isfinite(b)].median())  # exact below _MEDIAN_SAMPLE


def test_median_of_a_large_output_is_that_of_an_evenly_strided_sample(monkeypatch):
    t = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(lint, "_MEDIAN_SAMPLE", 100)
    assert lint._finite_median(t) == float(t[::10].median())
    assert lint._finite_median(torch.empty(0)) == 0.0


def test_lint_comparisons_scratch_is_bounded(monkeypatch):
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", 1 << 14)
    monkeypatch.setattr(lint, "_MEDIAN_SAMPLE", 1 << 14)
    g = torch.Generator().manual_seed(4)
    a = torch.randn(1 << 20, generator=g)
    b = a + 1e-3 * torch.randn(1 << 20, generator=g)
    with _NewBytes(a, b) as seen:
        _lint_results(a, b)
        lint._check_deterministic([a], [b], 1e-4, 1e-4)
    assert seen.peak <= compare_scratch_bytes(a.numel())
    assert not math.isnan(lint._finite_mean(b))


def test_a_structure_is_described_in_words() -> None:
    assert describe_structure("<int>") == "a value of type int"
    assert describe_structure("") == "nothing it described"
    assert describe_structure("[" + "tensor, " * 100 + "]").endswith("...")


@pytest.mark.parametrize("name", list(_cases()))
def test_the_one_pass_check_finds_a_mismatch_exactly_where_a_rule_does(monkeypatch, name):
    """`compare` first asks every rule at once, in one pass (one float64 copy, one wait), and only where one fires
    asks them in order for the reason: the one pass must fire exactly where some rule fires on its own."""
    monkeypatch.setattr(compare_module, "_CHUNK_ELEMENTS", _PIECE)
    expected, got = _cases()[name]
    rules = compare_module._rules(expected, 1e-4, 1e-4)
    for _, (e, o) in compare_module.flat_chunks(expected, got):
        alone = any(bool(rule(e, o)[0].any()) for _, rule in rules)
        assert compare_module._any_fires(rules, e, o) == alone
    assert (compare([expected], [got], 1e-4, 1e-4) is None) == (name == "match")
