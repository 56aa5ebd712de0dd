"""`harness bench trusted-events`: can a trusted process time a worker's GPU work with its own events? (GPU)

The design question of measurement authority: today the worker's native loop records the CUDA events that time a
candidate, and reports them; everything in its process is the candidate's to rewrite. The alternative is a window
the trusted side opens and closes on its own stream: it records its start event and an interprocess event `go`,
the worker's stream waits on `go`, runs the work and records an interprocess event `done`, and the trusted stream
waits on `done` and records its end event. The window holds the work, whatever the worker reports; a worker that
records `done` early leaves its work outside the window, where only an output read after `done` can catch it.

Each repetition starts behind a GPU lead (a spin kernel on the trusted stream), during which the two processes
exchange the host messages that must precede each wait (a stream waits on an event's last record *enqueued* at the
time of the wait): a repetition whose exchange outlasted the lead is not valid, and is counted. For each work size it
prints the trusted window's median and IQR beside the worker's own events around the same work, and beside events
in one process (today's precision), with the worker unconfined and, where the host allows, in the evaluator's
sandbox (its own mount, network, PID and IPC namespaces: `eval.process.sandbox`).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

LEAD_US = 300.0
# work per repetition: spin kernels of these lengths (one thread), and a memory-bound add over 2**24 floats
SPIN_US = (0.0, 2.0, 10.0, 50.0, 500.0)
ADD_ELEMENTS = 1 << 24


# The worker's side, run as `python -c` (the sandbox binds no part of the harness): wait on `go`, run the asked work
# between its own events, record `done`, say so; at the end, send its own event times.
_WORKER = r"""
import json, os, sys
import torch
reader, writer = os.fdopen(int(sys.argv[1]), "r"), os.fdopen(int(sys.argv[2]), "w", buffering=1)
setup = json.loads(reader.readline())
go = torch.cuda.Event.from_ipc_handle(0, bytes.fromhex(setup["go"]))
done = torch.cuda.Event.from_ipc_handle(0, bytes.fromhex(setup["done"]))
stream = torch.cuda.Stream()
x = torch.zeros(setup["add_elements"], device="cuda")
pairs = []
for line in reader:
    ask = json.loads(line)
    if ask.get("stop"):
        break
    with torch.cuda.stream(stream):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stream.wait_event(go)
        start.record(stream)
        if ask["cycles"]:
            torch.cuda._sleep(ask["cycles"])
        else:
            x.add_(1.0)
        end.record(stream)
        done.record(stream)
    pairs.append((start, end))
    writer.write("queued\n")
torch.cuda.synchronize()
writer.write(json.dumps([s.elapsed_time(e) * 1000 for s, e in pairs]) + "\n")
"""


@functools.cache
def _cycles_per_us() -> float:
    """`torch.cuda._sleep`'s cycles a microsecond, measured once (the clock the spin counts runs at)."""
    import torch

    torch.cuda._sleep(1_000_000)  # warm
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(10_000_000)
    e.record()
    torch.cuda.synchronize()
    return 10_000_000 / (s.elapsed_time(e) * 1000)


def _spin_cycles(us: float) -> int:
    """Cycles of `torch.cuda._sleep` for about `us` microseconds."""
    return int(us * _cycles_per_us())


def _cycles(kind: str) -> int:
    """A work kind's spin cycles (0: the memory-bound add)."""
    return 0 if kind == "add" else max(1, _spin_cycles(float(kind.removeprefix("spin"))))


def _work(kind: str, x: Any) -> None:
    import torch

    if kind == "add":
        x.add_(1.0)
    else:
        torch.cuda._sleep(_cycles(kind))


def _kinds() -> list[str]:
    return [f"spin{us:g}" for us in SPIN_US] + ["add"]


# How the worker runs, besides unconfined and in the evaluator's sandbox: one namespace or identity change at a time,
# to tell which of the sandbox's parts an interprocess event cannot cross
_ALONE = {"ipc namespace": ["-i"], "pid namespace": ["-p", "-f", "--mount-proc"], "mount namespace": ["-m"],
          "network namespace": ["-n"], "uts namespace": ["-u"]}
WAYS = ("unconfined", "sandboxed", *_ALONE, "uid 65534")


def _spawn(way: str) -> tuple[subprocess.Popen, Any, Any]:
    """The worker process, run `way` (one of WAYS), with a pipe each way."""
    from eval import confine_command, sandbox_plan

    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    folder = tempfile.mkdtemp(prefix="kh-bench-events-")
    os.chmod(folder, 0o777)
    cmd = [sys.executable, "-c", _WORKER, str(to_child_r), str(from_child_w)]
    user = None
    if way == "sandboxed":
        plan = sandbox_plan()
        if not plan.filesystem:
            raise RuntimeError(f"no sandbox on this host: {plan.note}")
        if plan.uid is not None:
            os.chown(folder, plan.uid, plan.uid)
        cmd = confine_command(plan, [folder], cmd, network=False)
    elif way in _ALONE:
        cmd = ["unshare", *_ALONE[way], "--", *cmd]
    elif way == "uid 65534":
        user = 65534
    proc = subprocess.Popen(cmd, pass_fds=(to_child_r, from_child_w), cwd=folder, user=user)
    os.close(to_child_r)
    os.close(from_child_w)
    return proc, os.fdopen(to_child_w, "w", buffering=1), os.fdopen(from_child_r, "r")


