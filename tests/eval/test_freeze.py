"""`eval.process._freeze`: the candidate's worker, every process of it, stands still while the reference is timed (CPU).

Real sandboxed workers: a hostile candidate whose import starts a thread and a child (in a session of its own, which
forks an orphan and exits) that keep counting in files of its private /dev/shm; the test reads them from outside
through /proc/<pid>/root. A real reference worker's blocks run through `measure.time_pair`, observed by a proxy that
reads the counters right before and right after each of its requests.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval import Evaluator, Status
from eval.timing import measure
from eval.crossing import protocol as p
from eval.process import _freeze as freeze, _proctree as proctree
from eval.process.sandbox import WorkerProcess
from harness.corpus.hostile import GOOD, at_import
from tests.eval.worker_fixtures import staged_worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # real sandboxed workers

TOKEN = secrets.token_hex(4)
COUNTERS = {"thread": f"/dev/shm/kh-freeze-thread-{TOKEN}", "orphan": f"/dev/shm/kh-freeze-orphan-{TOKEN}"}
_COUNT = '''import os
def _count(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    n = 0
    while True:
        n += 1
        os.pwrite(fd, b"%20d" % n, 0)
'''
# the child leaves the worker's session, forks an orphan that counts, and exits
_CHILD = _COUNT + f'''os.setsid()
if os.fork():
    os._exit(0)
_count({COUNTERS["orphan"]!r})
'''
# a thread the worker's thread check does not list (no `threading.Thread`), and the child
SPINNER = at_import(_COUNT + f'''import _thread, subprocess, sys
_thread.start_new_thread(_count, ({COUNTERS["thread"]!r},))
subprocess.Popen([sys.executable, "-c", {_CHILD!r}])


''')


def _counters(worker: WorkerProcess) -> dict[str, int]:
    """Each counter as it stands now (0 while not yet written), read in the worker's own view of the filesystem."""
    found = {}
    for name, path in COUNTERS.items():
        for pid in proctree.processes(worker.pid):
            try:
                found[name] = int(Path(f"/proc/{pid}/root{path}").read_bytes() or b"0")
                break
            except (OSError, ValueError):
                continue
        else:
            found[name] = 0
    return found


def _advancing(worker: WorkerProcess) -> None:
    """Wait (a minute at most, the machine may be busy) until both counters moved past where they are now."""
    start = _counters(worker)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = _counters(worker)
        if all(now[k] > start[k] for k in COUNTERS):
            return
        time.sleep(0.05)
    raise AssertionError(f"the candidate's counters stopped: {start} then {_counters(worker)}")


@pytest.fixture(scope="module")
def reference() -> Iterator[WorkerProcess]:
    worker = staged_worker("ref", None)
    yield worker
    worker.kill()


@pytest.fixture
def spinner() -> Iterator[WorkerProcess]:
    worker = staged_worker("candidate", SPINNER)
    yield worker
    worker.kill()


class Observed:
    """The reference's real worker; each request is bracketed by two readings of the candidate's counters."""

    def __init__(self, worker: WorkerProcess, candidate: WorkerProcess):
        self.worker, self.candidate = worker, candidate
        self.seen: list[tuple[dict[str, int], dict[str, int]]] = []

    @property
    def pid(self) -> int:
        return self.worker.pid

    def request(self, message: p.Request, tensors: Any = None, timeout: float | None = None,
                device: Any = None) -> Any:
        return self._counted(lambda: self.worker.request(message, tensors, timeout=timeout, device=device))

    def timed_request(self, message: p.Request, timeout: float | None = None, device: Any = None) -> Any:
        return self._counted(lambda: self.worker.timed_request(message, timeout=timeout, device=device))

    def _counted(self, call: Any) -> Any:
        before = _counters(self.candidate)
        out = call()
        self.seen.append((before, _counters(self.candidate)))
        return out


def _plans(worker: WorkerProcess) -> dict[str, freeze.Freezer]:
    """The worker's own plan, and SIGSTOP to its processes (the fallback where no cgroup v2 is usable)."""
    signals = freeze.Freezer(worker.pid, group=None, members=worker.pids_group, pid_namespace=True)
    return {worker.freezer.mechanism: worker.freezer, "signals": signals}


