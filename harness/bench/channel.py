"""`harness bench eval --part channel`: one output from a worker-like child's GPU to the parent's GPU.

This is the path every correctness trial's and every sampled timed repetition's outputs take across
the trust boundary (`eval.crossing.wire`). Three ways, side by side in one run, each with its own child and
regions: pageable regions with the receiver's copy made on the CPU and then moved to the GPU (the
channel before pinning), pageable regions copied straight to the GPU, and pinned regions copied
straight to the GPU (the channel as shipped). Each row: the median over `reps` frames of the time from
the request to the tensor being on the parent's GPU, and the bytes per second that gives.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from eval import Channel, new_region_fd

WAYS = {"pageable, copied on the CPU, then to the GPU": (False, "cpu"),
        "pageable, straight to the GPU": (False, "cuda"),
        "pinned, straight to the GPU (shipped)": (True, "cuda")}


def _child(read_fd: int, write_fd: int, send_fd: int, recv_fd: int, pin: bool, elements: int) -> None:
    channel = Channel(read_fd, write_fd, send_fd=send_fd, recv_fd=recv_fd, pin=pin)
    out = torch.randn(elements, device="cuda")
    torch.cuda.synchronize()
    while True:
        header, _ = channel.recv()
        if header.get("stop"):
            return
        channel.send({"ok": True}, [out])


def _one_way(pin: bool, onto: str, elements: int, reps: int) -> list[float]:
    c2p_r, c2p_w = os.pipe()
    p2c_r, p2c_w = os.pipe()
    to_child, to_parent = new_region_fd(), new_region_fd()
    if to_child is None or to_parent is None:
        raise RuntimeError("this system has no memfds: the channel has no shared-memory regions to measure")
    fds = (p2c_r, c2p_w, to_parent, to_child)
    child = subprocess.Popen([sys.executable, "-m", "harness.bench.channel", *map(str, fds), str(int(pin)), str(elements)],
                             pass_fds=fds)
    os.close(p2c_r)  # the child's pipe ends; the regions' memfds stay open here, for this side's mappings
    os.close(c2p_w)
    channel = Channel(c2p_r, p2c_w, send_fd=to_child, recv_fd=to_parent, pin=pin)
    times = []
    try:
        for _ in range(reps + 2):  # the first two grow and map the regions
            t0 = time.perf_counter()
            channel.send({"go": True})
            _, (got,) = channel.recv(timeout=120, device=onto)
            if onto == "cpu":
                got = got.to("cuda")
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1000.0)
            del got
        channel.send({"stop": True})
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
        channel.close()
    return times[2:]


def run(elements: int = 1 << 26, reps: int = 10) -> dict[str, Any]:
    """Median ms and GB/s per way, for one fp32 output of `elements` elements."""
    torch.zeros(1, device="cuda")
    nbytes = elements * 4
    rows = {}
    for name, (pin, onto) in WAYS.items():
        times = _one_way(pin, onto, elements, reps)
        median = statistics.median(times)
        rows[name] = {"median_ms": round(median, 2), "gb_per_s": round(nbytes / median / 1e6, 2),
                      "ms": [round(t, 2) for t in times]}
    return {"bytes": nbytes, "reps": reps, "ways": rows}


def print_table(report: dict[str, Any]) -> None:
    print(f"\nchannel: one fp32 output of {report['bytes'] / 1e6:.0f} MB from a child's GPU to the parent's GPU, "
          f"median of {report['reps']} frames")
    for name, row in report["ways"].items():
        print(f"  {name:48s} {row['median_ms']:8.2f} ms  {row['gb_per_s']:6.2f} GB/s")


if __name__ == "__main__":
    r, w, send, recv, pin_flag, n = (int(a) for a in sys.argv[1:7])
    _child(r, w, send, recv, bool(pin_flag), n)
