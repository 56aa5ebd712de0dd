"""`harness bench observed-contexts`: does a trusted stream waiting on the GPU slow the candidate it times? (GPU)

Observed timing (`eval.timing.observed`, issue 52) read an honest memory-bound add 24 % slower than its own timing loop
on an H200 (23.6 against 17.9 µs a repetition), while the reference's own blocks agreed with the loop. The
hypothesis: while the timekeeper's stream waits for done on the GPU (`cuStreamWaitValue32`), its context holds
pending work, and the GPU time-slices between its context and the candidate's (no MPS). The reference's blocks
run in the timekeeper's own context, so they pay nothing. Per repetition of a 4M-element add, this prints:
- `alone`: the worker's own events, the timekeeper's context idle;
- `r_waits`: the same while the timekeeper's stream is blocked on a flag of its own (the hypothesis: slower);
- `dev_flags`: today's design, the timekeeper's events around go ... wait done (device flags), minus an empty
  window's time;
- `host_flags`: the alternative, timed by the timekeeper's CPU clock: go and done are words of host memory
  (a memfd both processes map and register with CUDA; a file descriptor crosses a sandbox where /dev/shm does
  not), the worker's stream waits on go and writes done, and the timekeeper's GPU context is idle throughout;
  minus an empty window's time;
- `host_done`: the timekeeper's GPU events kept, its stream idle inside the window: it writes go on the GPU as
  today, the worker's stream writes done into host memory, and the timekeeper's CPU, on seeing it, records END;
  minus an empty window's time;
- `ipc_alone`: as `alone`, the adds reading and writing memory the timekeeper exported (CUDA IPC), as a candidate's
  block reads its inputs from the exported buffer (`alone` uses the worker's own allocations).
If `r_waits` is slower than `alone` and `host_flags` agrees with it, the timekeeper should wait on the CPU.
"""

from __future__ import annotations

import ctypes
import functools
import json
import mmap
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from eval import ExportedBuffer, ImportedBuffer, wait_flag, write_flag

N = 4 * 1024 * 1024
REPS = 64
BLOCKS = 15
FLAGS_BYTES = 4096
u64 = ctypes.c_uint64


@functools.cache
def _driver() -> ctypes.CDLL:
    """The CUDA driver, its calls typed (loaded on first use: the module imports on a machine without CUDA)."""
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cuMemHostGetDevicePointer_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_void_p, ctypes.c_uint]
    return lib


def _check(rc: int, what: str) -> None:
    if rc:
        raise RuntimeError(f"{what}: CUresult {rc}")


def _host_words(fd: int) -> tuple[mmap.mmap, ctypes.Array, int]:
    """A page of the memfd `fd`, mapped here and registered with CUDA: (the map, its words, its device pointer)."""
    m = mmap.mmap(fd, 4096)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    _check(_driver().cuMemHostRegister_v2(addr, 4096, 0x1 | 0x2), "cuMemHostRegister")  # PORTABLE | DEVICEMAP
    dptr = u64()
    _check(_driver().cuMemHostGetDevicePointer_v2(ctypes.byref(dptr), addr, 0), "cuMemHostGetDevicePointer")
    words = (ctypes.c_uint32 * 1024).from_buffer(m)
    return m, words, dptr.value


def _spin(us: float) -> None:
    torch.cuda._sleep(int(us * 1980))  # ~cycles per µs on an H200 (approx; only a lead)


