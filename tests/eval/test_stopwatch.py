"""The parent's stopwatch for timed blocks (`eval.crossing._stopwatch`, `wire.Channel.exchange_timed`).

The wall time the parent bounds a worker's report by runs from the request's first byte written to the reply's last
byte read. The defence asserted here: a thread of the parent that holds the GIL while a reply arrives adds nothing to
that interval (with four evaluations in one parent, such waits rejected honest candidates); and a worker that sends
its reply late, or in pieces, cannot end the interval before its last byte.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from eval.crossing.wire import PREFIX, Channel, ChannelClosed, ChannelTimeout, ProtocolError, new_region_fd

# A replier in its own process (so its timing owes nothing to this process's GIL): once up it writes one byte (read
# before any exchange, so that its start-up on a loaded machine is never inside a timed interval), reads one request
# frame, reads one byte from the gate argv[7] if it has one, waits argv[3] s, writes the first argv[4] bytes of its
# reply, waits argv[5] s, writes the rest, then waits to be closed.
REPLIER = r"""
import os, sys, time
r, w, first_wait, split, second_wait = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
reply, gate = bytes.fromhex(sys.argv[6]), int(sys.argv[7])
os.write(w, b"!")
def read(n):
    got = b""
    while len(got) < n:
        chunk = os.read(r, n - len(got))
        if not chunk:
            sys.exit(0)
        got += chunk
    return got
n, _ = __import__("struct").unpack(">IQ", read(12))
read(n)
if gate >= 0:
    os.read(gate, 1)
time.sleep(first_wait)
os.write(w, reply[:split])
time.sleep(second_wait)
os.write(w, reply[split:])
os.read(r, 1)
"""


def _reply(tensors: list[torch.Tensor]) -> bytes:
    """The frame a worker sends for a timed reply carrying `tensors` (written through a real channel)."""
    r, w = os.pipe()
    sender = Channel(r, w)
    sender.send({"cmd": "time_block", "ok": True}, tensors, in_frame=True)
    data = os.read(r, 1 << 20)
    sender.close()
    return data


class Replier:
    """A child process on the other end of a channel, answering one request with `reply`."""

    def __init__(self, reply: bytes, first_wait: float = 0.0, split: int | None = None, second_wait: float = 0.0,
                 gate: int = -1):
        """`gate`: a pipe's read end; the replier answers only once a byte has come through it."""
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", REPLIER, str(to_child_r), str(to_parent_w), str(first_wait),
             str(len(reply) if split is None else split), str(second_wait), reply.hex(), str(gate)],
            pass_fds=(to_child_r, to_parent_w, *([gate] if gate >= 0 else [])))
        os.close(to_child_r)
        os.close(to_parent_w)
        assert os.read(to_parent_r, 1) == b"!", "the replier did not start"
        self.channel = Channel(to_parent_r, to_child_w)

    def close(self) -> None:
        self.channel.close()
        self.proc.wait(timeout=60)


def test_a_timed_exchange_returns_the_reply_and_the_wall_time_of_the_whole_frame() -> None:
    captures = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4)
    replier = Replier(_reply([captures]), first_wait=0.3)
    try:
        header, tensors, wall_ms = replier.channel.exchange_timed({"cmd": "time_block"}, timeout=600)
    finally:
        replier.close()
    assert header == {"cmd": "time_block", "ok": True}
    assert len(tensors) == 1 and torch.equal(tensors[0], captures)
    assert wall_ms >= 300  # the replier waited 0.3 s before answering: that is inside the interval


def test_a_reply_sent_in_pieces_ends_the_interval_at_its_last_byte() -> None:
    """A worker that writes the start of its reply at once and the rest after more work cannot have the parent stop
    its stopwatch early: the interval ends when the frame is whole."""
    reply = _reply([torch.ones(3, 5, dtype=torch.float64)])
    for split in (6, PREFIX.size + 4, len(reply) - 1):  # inside the prefix, inside the header, inside the tensors
        replier = Replier(reply, split=split, second_wait=0.4)
        try:
            _, tensors, wall_ms = replier.channel.exchange_timed({"cmd": "time_block"}, timeout=600)
        finally:
            replier.close()
        assert torch.equal(tensors[0], torch.ones(3, 5, dtype=torch.float64))
        assert wall_ms >= 400, split


