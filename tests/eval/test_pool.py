"""The warm pool and the check pipeline on CPU: a mixed batch in flight at once, callers on
several threads, the GPU gate, typed protocol and config errors, and nothing left on disk."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from eval import EvalConfig, EvalResult, Evaluator, Job, Status
from eval.crossing import protocol
from eval.process.pool import GpuGate
from eval.process._reaper import owner_token, processes_in, sweep_stale
from eval.crossing.wire import ProtocolError
from harness.corpus import candidates
from tests.paths import REPO as ROOT

pytestmark = pytest.mark.timeout(900)
SIZES = (1 << 10, 1 << 12, 1 << 14)


@pytest.fixture(scope="module")
def pool():
    config = EvalConfig(device="cpu", cache_dir=None, workers_per_gpu=2, call_timeout_s=10, import_timeout_s=60)
    with Evaluator(config) as ev:
        yield ev


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_a_mixed_batch_gets_every_expected_verdict(pool):
    batch = candidates.mixed_batch(SIZES, with_cuda=False)
    seen: list[int] = []
    results = pool.evaluate_many([Job(j.problem, j.source, j.backend) for j in batch], on_result=lambda i, r: seen.append(i))
    assert {j.label: r.status.value for j, r in zip(batch, results)} == {j.label: j.expected for j in batch}
    assert sorted(seen) == list(range(len(batch)))
    assert pool.workers == 2
    correct = [r for r in results if r.is_correct]
    assert all(r.gpu_index is None and r.phase_seconds.keys() >= {"load", "correctness", "kernels"} for r in correct)


def test_distinct_copies_of_the_throughput_batch_share_no_source_or_extension_name():
    batch = candidates.mixed_batch(SIZES, with_cuda=True)
    copies = candidates.distinct_copies(batch, 3)
    assert len(copies) == 3 * len(batch) and len({j.label for j in copies}) == len(copies)
    # nothing cached or built once for two (the same kernel source on problems of three sizes is three evaluations)
    assert len({(j.problem.id, j.source) for j in copies}) == len(copies)
    assert len({j.source for j in copies if j.backend == "cuda"}) == sum(j.backend == "cuda" for j in copies)
    names = [re.search(r'name="([^"]+)"', j.source).group(1) for j in copies if j.backend == "cuda"]
    assert len(names) == 3 * sum(j.backend == "cuda" for j in batch) and len(set(names)) == len(names)
    assert [j.expected for j in copies] == [j.expected for j in batch] * 3
    assert candidates.distinct_copies(batch, 1) == batch


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_callers_on_several_threads(pool):
    good = candidates.mixed_batch(SIZES, with_cuda=False)[:4]
    wrong = [j for j in candidates.mixed_batch(SIZES, with_cuda=False) if j.expected == "incorrect"]
    jobs = good + wrong + good[:2]
    results: dict[int, EvalResult] = {}
    threads = [threading.Thread(target=lambda i=i, j=j: results.__setitem__(i, pool.evaluate(j.problem, j.source)))
               for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i].status.value for i in range(len(jobs))] == [j.expected for j in jobs]


def test_results_start_pending():
    assert EvalResult().status is Status.PENDING


def test_gate_keeps_timing_alone():
    gate, events, lock = GpuGate(), [], threading.Lock()

    def work(access: str, tag: str) -> None:
        with gate.hold(access):
            with lock:
                events.append(("in", tag))
            time.sleep(0.05)
            with lock:
                events.append(("out", tag))

    threads = [threading.Thread(target=work, args=("shared", f"s{i}")) for i in range(4)]
    threads += [threading.Thread(target=work, args=("exclusive", f"x{i}")) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    inside: set[str] = set()
    for kind, tag in events:
        if kind == "in":
            assert not (tag.startswith("x") and inside), f"{tag} entered beside {inside}"
            assert not any(t.startswith("x") for t in inside), f"{tag} entered beside {inside}"
            inside.add(tag)
        else:
            inside.discard(tag)
    with gate.hold("exclusive"):
        with gate.hold("shared"):  # the holder's own nested steps pass straight through
            pass


def test_gate_accounts_for_its_holds():
    """Overlapping shared holds count once; an exclusive hold's wait for them counts as its wait."""
    gate = GpuGate()
    started = threading.Event()

    def shared(seconds: float) -> None:
        with gate.hold("shared"):
            started.set()
            time.sleep(seconds)

    readers = [threading.Thread(target=shared, args=(0.4,)) for _ in range(2)]
    for t in readers:
        t.start()
    started.wait()
    with gate.hold("exclusive"):  # waits for both readers, about 0.4 s
        time.sleep(0.2)
    with gate.hold("exclusive"):
        with gate.hold("exclusive"):  # the holder's nested request is not a second hold
            pass
    for t in readers:
        t.join()
    usage = gate.usage()
    assert usage["exclusive_holds"] == 2
    assert 0.2 <= usage["exclusive_s"] < 0.6, usage
    assert 0.4 <= usage["shared_s"] < 0.7, usage  # the two overlapping holds, once: not 0.8 s
    assert 0.2 <= usage["exclusive_wait_s"] < 0.8, usage


