"""`harness bench observed-contexts`: does a trusted stream waiting on the GPU slow the candidate it times? (GPU)

Observed timing (`eval.observed`, issue 52) read an honest memory-bound add 24 % slower than its own timing loop
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


def main(out_path: str | None = None) -> int:
    if not torch.cuda.is_available():
        print("harness bench observed-contexts needs a CUDA GPU")
        return 2
    torch.zeros(1, device="cuda")
    fd = os.memfd_create("flags")
    os.ftruncate(fd, 4096)
    m, words, dptr = _host_words(fd)
    w = subprocess.Popen([sys.executable, "-m", "harness.bench.observed_contexts", "worker", str(fd)], pass_fds=(fd,),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    flags = ExportedBuffer(FLAGS_BYTES)
    flags.tensor.zero_()
    torch.cuda.synchronize()
    devmem, hexh = flags.ptr, flags.handle
    operands = ExportedBuffer(3 * REPS * N * 4)
    operands.tensor.view(torch.float32).normal_()
    torch.cuda.synchronize()
    rs = torch.cuda.Stream()
    seq = [0]
    out = {}

    def ask(cmd):
        w.stdin.write(json.dumps(cmd) + "\n")
        w.stdin.flush()
        json.loads(w.stdout.readline())

    def own():
        return json.loads(w.stdout.readline())["own_us"]

    def alone(reps):
        ask({"kind": "alone", "reps": reps})
        return own()

    def ipc_alone(reps):
        ask({"kind": "ipc_alone", "reps": reps, "operands": operands.handle})
        return own()

    def r_waits(reps):
        seq[0] += 1
        with torch.cuda.stream(rs):
            wait_flag(rs, devmem + 256, seq[0])
        ask({"kind": "alone", "reps": reps})
        t = own()
        rel = torch.cuda.Stream()
        write_flag(rel, devmem + 256, seq[0])
        torch.cuda.synchronize()
        return t

    def dev_flags(reps):
        seq[0] += 1
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ask({"kind": "dev", "reps": reps, "seq": seq[0], "handle": hexh})
        with torch.cuda.stream(rs):
            e0.record(rs)
            write_flag(rs, devmem, seq[0])
            wait_flag(rs, devmem + 128, seq[0])
            e1.record(rs)
        t = own()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1000, t

    def host_flags(reps):
        seq[0] += 1
        ask({"kind": "host", "reps": reps, "seq": seq[0]})
        time.sleep(0.005)  # W's enqueue done and its stream parked on GO
        t0 = time.perf_counter_ns()
        words[0] = seq[0]
        while words[32] != seq[0]:
            pass
        t1 = time.perf_counter_ns()
        return (t1 - t0) / 1000, own()

    for kind, fn in (("alone", alone), ("ipc_alone", ipc_alone), ("r_waits", r_waits)):
        fn(REPS)
        out[kind] = statistics.median(fn(REPS) for _ in range(BLOCKS)) / REPS

    def host_done(reps):
        seq[0] += 1
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ask({"kind": "host_done", "reps": reps, "seq": seq[0], "handle": hexh})
        with torch.cuda.stream(rs):
            e0.record(rs)
            write_flag(rs, devmem, seq[0])
        while words[32] != seq[0]:
            pass
        e1.record(rs)
        t = own()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1000, t

    for kind, fn in (("dev_flags", dev_flags), ("host_flags", host_flags), ("host_done", host_done)):
        fn(REPS)
        fn(0)
        empties = [fn(0)[0] for _ in range(BLOCKS)]
        fulls = [fn(REPS) for _ in range(BLOCKS)]
        out[kind] = {"per_rep_us": (statistics.median(f[0] for f in fulls) - statistics.median(empties)) / REPS,
                     "handover_us": statistics.median(empties),
                     "handover_spread_us": max(empties) - min(empties),
                     "own_events_per_rep_us": statistics.median(f[1] for f in fulls) / REPS}
    out.update(device=torch.cuda.get_device_name(), torch=torch.__version__, reps=REPS, blocks=BLOCKS,
               elements=N)
    print(json.dumps(out, indent=1))
    if out_path:
        with open(out_path, "w") as f:
            json.dump(out, f, indent=1)
    w.stdin.close()
    w.wait()
    return 0


if __name__ == "__main__":  # the worker's side, started by main()
    worker()
