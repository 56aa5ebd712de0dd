"""`harness bench eval --part stopwatch`: what the parent's other threads add to a timed block's wall time.

The parent bounds a worker's reported times by the wall time it observes for each timed block
(`wire.Channel.exchange_timed`, `eval.crossing._stopwatch`); anything else of the parent that lands inside that interval
makes an honest candidate look as if it hid work. Here a child answers each timed request at once, so the wall time
is all overhead. It is read with the parent quiet, then with `busy` threads of pure Python work beside it (as other
evaluations in one parent are), alternating per round: the medians, 99th percentiles and largest of each.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
from typing import Any

from eval import Channel
from harness.progress import Tally


def _child(read_fd: int, write_fd: int) -> None:
    """Answer every request at once with an empty timed reply, until the parent closes its end."""
    channel = Channel(read_fd, write_fd)
    while True:
        try:
            channel.recv()
        except Exception:  # the parent closed the channel: done
            return
        channel.send({"cmd": "time_block", "ok": True}, [], in_frame=True)


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))  # pure Python: holds the GIL until the interpreter asks it to let go


def run(rounds: int = 20, per_round: int = 100, busy: int = 3) -> dict[str, Any]:
    """`rounds` rounds of `per_round` timed exchanges quiet and `per_round` beside `busy` busy threads."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    child = subprocess.Popen([sys.executable, "-m", "harness.bench.stopwatch", str(to_child_r), str(to_parent_w)],
                             pass_fds=(to_child_r, to_parent_w))
    os.close(to_child_r)
    os.close(to_parent_w)
    channel = Channel(to_parent_r, to_child_w)
    walls: dict[str, list[float]] = {"quiet": [], "busy": []}
    try:
        for _ in range(10):  # the child's start-up and the stopwatch's first build, outside the figures
            channel.exchange_timed({"cmd": "time_block"}, timeout=600)
        tally = Tally(rounds)
        for r in range(rounds):
            for kind in (("quiet", "busy") if r % 2 == 0 else ("busy", "quiet")):
                stop = threading.Event()
                threads = [threading.Thread(target=_busy, args=(stop,)) for _ in range(busy if kind == "busy" else 0)]
                for t in threads:
                    t.start()
                try:
                    for _ in range(per_round):
                        walls[kind].append(channel.exchange_timed({"cmd": "time_block"}, timeout=600)[2])
                finally:
                    stop.set()
                    for t in threads:
                        t.join()
            print(tally.step(), file=sys.stderr, flush=True)
    finally:
        channel.close()
        child.wait(timeout=60)
    summary = {kind: {"median_ms": round(statistics.median(w), 4),
                      "p99_ms": round(statistics.quantiles(w, n=100, method="inclusive")[98], 4),
                      "max_ms": round(max(w), 4)} for kind, w in walls.items()}
    return {"exchanges": rounds * per_round, "busy_threads": busy, "switch_interval_ms": sys.getswitchinterval() * 1e3,
            "wall_ms": summary}


def print_table(report: dict[str, Any]) -> None:
    print(f"stopwatch: {report['exchanges']} timed exchanges of each kind with a child that answers at once "
          f"(switch interval {report['switch_interval_ms']:g} ms); wall time in ms")
    print("| parent | median | p99 | max |\n|---|---:|---:|---:|")
    for kind, label in (("quiet", "quiet"), ("busy", f"{report['busy_threads']} busy Python threads")):
        w = report["wall_ms"][kind]
        print(f"| {label} | {w['median_ms']:.4f} | {w['p99_ms']:.4f} | {w['max_ms']:.4f} |")


if __name__ == "__main__":
    _child(int(sys.argv[1]), int(sys.argv[2]))