class _Holder:
    """A thread that takes the gate in `access` and keeps it until released; records when it got it."""

    def __init__(self, gate: GpuGate, access: str, log: list[str], name: str):
        self.got, self._release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(gate, access, log, name), daemon=True)
        self.thread.start()

    def _run(self, gate: GpuGate, access: str, log: list[str], name: str) -> None:
        with gate.hold(access):
            log.append(f"{name} in")
            self.got.set()
            self._release.wait()
            log.append(f"{name} out")

    def release(self) -> None:
        self._release.set()
        self.thread.join(60)


def _writer_waiting(gate: GpuGate) -> None:
    deadline = time.monotonic() + 60
    while gate._writers_waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert gate._writers_waiting == 1


def test_a_timing_that_waits_for_a_warm_up_lets_the_other_trials_run_meanwhile():
    """A fresh worker's first call (JIT compiles) can hold the gate 20 times longer than a trial: while a timing
    waits for it, other trials still start, and the timing starts only once all of them are done."""
    gate, log = GpuGate(), []
    warm_up = _Holder(gate, "warm_up", log, "warm-up")
    assert warm_up.got.wait(60)
    timing = _Holder(gate, "exclusive", log, "timing")
    _writer_waiting(gate)
    trial = _Holder(gate, "shared", log, "trial")
    assert trial.got.wait(60), "a trial was held back behind a timing that waits for a warm-up anyway"
    assert not timing.got.is_set()
    warm_up.release()
    time.sleep(0.2)
    assert not timing.got.is_set(), "the timing started beside a trial"
    trial.release()
    assert timing.got.wait(60)
    timing.release()
    assert log == ["warm-up in", "trial in", "warm-up out", "trial out", "timing in", "timing out"]


def _held_back_behind_a_timing(gate: GpuGate, log: list[str], running: tuple[str, str], late: tuple[str, str],
                               timing_name: str) -> None:
    """`running` (access, name) holds the gate, a timing asks for it, then `late` asks: `late` starts only after the
    timing, and the timing only after `running`."""
    first = _Holder(gate, running[0], log, running[1])
    assert first.got.wait(60)
    timing = _Holder(gate, "exclusive", log, timing_name)
    _writer_waiting(gate)
    second = _Holder(gate, late[0], log, late[1])
    time.sleep(0.2)
    assert not second.got.is_set()
    first.release()
    assert timing.got.wait(60)
    timing.release()
    assert second.got.wait(60)
    second.release()


def test_a_timing_that_waits_holds_back_new_warm_ups_and_trials_behind_a_plain_trial():
    """Waiting only for plain trials, an exclusive request lets nothing new start; and a new warm-up never starts
    while one waits (else a stream of first calls could starve the timing)."""
    gate, log = GpuGate(), []
    _held_back_behind_a_timing(gate, log, ("shared", "trial"), ("shared", "late trial"), "timing")
    assert log[:4] == ["trial in", "trial out", "timing in", "timing out"], log
    # a warm-up in flight admits trials, never another warm-up
    _held_back_behind_a_timing(gate, log, ("warm_up", "first warm-up"), ("warm_up", "second warm-up"), "timing 2")
    assert log[6:] == ["first warm-up in", "first warm-up out", "timing 2 in", "timing 2 out", "second warm-up in",
                       "second warm-up out"], log
    with pytest.raises(ValueError, match="no GPU gate access 'read'"):
        with gate.hold("read"):
            pass


