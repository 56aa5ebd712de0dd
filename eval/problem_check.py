"""A problem run once in a process of its own before the trusted parent imports it, so a broken one is named.

Problems are trusted input, but a broken one must end as the problem's fault (`Status.PROBLEM_ERROR`), never a
candidate's, and must not take the parent down with it: a reference that raises or returns something other than
tensors, `os._exit` in its module or forward, a loop at import. `check` runs in a child process what the parent runs
first (import the source at the evaluation's sizes, build `Model(*get_init_inputs())`, draw `get_inputs()`, run the
forward, flatten its outputs), under a time limit, once per source and sizes in this process.

At reduced sizes (`META["small"]`, made to run in well under a second on a CPU) it all runs for real on the CPU. At
full size the forward runs first on the meta device (shapes only, no data: a full-size KernelBench problem in
milliseconds, after the 2 s of CPU that torch's first meta operation takes to import its shape machinery, as
`FakeTensorMode` does). Where the meta device cannot run it (shapes that depend on data, an op without a meta kernel,
a tensor made on an explicit device, or the problem's own fault) it runs again for real on the CPU, if one draw's
inputs and parameters take at most `REAL_RUN_MAX_BYTES`; else, as where the child itself could not start, the check is
undecided and the parent goes on as before (a reference that fails there is still the problem's fault:
`Reference.outputs`, `Evaluator._evaluate`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, NamedTuple

from eval.process._reaper import owned_tempdir
from problems import Problem, ProblemError

# past this, a forward the meta device cannot run is not run for real on the CPU (seconds at most on one core)
REAL_RUN_MAX_BYTES = 1 << 30
_LOG_CAP_BYTES = 16 << 20  # what the child may write to its log (the problem's prints and tracebacks)
_LOG_TAIL_CHARS = 8000
_ROOT = str(Path(__file__).resolve().parent.parent)
_META = "on the meta device (shapes only)"


class Outcome(NamedTuple):
    """A check's outcome: `fault`, the verdict's reason naming the problem and what broke ("" where it is sound or
    the check could not decide), and `log`, the tail of what the problem printed and its traceback."""

    fault: str
    log: str = ""


_Key = tuple[str, bool, str]  # (source hash, reduced sizes, the label its tracebacks name)
_broke: dict[_Key, tuple[str, str]] = {}  # -> (what broke, or "" where nothing did or the check was undecided; log)
_locks: dict[_Key, threading.Lock] = {}
_guard = threading.Lock()


def check(problem: Problem, small: bool, timeout_s: float) -> Outcome:
    """The outcome of running `problem` (at its reduced sizes `META["small"]` where `small`) in a child process that
    may take `timeout_s` in all; decided once per source, sizes and label in this process (evaluations of one problem
    that start together wait for the one check)."""
    label = problem.path or f"<{problem.id}>"
    key = (problem.source_hash, small, label)
    with _guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _broke:
            overrides = (problem.meta.get("small") or {}) if small else {}
            _broke[key] = _run_child(problem.source, label, overrides, timeout_s)
        what, log = _broke[key]
    return Outcome(broken(problem.id, what), log) if what else Outcome("")


def broken(problem_id: str, what: str) -> str:
    """A `problem_error` verdict's reason: the problem named as broken, and what broke."""
    return f"problem {problem_id} is broken, not the candidate: {what}"


def _run_child(source: str, label: str, overrides: Any, timeout_s: float) -> tuple[str, str]:
    """Run the check in a child (its own session, killed whole at the limit) working in a folder the evaluator's
    reaper knows, so that a child left behind by a parent killed mid-check is ended with it."""
    request = json.dumps({"source": source, "label": label, "overrides": overrides})
    folder = owned_tempdir("probe")
    log_path = folder / "log"
    timed_out = False
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", f"import sys; sys.path.insert(0, {_ROOT!r}); "
                                       "from eval.problem_check import main; main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=folder, start_new_session=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"}, text=True)
            try:
                out, _ = proc.communicate(request, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
        with open(log_path, "rb") as log:
            log.seek(max(0, log_path.stat().st_size - _LOG_TAIL_CHARS))
            tail = log.read().decode(errors="replace")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return _outcome(out, tail, proc.returncode, timed_out, timeout_s)


def _outcome(out: str, log: str, returncode: int, timed_out: bool, timeout_s: float) -> tuple[str, str]:
    """(What broke, or "", and the log), as the child's report lines, its log and its end say."""
    lines = out.splitlines()
    stages = [line.removeprefix("stage ") for line in lines if line.startswith("stage ")]
    stage = stages[-1] if stages else ""
    for line in lines:
        if line.startswith("fault "):
            return json.loads(line.removeprefix("fault ")), log
        if line in ("sound", "undecided"):
            return "", ""
    if not stage:  # the child never got as far as the problem (torch did not import in time, say): not its fault
        return "", ""
    if timed_out:
        return f"{stage} did not finish in {timeout_s:.0f} s", log
    if returncode == -signal.SIGKILL:  # the out-of-memory killer, or another process: not shown to be the problem's
        return "", ""
    how = f"was killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exited with code {returncode}"
    return f"its process {how} while {stage}", log


# -- the child ---------------------------------------------------------------------------------------------------
def main() -> None:
    """The child: read the request from stdin, report stages and the outcome on stdout; the problem's own output
    goes to the log (stderr), never into the report."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (_LOG_CAP_BYTES, _LOG_CAP_BYTES))
    request = json.loads(sys.stdin.read())
    report = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch

    from problems import build_model, load_source, make_inputs, output_tensors, run_forward

    current = [""]

    def step(name: str, call: Callable[[], Any]) -> Any:
        current[0] = name
        report.write(f"stage {name}\n")
        return call()

    def fault(text: str) -> None:
        traceback.print_exc()
        report.write(f"fault {json.dumps(text)}\n")

    try:
        module = step("importing the problem",
                      lambda: load_source(request["source"], request["label"], request["overrides"]))
    except Exception as exc:  # noqa: BLE001  the problem's own fault, whatever it raised
        return fault(str(exc))
    if not request["overrides"]:  # full size, which a CPU may not run quickly (reduced sizes run in well under 1 s)
        drawn = 0
        try:
            with torch.device("meta"):
                model = step(f"building Model(*get_init_inputs()) {_META}", lambda: build_model(module, 0))
                inputs = step(f"drawing get_inputs() {_META}", lambda: make_inputs(module, 1))
                drawn = sum(_bytes(t) for t in [*inputs, *model.parameters(), *model.buffers()])
                out = step(f"running the reference's forward {_META}", lambda: run_forward(model, inputs))
                step("flattening the reference's outputs", lambda: output_tensors(out))
            report.write("sound\n")
            return
        except Exception:  # noqa: BLE001  data-dependent shapes, an op without a meta kernel, or the problem's fault
            pass
        if drawn > REAL_RUN_MAX_BYTES:
            report.write("undecided\n")
            return
    try:
        model = step("building Model(*get_init_inputs())", lambda: build_model(module, 0))
        inputs = step("drawing get_inputs()", lambda: make_inputs(module, 1))
        out = step("running the reference's forward", lambda: run_forward(model, inputs))
        step("flattening the reference's outputs", lambda: output_tensors(out))
    except ProblemError as exc:
        return fault(f"{current[0]}: {exc}")
    except Exception as exc:  # noqa: BLE001  the problem's own fault, whatever it raised
        return fault(f"{current[0]} raised {type(exc).__name__}: {exc}")
    report.write("sound\n")


def _bytes(x: Any) -> int:
    import torch

    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0