def worker() -> None:
    """The worker's side: each command a block of adds behind its kind's start, timed by its own events."""
    fd = int(sys.argv[2])  # argv: worker FD
    torch.zeros(1, device="cuda")
    m, words, dptr = _host_words(fd)
    a, b = torch.randn(REPS, N, device="cuda"), torch.randn(REPS, N, device="cuda")
    c = torch.empty(REPS, N, device="cuda")
    s = torch.cuda.Stream()
    dev, shared = None, None
    for line in sys.stdin:
        cmd = json.loads(line)
        reps = cmd["reps"]
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        x, y, z = a, b, c
        if cmd["kind"] == "ipc_alone":
            if shared is None:  # the operands in the timekeeper's exported memory
                shared = ImportedBuffer(cmd["operands"], 3 * REPS * N * 4)
            x, y, z = shared.tensor.view(torch.float32).view(3, REPS, N)
        with torch.cuda.stream(s):
            if cmd["kind"] in ("alone", "ipc_alone"):
                _spin(3000)
            elif cmd["kind"] in ("dev", "host_done"):
                if dev is None:  # the flags in the timekeeper's device memory, as observed timing opens them
                    opened = ImportedBuffer(cmd["handle"], FLAGS_BYTES)
                    dev = opened.ptr
                wait_flag(s, dev, cmd["seq"])
            else:  # host
                wait_flag(s, dptr, cmd["seq"])
            ev[0].record(s)
            for r in range(reps):
                torch.add(x[r], y[r], out=z[r])
            ev[1].record(s)
            if cmd["kind"] == "dev":
                write_flag(s, dev + 128, cmd["seq"])
            elif cmd["kind"] not in ("alone", "ipc_alone"):  # host, host_done
                write_flag(s, dptr + 128, cmd["seq"])
        print(json.dumps({"enqueued": True}), flush=True)
        s.synchronize()
        print(json.dumps({"own_us": ev[0].elapsed_time(ev[1]) * 1000}), flush=True)


