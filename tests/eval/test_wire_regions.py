"""Tensors through the channel's shared-memory regions: exact bytes across region growth, private copies,
and, on a GPU, pinned mappings copied straight onto the device (`eval.crossing.wire`)."""

from __future__ import annotations

import os

import pytest
import torch

from eval.crossing.wire import PIN_MAX_BYTES, Channel, new_region_fd

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _region_pair() -> tuple[Channel, Channel]:
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    a_to_b, b_to_a = new_region_fd(), new_region_fd()
    assert a_to_b is not None and b_to_a is not None, "this Linux has memfds"
    return (Channel(r1, w2, send_fd=a_to_b, recv_fd=b_to_a), Channel(r2, w1, send_fd=b_to_a, recv_fd=a_to_b))


def _frames(device: str) -> list[list[torch.Tensor]]:
    """Frames whose regions must grow (16 MB steps) and whose bytes differ from frame to frame."""
    g = torch.Generator(device=device).manual_seed(7)
    sizes = [1 << 10, 5 << 20, 1 << 10, 9 << 20, 3 << 20]  # elements; the region grows, then is reused
    return [[torch.randn(n, generator=g, device=device), torch.randint(0, 100, (n // 3 + 1,), generator=g, device=device)]
            for n in sizes]


def test_region_frames_arrive_exact_across_growth_and_stay_private() -> None:
    a, b = _region_pair()
    kept = []
    for frame in _frames("cpu"):
        a.send({"cmd": "x"}, frame)
        _, got = b.recv(timeout=10)
        for sent, received in zip(frame, got):
            assert torch.equal(sent, received)
        kept.append((frame, got))
    for frame, got in kept:  # later frames rewrote the region: what was received earlier is unchanged
        assert all(torch.equal(s, r) for s, r in zip(frame, got))
    a.close()
    b.close()


@pytest.mark.gpu
@gpu
def test_gpu_frames_are_pinned_exact_and_private_on_the_device() -> None:
    torch.zeros(1, device="cuda")  # CUDA initialised: the mappings are registered
    a, b = _region_pair()
    kept = []
    for frame in _frames("cuda"):
        a.send({"cmd": "x"}, frame)
        _, got = b.recv(timeout=10, device="cuda")
        assert all(r.device.type == "cuda" for r in got)
        for sent, received in zip(frame, got):
            assert torch.equal(sent, received)
        assert a._send_region.pinned and b._recv_region.pinned
        kept.append((frame, got))
    for frame, got in kept:  # every mapping was unregistered before it was replaced; no copy reads old pages
        assert all(torch.equal(s, r) for s, r in zip(frame, got))
    big = torch.arange((PIN_MAX_BYTES // 4) + (1 << 20), dtype=torch.float32, device="cuda")
    a.send({"cmd": "big"}, [big])  # over the cap: both mappings are remade pageable, the bytes still exact
    _, (got,) = b.recv(timeout=60, device="cuda")
    assert torch.equal(got, big)
    assert not a._send_region.pinned and not b._recv_region.pinned
    a.close()
    b.close()