def test_protocol_refuses_ill_typed_or_forged_replies():
    with pytest.raises(ProtocolError, match="answered 'run' to 'time_block'"):
        protocol.decode_reply(protocol.TimeBlock(), {"cmd": "run", "ok": True})
    with pytest.raises(ProtocolError, match="does not fit"):
        protocol.decode_reply(protocol.Run(), {"cmd": "run", "ok": True, "mutated_inputs": ["0"]})
    with pytest.raises(ProtocolError, match="unknown field"):
        protocol.decode_reply(protocol.Load(), {"cmd": "load", "ok": True, "verdict": "correct"})
    with pytest.raises(ProtocolError, match="unknown command"):
        protocol.decode_request({"cmd": "shell"})
    reply = protocol.decode_reply(protocol.Run(), {"cmd": "run", "ok": True, "mutated_inputs": [1]})
    assert reply.mutated_inputs == [1]


def test_a_failure_stage_is_one_of_a_fixed_set_each_with_its_verdict():
    """A worker that names a stage of its own broke the protocol (it becomes the crash `WorkerDied` gives), never a
    silent runtime_error; a known one decodes to its member, and the parent's table gives every member a verdict."""
    from eval.steps.context import VERDICT_OF_STAGE

    with pytest.raises(ProtocolError, match="does not fit FailureStage"):
        protocol.decode_reply(protocol.Run(), {"cmd": "run", "ok": False, "stage": "verdict:correct"})
    with pytest.raises(ProtocolError, match="does not fit FailureStage"):
        protocol.decode_reply(protocol.Run(), {"cmd": "run", "ok": False, "stage": 3})
    reply = protocol.decode_reply(protocol.Load(), {"cmd": "load", "ok": False, "stage": "import"})
    assert reply.stage is protocol.FailureStage.IMPORT
    assert set(VERDICT_OF_STAGE) == set(protocol.FailureStage)
    assert VERDICT_OF_STAGE[protocol.FailureStage.INTEGRITY][0] is Status.REJECTED
    assert VERDICT_OF_STAGE[protocol.FailureStage.RUN][0] is Status.RUNTIME_ERROR


@pytest.mark.parametrize("bad, phrase", [
    ({"device": "tpu"}, "eval.device must be one of"),
    ({"workers_per_gpu": -1}, "eval.workers_per_gpu must be >= 0"),
    ({"trials": 0}, "eval.trials must be > 0"),
    ({"gpus": []}, "eval.gpus must be null"),
    ({"min_reps": 50, "max_reps": 10}, "exceeds eval.max_reps"),
])
def test_config_validates_itself(bad, phrase):
    with pytest.raises(ValueError, match=phrase):
        EvalConfig(**bad)


def test_stale_folders_of_a_dead_owner_are_swept(tmp_path):
    dead = subprocess.Popen(["sleep", "60"])
    dead_token = owner_token(dead.pid)
    dead.kill()
    dead.wait()
    folder = tmp_path / f"kh-worker-{dead_token}-abc"
    folder.mkdir()
    (folder / "candidate_0.py").write_text("secret candidate source")
    orphan = subprocess.Popen(["sleep", "60"], cwd=folder)
    live = tmp_path / f"kh-worker-{owner_token()}-mine"
    live.mkdir()
    removed = sweep_stale(str(tmp_path))
    assert removed == [folder] and not folder.exists() and live.exists()
    assert orphan.wait(timeout=10) == -signal.SIGKILL