class _Timekeeper:
    """The timekeeper's side of the experiment, one object so that each way of timing a block is a method: the
    worker it started, the flags it shares with it (host words of a memfd, and device memory it exported), the
    operands it exported, its own stream, and the sequence number of the last window (each window's flags carry a
    fresh one, so that no flag left from an earlier window releases the next)."""

    def __init__(self) -> None:
        fd = os.memfd_create("flags")
        os.ftruncate(fd, 4096)
        self.host_map, self.words, _ = _host_words(fd)  # the map kept: the words live in it
        self.w = subprocess.Popen([sys.executable, "-m", "harness.bench.observed_contexts", "worker", str(fd)],
                                  pass_fds=(fd,), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.flags = ExportedBuffer(FLAGS_BYTES)  # kept while the worker runs: its device flags live in it
        self.flags.tensor.zero_()
        torch.cuda.synchronize()
        self.devmem, self.hexh = self.flags.ptr, self.flags.handle
        self.operands = ExportedBuffer(3 * REPS * N * 4)
        self.operands.tensor.view(torch.float32).normal_()
        torch.cuda.synchronize()
        self.rs = torch.cuda.Stream()
        self.seq = 0

    def ask(self, cmd: dict[str, Any]) -> None:
        """Send the worker a block, and read its reply that the block is enqueued (it runs once its start comes)."""
        self.w.stdin.write(json.dumps(cmd) + "\n")
        self.w.stdin.flush()
        json.loads(self.w.stdout.readline())

    def own(self) -> float:
        """The block's time in µs by the worker's own events, once it has run."""
        return json.loads(self.w.stdout.readline())["own_us"]

    def alone(self, reps: int) -> float:
        """A block by the worker's own events, the timekeeper's context idle."""
        self.ask({"kind": "alone", "reps": reps})
        return self.own()

    def ipc_alone(self, reps: int) -> float:
        """As `alone`, on the operands the timekeeper exported (as a candidate's block reads its inputs)."""
        self.ask({"kind": "ipc_alone", "reps": reps, "operands": self.operands.handle})
        return self.own()

    def r_waits(self, reps: int) -> float:
        """As `alone`, while the timekeeper's stream is blocked on a flag of its own (released once the block ran)."""
        self.seq += 1
        with torch.cuda.stream(self.rs):
            wait_flag(self.rs, self.devmem + 256, self.seq)
        self.ask({"kind": "alone", "reps": reps})
        t = self.own()
        rel = torch.cuda.Stream()
        write_flag(rel, self.devmem + 256, self.seq)
        torch.cuda.synchronize()
        return t

    def dev_flags(self, reps: int) -> tuple[float, float]:
        """Today's design: the timekeeper's events around go ... wait done, both flags in device memory; (its
        window, the worker's own events) in µs."""
        self.seq += 1
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.ask({"kind": "dev", "reps": reps, "seq": self.seq, "handle": self.hexh})
        with torch.cuda.stream(self.rs):
            e0.record(self.rs)
            write_flag(self.rs, self.devmem, self.seq)
            wait_flag(self.rs, self.devmem + 128, self.seq)
            e1.record(self.rs)
        t = self.own()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1000, t

    def host_flags(self, reps: int) -> tuple[float, float]:
        """The alternative: go and done in host memory, the window timed by the timekeeper's CPU clock, its GPU
        context idle throughout; (its window, the worker's own events) in µs."""
        self.seq += 1
        self.ask({"kind": "host", "reps": reps, "seq": self.seq})
        time.sleep(0.005)  # W's enqueue done and its stream parked on GO
        t0 = time.perf_counter_ns()
        self.words[0] = self.seq
        while self.words[32] != self.seq:
            pass
        t1 = time.perf_counter_ns()
        return (t1 - t0) / 1000, self.own()

    def host_done(self, reps: int) -> tuple[float, float]:
        """The timekeeper's events kept, its stream idle inside the window: go written on the GPU, done read from
        host memory by its CPU, which then records END; (its window, the worker's own events) in µs."""
        self.seq += 1
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.ask({"kind": "host_done", "reps": reps, "seq": self.seq, "handle": self.hexh})
        with torch.cuda.stream(self.rs):
            e0.record(self.rs)
            write_flag(self.rs, self.devmem, self.seq)
        while self.words[32] != self.seq:
            pass
        e1.record(self.rs)
        t = self.own()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1000, t


def _own_events(tk: _Timekeeper) -> dict[str, float]:
    """Per repetition, by the worker's own events: the median over blocks, after a block that warms it up."""
    out = {}
    for kind, fn in (("alone", tk.alone), ("ipc_alone", tk.ipc_alone), ("r_waits", tk.r_waits)):
        fn(REPS)
        out[kind] = statistics.median(fn(REPS) for _ in range(BLOCKS)) / REPS
    return out


def _windows(tk: _Timekeeper) -> dict[str, dict[str, float]]:
    """Per repetition, by the timekeeper's windows: a full window's median minus an empty one's (the handover
    itself, reported beside it with its spread), after a full and an empty window that warm them up."""
    out = {}
    for kind, fn in (("dev_flags", tk.dev_flags), ("host_flags", tk.host_flags), ("host_done", tk.host_done)):
        fn(REPS)
        fn(0)
        empties = [fn(0)[0] for _ in range(BLOCKS)]
        fulls = [fn(REPS) for _ in range(BLOCKS)]
        out[kind] = {"per_rep_us": (statistics.median(f[0] for f in fulls) - statistics.median(empties)) / REPS,
                     "handover_us": statistics.median(empties),
                     "handover_spread_us": max(empties) - min(empties),
                     "own_events_per_rep_us": statistics.median(f[1] for f in fulls) / REPS}
    return out


def main(out_path: str | None = None) -> int:
    """Print the figures (and write them to `out_path` as JSON); 2 without a CUDA GPU."""
    if not torch.cuda.is_available():
        print("harness bench observed-contexts needs a CUDA GPU")
        return 2
    torch.zeros(1, device="cuda")
    tk = _Timekeeper()
    out: dict[str, Any] = {**_own_events(tk), **_windows(tk)}
    out.update(device=torch.cuda.get_device_name(), torch=torch.__version__, reps=REPS, blocks=BLOCKS,
               elements=N)
    print(json.dumps(out, indent=1))
    if out_path:
        with open(out_path, "w") as f:
            json.dump(out, f, indent=1)
    tk.w.stdin.close()
    tk.w.wait()
    return 0


if __name__ == "__main__":  # the worker's side, started by main()
    worker()