def test_a_thread_holding_the_gil_while_the_reply_arrives_adds_nothing_to_the_wall_time() -> None:
    """Another thread of the parent takes the GIL as the request goes out and keeps it for 3 s; the reply arrives at
    once. The exchange returns only after those 3 s (it needs the GIL back), but its wall time does not hold them.

    The replier answers only once the hog holds the GIL (the hog opens its gate through a libc `write` called without
    letting the GIL go), so a loaded machine that schedules the hog late cannot let the reply in first."""
    hold_s = 3.0
    gate_r, gate_w = os.pipe()
    replier = Replier(_reply([]), gate=gate_r)
    os.close(gate_r)
    go = threading.Event()
    write_holding_the_gil = ctypes.PyDLL(None).write  # a PyDLL call keeps the GIL; os.write would let it go

    def hog() -> None:
        go.wait()
        write_holding_the_gil(gate_w, b"!", 1)
        end = time.perf_counter() + hold_s
        while time.perf_counter() < end:  # pure Python: keeps the GIL for the whole switch interval
            pass

    interval = sys.getswitchinterval()
    thread = threading.Thread(target=hog)
    thread.start()
    try:
        sys.setswitchinterval(30.0)  # the hog is never asked to let go before it is done
        t0 = time.perf_counter()
        go.set()  # the hog gets the GIL when this thread enters the native call below
        _, _, wall_ms = replier.channel.exchange_timed({"cmd": "time_block"}, timeout=600)
        observed_ms = (time.perf_counter() - t0) * 1000
    finally:
        sys.setswitchinterval(interval)
        thread.join()
        replier.close()
        os.close(gate_w)
    assert observed_ms >= hold_s * 1000 * 0.95  # the hog did hold the GIL while the reply came in
    assert wall_ms < hold_s * 1000 / 2  # and none of that wait is in the wall time


def test_a_timed_reply_must_carry_its_tensors_in_its_frame() -> None:
    """Bytes in the shared region could still change after the stopwatch stops: a timed reply that puts its tensors
    there is refused."""
    to_a_r, to_a_w = os.pipe()
    to_b_r, to_b_w = os.pipe()
    region = new_region_fd()
    if region is None:
        pytest.skip("this platform has no memfd, so channels have no shared region")
    a = Channel(to_a_r, to_b_w, recv_fd=os.dup(region))
    b = Channel(to_b_r, to_a_w, send_fd=region)
    try:
        b.send({"cmd": "time_block", "ok": True}, [torch.ones(4)])  # through the region
        with pytest.raises(ProtocolError, match="shared region, not in its frame"):
            a.exchange_timed({"cmd": "time_block"}, timeout=600)
    finally:
        a.close()
        b.close()


def test_a_timed_reply_announcing_too_much_is_refused_before_anything_is_allocated() -> None:
    to_a_r, to_a_w = os.pipe()
    to_b_r, to_b_w = os.pipe()
    a = Channel(to_a_r, to_b_w)
    os.write(to_a_w, PREFIX.pack(2, 1 << 40) + b"{}")
    try:
        with pytest.raises(ProtocolError, match="tensor bytes"):
            a.exchange_timed({"cmd": "time_block"}, timeout=600)
    finally:
        a.close()
        for fd in (to_a_w, to_b_r):
            os.close(fd)


def test_no_reply_is_a_timeout_and_a_closed_end_is_closed() -> None:
    to_a_r, to_a_w = os.pipe()
    to_b_r, to_b_w = os.pipe()
    a = Channel(to_a_r, to_b_w)
    try:
        with pytest.raises(ChannelTimeout):
            a.exchange_timed({"cmd": "time_block"}, timeout=0.2)
        os.close(to_a_w)
        with pytest.raises(ChannelClosed):
            a.exchange_timed({"cmd": "time_block"}, timeout=600)
    finally:
        a.close()
        os.close(to_b_r)