def test_a_reused_pid_neither_keeps_a_dead_owners_folders_nor_loses_its_own(tmp_path):
    """Pids wrap (32768 of them on many hosts), so an owner is its pid and its start time: the sweep removes the
    folder of this pid's former holder, and that holder's reaper leaves this process's folders alone."""
    mine = tmp_path / f"kh-worker-{owner_token()}-mine"
    former = tmp_path / f"kh-worker-{os.getpid()}.1-former"  # same pid, another start time: a process long gone
    for folder in (mine, former):
        folder.mkdir()
    assert sweep_stale(str(tmp_path)) == [former] and mine.exists()

    former.mkdir()
    read_end, write_end = os.pipe()
    os.close(write_end)  # the former holder is gone: its reaper reads end-of-file at once
    reap = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "eval" / "process" / "_reaper.py"), str(read_end),
                           f"{os.getpid()}.1", str(tmp_path)], pass_fds=(read_end,), timeout=60)
    os.close(read_end)
    assert reap.returncode == 0 and not former.exists() and mine.exists()


def _harness_holding_folders(tmp_path) -> subprocess.Popen:
    """A process that evaluates one candidate, keeps its evaluator (workers and folders) open, and waits."""
    script = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from eval import EvalConfig, Evaluator
from harness.corpus import candidates
ev = Evaluator(EvalConfig(device="cpu", cache_dir=None, workers_per_gpu=1))
r = ev.evaluate(candidates.problem(1024), candidates.triton_candidate())
print(r.status.value, flush=True)
time.sleep(600)
"""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "correct"
    assert list(tmp_path.glob(f"kh-worker-{proc.pid}.*")), "the evaluator made no worker folder to leave behind"
    return proc


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_harness_leaves_no_folder_or_worker_behind(tmp_path, sig):
    """No next start needed: the process's reaper removes its folders and stops its workers once it is gone."""
    proc = _harness_holding_folders(tmp_path)
    workers = {pid for folder in tmp_path.glob(f"kh-worker-{proc.pid}.*") for pid in processes_in(folder)}
    assert workers, "no worker process found working in the worker folders"
    proc.send_signal(sig)
    proc.wait()
    deadline = time.monotonic() + 300  # a hang guard: the reaper may run late on a busy machine
    while (list(tmp_path.glob("kh-*")) or any(_alive(w) for w in workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not list(tmp_path.glob("kh-*")), "the worker folders outlived the killed parent"
    assert not any(_alive(w) for w in workers), "the workers outlived the killed parent"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()  # a zombie has already ended
    except OSError:
        return False


_SLOW_CALL_S = 0.4
_SLOW_TRIALS = 6


def test_a_timing_waits_for_the_trial_in_flight_not_for_every_trial():
    """Correctness trials hold the GPU gate one at a time: an exclusive request made while a candidate
    is in its trials gets the GPU before the remaining trials run, not after all of them."""
    slow = candidates.triton_candidate() + (
        "\n\nimport time as _time\n\n\nclass ModelNew(ModelNew):\n"
        "    def forward(self, *args):\n"
        f"        _time.sleep({_SLOW_CALL_S})\n"
        "        return super().forward(*args)\n")
    config = EvalConfig(device="cpu", cache_dir=None, workers_per_gpu=1, trials=_SLOW_TRIALS, call_timeout_s=10,
                        import_timeout_s=60)
    with Evaluator(config) as ev:
        assert ev.wait_warm(120)
        gate = ev._pool.gate(None)
        done: list[tuple[EvalResult, float]] = []
        thread = threading.Thread(
            target=lambda: done.append((ev.evaluate(candidates.problem(1 << 10), slow), time.perf_counter())))
        thread.start()
        deadline = time.monotonic() + 120
        while gate._shared == 0 and time.monotonic() < deadline:  # the candidate's first shared step began
            time.sleep(0.005)
        asked = time.perf_counter()
        with gate.hold("exclusive"):
            granted = time.perf_counter()
        thread.join()
    result, finished = done[0]
    assert result.status is Status.CORRECT, result.reason
    assert result.trials >= _SLOW_TRIALS
    # granted after at most the step in flight (the load, or one trial), and several trials still ran after it
    assert granted - asked < result.phase_seconds["load"] + 2 * _SLOW_CALL_S + 1.0
    assert finished - granted > 3 * _SLOW_CALL_S


def test_the_exclusive_steps_before_timing_are_one_run_of_the_pipeline():
    """Each exclusive hold makes the other evaluations' trials on the GPU drain first: the steps that hold the GPU
    alone before timing stand together, so the pipeline takes them in one hold."""
    from eval.pipeline import checks

    names = [s.name for s in checks.PIPELINE]
    before_timing = [s for s in checks.PIPELINE[:names.index("timing")] if s.access == "exclusive"]
    assert [s.name for s in before_timing] == ["kernels", "hidden_work", "host_bound"]
    first = names.index("kernels")
    assert names[first:first + 3] == ["kernels", "hidden_work", "host_bound"]


def test_an_evaluations_gate_holds(monkeypatch):
    """Timed alone (no shared window), the timing and its judging are one exclusive hold; with the kernel-share
    profile's hold that is two for the whole evaluation (the CPU pipeline with `eval.cpu_timing` runs no hidden-work
    or host-bound step). The first trial, the worker's first call, is the one warm-up."""
    accesses: list[str] = []
    hold = GpuGate.hold

    def recorded(self, access):
        accesses.append(access)
        return hold(self, access)

    config = EvalConfig(device="cpu", cache_dir=None, workers_per_gpu=1, cpu_timing=True, call_timeout_s=30,
                        import_timeout_s=120, min_reps=20)
    with Evaluator(config) as ev:
        assert ev.wait_warm(120)
        gate = ev._pool.gate(None)
        before = gate.usage()["exclusive_holds"]
        monkeypatch.setattr(GpuGate, "hold", recorded)
        result = ev.evaluate(candidates.problem(1 << 10), candidates.triton_candidate())
        holds = gate.usage()["exclusive_holds"] - before
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.reference_shared_with == 1 and result.candidate_timing is not None
    assert holds == 2, holds
    assert accesses.count("warm_up") == 1 and result.trials > 1
    first = accesses.index("warm_up")
    assert "shared" in accesses[:first] and accesses[first + 1] == "shared", accesses  # after the load, before trial 1


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
def test_a_parent_per_gpu_takes_its_share_of_the_batch_and_all_start_together():
    """`harness bench eval --part parents`: each parent process evaluates every n-th candidate, once all are warm."""
    from harness.bench import parents

    row = parents.per_gpu_parents(SIZES, copies=1, gpus=2, workers_per_gpu=1)
    assert row["candidates"] == 6 and row["statuses"] == ["correct"] * 6
    assert [(p["gpu"], p["candidates"]) for p in row["parents"]] == [(0, 3), (1, 3)]
    assert 0 < row["wall_s"] < 300


def test_steady_rate_leaves_out_the_first_and_last_tenth_of_completions():
    from harness.bench.pools import steady_rate

    # 20 completions: a slow ramp-up (the first 2 at 5 s), then one per second, then a slow tail
    finished = [5.0, 5.0] + [float(6 + k) for k in range(16)] + [40.0, 60.0]
    # completions 2..17 are at 6..21 s: 15 intervals in 15 s, 60 per minute; the whole batch gives 20 per minute
    assert steady_rate(finished) == 60.0
    assert steady_rate(finished[:9]) is None  # too few to leave a tenth out at each end


def test_a_bench_batch_counts_each_completion_on_stderr_as_it_finishes(capsys):
    """`harness bench eval`'s pool parts show progress: one counter line per finished candidate, in the order they
    finish, with its label and verdict; stdout (the bench's tables) gets none of it."""
    from harness.bench.pools import timed_batch

    class OutOfOrder:  # completes the batch last first, as a pool may
        def evaluate_many(self, jobs, on_result):
            results = [EvalResult(status=Status.CORRECT if i else Status.INCORRECT) for i in range(len(jobs))]
            for i in reversed(range(len(jobs))):
                on_result(i, results[i])
            return results

    problem = candidates.problem(1 << 10)
    batch = [candidates.BenchJob(f"job{i}", problem, "source", "triton", "correct") for i in range(3)]
    results, wall, _ = timed_batch(OutOfOrder(), batch)
    out, err = capsys.readouterr()
    assert out == "" and len(results) == 3 and wall >= 0
    lines = err.splitlines()
    assert [re.sub(r", \d+s\]", "]", x) for x in lines] == ["[1/3] job2: correct", "[2/3] job1: correct",
                                                            "[3/3] job0: incorrect"]
