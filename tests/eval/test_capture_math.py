"""eval/crossing/_capture.py, the specification of output captures, on CPU tensors."""

from __future__ import annotations

import math

import pytest
import torch

from eval.crossing import _capture as C

KEY = 0xF00DFACE12345678


def test_splitmix64_matches_the_reference_values_and_the_int_version() -> None:
    # SplitMix64 seeded with 0: the first outputs of the reference generator
    assert C.splitmix64_int(0) == 0xE220A8397B1DCDAF
    assert C.splitmix64_int(C.GOLDEN) == 0x6E789E6AA1B965F4
    z = torch.tensor([C._s64(v) for v in (0, 1, C.GOLDEN, C.MASK64, 1 << 63, 12345678901234567)], dtype=torch.int64)
    got = [v & C.MASK64 for v in C.splitmix64(z).tolist()]
    assert got == [C.splitmix64_int(v & C.MASK64) for v in z.tolist()]


def test_layout_constants() -> None:
    assert C.CAPTURE_EXTRA == 16 and C.NUMEL == 14 and C.NONFINITE_PROJ == 13


def test_positions_are_unsigned_mod_n() -> None:
    n, s = 1000, 64
    rl = C.rep_leaf_seed(3, 1)
    expect = [C.splitmix64_int(KEY ^ C.SAMPLE_SALT ^ rl ^ j) % n for j in range(s)]
    assert C.positions(KEY, 3, 1, n, s).tolist() == expect


def test_small_tensor_samples_every_element_then_nan() -> None:
    x = torch.arange(5, dtype=torch.float32)
    cap = C.capture(x, KEY, 0, 0, samples=8)
    assert cap[:5].tolist() == [0, 1, 2, 3, 4]
    assert all(math.isnan(v) for v in cap[5:8].tolist())
    assert cap.shape == (8 + C.CAPTURE_EXTRA,) and cap.dtype == torch.float64


def test_hand_checked_example() -> None:
    x = torch.tensor([1.0, -2.0, float("nan"), float("inf"), float("-inf")], dtype=torch.float64)
    key, rep, leaf, s = 7, 2, 1, 4
    cap = C.capture(x, key, rep, leaf, s)
    rl = C.splitmix64_int((rep * C.GOLDEN + leaf * C.MIX1) & C.MASK64)
    h = [C.splitmix64_int(key ^ rl ^ i) for i in range(5)]
    sign = [[-1.0 if (hi >> k) & 1 else 1.0 for k in range(8)] for hi in h]
    extra = cap[s:].tolist()
    for k in range(8):
        assert extra[C.PROJ + k] == sign[0][k] * 1.0 + sign[1][k] * -2.0
    assert extra[C.SUM_ABS] == 3.0 and extra[C.SUM_SQ] == 5.0
    assert extra[C.N_NAN] == 1 and extra[C.N_POSINF] == 1 and extra[C.N_NEGINF] == 1
    assert extra[C.NONFINITE_PROJ] == sign[2][0] * 1 + sign[3][0] * 2 + sign[4][0] * 3
    assert extra[C.NUMEL] == 5 and extra[15] == 0
    assert C.positions(key, rep, leaf, 5, s).tolist() == [
        C.splitmix64_int(key ^ C.SAMPLE_SALT ^ rl ^ j) % 5 for j in range(s)]  # n > S: drawn positions


@pytest.mark.parametrize("dtype", C.SUPPORTED_DTYPES)
def test_views_capture_like_their_contiguous_copy(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    base = (torch.randn(6, 10, 12, generator=g) * 50).to(dtype)
    for view in (base.transpose(0, 2), base[:, ::3, 1:], base.permute(1, 2, 0)[2:5], base.expand(2, 6, 10, 12),
                 base[1, 2, 3]):
        a = C.capture(view, KEY, 5, 2, samples=100)
        b = C.capture(view.contiguous(), KEY, 5, 2, samples=100)
        assert torch.equal(a.nan_to_num(7.5), b.nan_to_num(7.5))


def test_one_changed_element_moves_its_sample_and_each_projection_by_delta() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4000, generator=g, dtype=torch.float64)
    s, rep, leaf = 256, 9, 0
    pos = C.positions(KEY, rep, leaf, x.numel(), s)
    for i in (int(pos[17]), 3999 if 3999 not in pos.tolist() else 3998):
        y = x.clone()
        delta = 0.5
        y[i] += delta
        a, b = C.capture(x, KEY, rep, leaf, s), C.capture(y, KEY, rep, leaf, s)
        sampled = (pos == i)
        assert torch.equal((b[:s] != a[:s]), sampled)
        sign = C.signs(KEY, rep, leaf, torch.tensor([i]))[0]
        diff = b[s + C.PROJ:s + C.PROJ + 8] - a[s + C.PROJ:s + C.PROJ + 8]
        assert torch.allclose(diff, sign * delta, rtol=0, atol=1e-9)


def test_projections_depend_on_the_key_rep_and_leaf() -> None:
    x = torch.ones(100)
    # (a key differing only in bits below log2(n) would permute the indices: h(i) hashes key ^ rl ^ i)
    other = KEY ^ (1 << 40)
    caps = [C.capture(x, k, r, l, 8)[8:16] for k, r, l in ((KEY, 0, 0), (other, 0, 0), (KEY, 1, 0), (KEY, 0, 1))]
    for i in range(len(caps)):
        for j in range(i + 1, len(caps)):
            assert not torch.equal(caps[i], caps[j])


def test_nonfinite_counts_and_large_tensors_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.zeros(1000, dtype=torch.float16)
    x[[3, 500]] = float("nan")
    x[7] = float("inf")
    x[[8, 9, 10]] = float("-inf")
    x[11] = 65504
    whole = C.capture(x, KEY, 0, 0, 16)
    monkeypatch.setattr(C, "_CHUNK", 77)
    chunked = C.capture(x, KEY, 0, 0, 16)
    extra = whole[16:].tolist()
    assert extra[C.N_NAN] == 2 and extra[C.N_POSINF] == 1 and extra[C.N_NEGINF] == 3
    assert extra[C.SUM_ABS] == 65504 and extra[C.SUM_SQ] == 65504.0 ** 2 and extra[C.NUMEL] == 1000
    assert torch.allclose(whole[16:], chunked[16:], rtol=1e-12, atol=0)


def test_empty_and_unsupported() -> None:
    cap = C.capture(torch.empty(0, 3), KEY, 0, 0, 4)
    assert torch.isnan(cap[:4]).all() and cap[4:].tolist() == [0.0] * 16
    with pytest.raises(TypeError):
        C.capture(torch.zeros(2, dtype=torch.complex64), KEY, 0, 0, 4)


def test_negative_rep_wraps_mod_2_64() -> None:
    assert C.rep_leaf_seed(-1, 0) == C.splitmix64_int((C.MASK64 * C.GOLDEN) & C.MASK64)
    C.capture(torch.ones(3), KEY, -4, 0, 2)