@pytest.mark.parametrize("plan", ["cgroup", "signals"])
def test_the_candidates_thread_and_orphan_stand_still_through_every_reference_block(reference, spinner, plan):
    freezer = _plans(spinner).get(plan)
    if freezer is None:
        pytest.skip("no cgroup v2 can be made and joined here")
    spinner.freezer = freezer
    _advancing(spinner)  # both count while nothing holds them
    observed = Observed(reference, spinner)
    rule = measure.TimingRule(min_reps=8, max_reps=16, warmup_ms=1.0, check_outputs=False)
    meas = measure.time_pair(measure.Side("reference", observed, "ref", hold=spinner),
                             measure.Side("candidate", spinner, "candidate"), rule, nonce=0, graphs=False, timeout=600)
    assert len(observed.seen) >= 4 and meas.unheld_blocks == 0
    for before, after in observed.seen:
        assert before == after, f"the candidate counted while the reference was timed ({plan}): {before} -> {after}"
    assert all(before["thread"] > 0 and before["orphan"] > 0 for before, _ in observed.seen)
    _advancing(spinner)  # and count again once the timing is over


@pytest.mark.parametrize("plan", ["cgroup", "signals"])
def test_a_held_worker_runs_again_before_the_next_block_is_sent(spinner, plan):
    """The thaw is waited for: the moment `held` returns, the kernel shows every thread of the worker able to run, so
    no thaw lands in the wall time of the candidate's block that follows."""
    freezer = _plans(spinner).get(plan)
    if freezer is None:
        pytest.skip("no cgroup v2 can be made and joined here")
    spinner.freezer = freezer
    tree = proctree.processes(spinner.pid)
    for _ in range(20):
        with freeze.held(spinner) as still:
            assert still
        if plan == "cgroup":
            assert "frozen 0" in (freezer.group / "cgroup.events").read_text().splitlines()
        assert not [pid for pid in tree if freeze._stopped_threads(pid)]
    _advancing(spinner)


def test_a_reference_block_that_fails_still_resumes_the_candidate(spinner):
    """SIGCONT (or the thaw) follows whatever the block did: here it raised."""
    with pytest.raises(RuntimeError):
        with freeze.held(spinner) as still:
            assert still
            raise RuntimeError("the reference's block failed")
    _advancing(spinner)


@pytest.mark.parametrize("plan", ["cgroup", "signals"])
def test_a_worker_killed_while_frozen_is_reaped_with_every_process_of_it(spinner, plan):
    freezer = _plans(spinner).get(plan)
    if freezer is None:
        pytest.skip("no cgroup v2 can be made and joined here")
    spinner.freezer = freezer
    _advancing(spinner)
    tree = proctree.processes(spinner.pid)
    assert len(tree) >= 3  # the launcher, the worker, the orphan
    with freeze.held(spinner) as still:
        assert still
        spinner.kill()
        assert not spinner.alive()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and [pid for pid in tree if _runs(pid)]:
        time.sleep(0.05)
    assert not [pid for pid in tree if _runs(pid)]
    assert spinner.freeze_group is None or not spinner.freeze_group.exists()


def _runs(pid: int) -> bool:
    """Whether `pid` is a process that is not a zombie (one the host's init has not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


EVALUATOR = dict(device="cpu", cache_dir=None, cpu_timing=True, workers_per_gpu=1, import_timeout_s=120,
                 call_timeout_s=60)


@pytest.mark.parametrize("name, source", [("honest", GOOD), ("spinner", SPINNER)], ids=["honest", "spinner"])
def test_an_evaluation_records_the_plan_and_judges_as_before(evaluator: Evaluator, problem, name, source,
                                                              monkeypatch):
    # seen stopped at all, however busy the machine: on CI beside other work a spinner's freeze once took over the
    # 0.5 s a block waits for it (the evaluator then flags the block, which is what the last line checks)
    monkeypatch.setattr(freeze, "STOP_WAIT_S", 30.0)
    result = evaluator.evaluate(problem, source)
    assert result.status is Status.CORRECT, result.reason
    assert result.freeze in ("cgroup", "signals", "signals-tree")
    if freeze.cgroup_base() is not None:
        assert result.freeze == "cgroup"
    assert result.reference_timing is not None and result.candidate_timing is not None
    assert not [f for f in result.flags if "not seen fully stopped" in f], result.flags