def _trusted_windows(way: str, reps: int, lead_us: float) -> dict[str, Any]:
    """Per work kind: the trusted side's windows, the worker's own event times, and how many repetitions' host
    exchange outlasted the GPU lead."""
    import torch

    proc, to_child, from_child = _spawn(way)
    go = torch.cuda.Event(enable_timing=False, interprocess=True)
    done = torch.cuda.Event(enable_timing=False, interprocess=True)
    stream = torch.cuda.Stream()
    to_child.write(json.dumps({"go": go.ipc_handle().hex(), "done": done.ipc_handle().hex(),
                               "add_elements": ADD_ELEMENTS}) + "\n")
    plan = [kind for _ in range(reps) for kind in _kinds()]
    windows, late = [], []
    try:
        for kind in plan:
            start, end, lead_end = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True),
                                    torch.cuda.Event())
            with torch.cuda.stream(stream):
                torch.cuda._sleep(_spin_cycles(lead_us))
                lead_end.record(stream)
                start.record(stream)
                go.record(stream)
            to_child.write(json.dumps({"cycles": _cycles(kind)}) + "\n")
            if from_child.readline().strip() != "queued":
                raise RuntimeError("the worker did not answer")
            with torch.cuda.stream(stream):
                stream.wait_event(done)
                end.record(stream)
            late.append(lead_end.query())  # the lead had ended before the exchange did: the window holds host time
            windows.append((start, end))
        to_child.write(json.dumps({"stop": True}) + "\n")
        own = json.loads(from_child.readline())
    finally:
        proc.kill()
        proc.wait(timeout=120)
    torch.cuda.synchronize()
    by_kind: dict[str, Any] = {}
    for kind, (s, e), was_late, own_us in zip(plan, windows, late, own):
        entry = by_kind.setdefault(kind, {"window_us": [], "own_us": [], "late": 0})
        if was_late:
            entry["late"] += 1
            continue
        entry["window_us"].append(s.elapsed_time(e) * 1000)
        entry["own_us"].append(own_us)
    return {"worker": way, "kinds": by_kind}


def _in_process(reps: int) -> dict[str, list[float]]:
    """Today's precision: events around the same work in one process, behind the same lead."""
    import torch

    x = torch.zeros(ADD_ELEMENTS, device="cuda")
    out: dict[str, list[float]] = {}
    for _ in range(reps):
        for kind in _kinds():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(_spin_cycles(LEAD_US))
            s.record()
            _work(kind, x)
            e.record()
            torch.cuda.synchronize()
            out.setdefault(kind, []).append(s.elapsed_time(e) * 1000)
    return out


def _iqr(values: list[float]) -> float:
    if len(values) < 4:
        return float("nan")
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def main(reps: int, out: str | None, ways: tuple[str, ...] = ("unconfined", "sandboxed"),
         lead_us: float = LEAD_US) -> int:
    import torch

    if not torch.cuda.is_available():
        print("harness bench trusted-events needs a CUDA GPU")
        return 2
    torch.cuda.init()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "reps": reps,
                              "in_process": _in_process(reps), "runs": []}
    for way in ways:
        try:
            report["runs"].append(_trusted_windows(way, reps, lead_us))
        except Exception as exc:  # noqa: BLE001  a way an interprocess event cannot cross: say so
            report["runs"].append({"worker": way, "error": repr(exc)[:400]})
    print(f"{report['device']}, torch {report['torch']}, {reps} repetitions per work kind, lead {lead_us:g} us")
    print(f"{'work':>8} {'in-process median/IQR us':>26} | {'worker':>17} {'window median/IQR':>18} "
          f"{'own median':>11} {'window-own':>11} {'late':>5}")
    for run in report["runs"]:
        if "error" in run:
            print(f"  {run['worker']}: {run['error']}")
            continue
        for kind, entry in run["kinds"].items():
            base = report["in_process"][kind]
            w, o = entry["window_us"], entry["own_us"]
            gap = statistics.median([a - b for a, b in zip(w, o)]) if w else float("nan")
            print(f"{kind:>8} {statistics.median(base):13.2f} / {_iqr(base):6.2f}     | {run['worker'][:17]:>17} "
                  f"{(statistics.median(w) if w else float('nan')):10.2f} / {_iqr(w):5.2f} "
                  f"{(statistics.median(o) if o else float('nan')):11.2f} {gap:11.2f} {entry['late']:>5}")
    if out:
        with open(out, "w") as fh:
            json.dump(report, fh)
    return 0
