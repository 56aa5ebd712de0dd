"""`executor=ray` on a real local Ray cluster (CPU, Triton interpreter): same verdicts as `executor=local`,
every attempt recorded exactly once when an actor is killed mid-run, duplicates evaluated once, no
secret in the actors' environment, and clear errors for bad settings.

Nothing here is mocked: each test starts Ray (a local instance or `ray start --head`) and real
evaluator actors, each owning a real `Evaluator` with one sandboxed worker.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from eval.config import EvalConfig
from eval.result import Status
from harness.executors import ExecutorConfig, ExecutorError, RayEvaluator
from problems.problem import load_problem_file
from tests.paths import REPO
from tests.run_fixtures import GOOD, WRONG, write_problem
from tests.serve_fixtures import free_port

# hang guards only: a test here runs up to three harness runs, and one took over 400 s on a loaded 2-core machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

try:
    import ray
except ImportError:  # the README's test command installs the extra; a missing one must not pass silently
    ray = None


@pytest.fixture(scope="module")
def ray_module() -> Any:
    if ray is None:
        pytest.fail('the ray extra is not installed: pip install -e ".[cpu,test,ray,rl]" (the README test command)')
    return ray


def harness_run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
                timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "run", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd or REPO)


def smoke_args(tmp: Path, name: str, *extra: str) -> list[str]:
    """problems=smoke under the interpreter with one worker per actor and no cache (every candidate runs)."""
    return [f"runs_dir={tmp / 'runs'}", "problems=smoke", f"name={name}", "eval.workers_per_gpu=1",
            "eval.cache_dir=null", "quiet=true", *extra]


def results(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]


def attempt_keys(run_dir: Path) -> list[tuple[str, int, int]]:
    conn = sqlite3.connect(f"file:{run_dir / 'attempts.sqlite'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT problem_id, sample, turn FROM attempts").fetchall()
    finally:
        conn.close()


def test_ray_smoke_has_the_same_verdicts_as_local(ray_module: Any, tmp_path: Path) -> None:
    local = harness_run(*smoke_args(tmp_path, "local-smoke"))
    assert local.returncode == 0, local.stderr
    distributed = harness_run(*smoke_args(tmp_path, "ray-smoke", "executor=ray", "executor.num_actors=2"))
    assert distributed.returncode == 0, distributed.stderr

    def verdicts(name: str) -> dict[tuple[str, int, int], str]:
        return {(r["problem_id"], r["sample"], r["turn"]): r["status"] for r in results(tmp_path / "runs" / name)}

    expected = verdicts("local-smoke")
    assert len(expected) == 6 and verdicts("ray-smoke") == expected
    ray_results = [r["result"] for r in results(tmp_path / "runs" / "ray-smoke")]
    local_results = [r["result"] for r in results(tmp_path / "runs" / "local-smoke")]
    assert {r["node"] for r in ray_results} == {socket.gethostname()} == {r["node"] for r in local_results}
    assert all(set(a) == set(b) for a, b in zip(ray_results, local_results))  # one schema for both executors
    again = harness_run(*smoke_args(tmp_path, "ray-smoke"))  # the executor may change on resume
    assert again.returncode == 0, again.stderr
    assert len(results(tmp_path / "runs" / "ray-smoke")) == 6


@pytest.fixture(scope="module")
def ray_head(ray_module: Any) -> Iterator[str]:
    """A Ray cluster started the way the README says (`ray start --head`), shared by the tests that join one (each
    runs its own driver and actors, and checks only those), stopped by its own process group
    (never `ray stop`, which would end every Ray instance on the machine). Token authentication is off so
    that its explicit address can be joined (with a token, `auto` or RAY_AUTH_MODE=token would be needed)."""
    ray_bin = Path(sys.executable).parent / "ray"
    address = f"127.0.0.1:{free_port()}"
    head = subprocess.Popen([str(ray_bin), "start", "--head", f"--port={address.rsplit(':', 1)[1]}", "--num-cpus=2",
                             "--node-ip-address=127.0.0.1", "--block", "--include-dashboard=false",
                             "--disable-usage-stats",
                             f"--ray-client-server-port={free_port()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    try:
        # ready when a driver can join it; on a busy machine a join can hang past its own timeout, which
        # is a retry, not a failure: only the head's death or a generous deadline ends the wait
        deadline = time.monotonic() + 600
        while True:
            try:
                probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address='{address}', "
                                        "logging_level='ERROR')"], capture_output=True, text=True, timeout=180)
                if probe.returncode == 0:
                    break
                failure = probe.stderr[-2000:]
            except subprocess.TimeoutExpired as hung:
                failure = f"a join hung past 180 s: {(hung.stderr or b'')[-2000:]!r}"
            assert head.poll() is None and time.monotonic() < deadline, f"ray start failed: {failure}"
            time.sleep(2)
        yield address
    finally:
        for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 0)):  # GCS and monitor outlive a TERM
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(grace)
        head.wait(timeout=30)
        current = Path("/tmp/ray/ray_current_cluster")  # `ray start` left its address for `auto`: not after us
        if current.exists() and address.rsplit(":", 1)[1] in current.read_text():
            current.unlink()


def test_an_actor_killed_mid_run_loses_and_duplicates_nothing(ray_module: Any, ray_head: str, tmp_path: Path
                                                              ) -> None:
    # 6 evaluations without the cache, one at a time on each of two actors: after the first is recorded,
    # both actors hold one, and one actor is killed
    args = smoke_args(tmp_path, "ray-kill", "executor=ray", "executor.num_actors=2", f"executor.address={ray_head}")
    run = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=REPO)
    out: dict[str, str] = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), run.communicate())), daemon=True)
    reader.start()
    db = tmp_path / "runs" / "ray-kill" / "attempts.sqlite"
    ray_module.init(address=ray_head, logging_level="ERROR")
    try:
        deadline = time.monotonic() + 300
        while not (db.exists() and attempt_keys(db.parent)):  # mid-run: one attempt recorded, others in flight
            assert reader.is_alive(), f"the run ended before any attempt: {out.get('stderr')}"
            assert time.monotonic() < deadline, "no attempt was recorded in time"
            time.sleep(0.1)
        actors = [a for a in ray_module.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == "kernel-harness" and a["name"].startswith("kh-eval-")]
        assert len(actors) == 2, actors
        ray_module.kill(ray_module.get_actor(actors[0]["name"], namespace="kernel-harness"), no_restart=True)
        killed = actors[0]["name"]
    finally:
        ray_module.shutdown()
    reader.join(timeout=1200)
    assert not reader.is_alive(), "the run hung after its actor was killed"
    assert run.returncode == 0, out.get("stderr")
    keys = attempt_keys(db.parent)
    assert len(keys) == 6 and not [k for k, n in Counter(keys).items() if n > 1]  # none missing, none twice
    assert {(p, s, t) for p, s, t in keys} == {(r["problem_id"], r["sample"], r["turn"])
                                                for r in results(db.parent)}
    assert f"evaluator actor {killed}" in out["stderr"] and "died" in out["stderr"]
    assert "retrying" in out["stderr"], out["stderr"]  # it had an evaluation in flight, sent to the other actor
    assert {r["status"] for r in results(db.parent)} == {"correct"}


def test_a_driver_killed_mid_run_resumes_with_nothing_lost_or_twice(ray_module: Any, ray_head: str, tmp_path: Path
                                                                   ) -> None:
    """`kill -9` of `harness run executor=ray` once an attempt is recorded: its actors end with its Ray job, and the
    same command resumes the run to completion, each attempt recorded once."""
    args = smoke_args(tmp_path, "ray-driver", "executor=ray", "executor.num_actors=2", f"executor.address={ray_head}")
    run = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *args], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, cwd=REPO)
    db = tmp_path / "runs" / "ray-driver" / "attempts.sqlite"
    deadline = time.monotonic() + 300
    while not (db.exists() and attempt_keys(db.parent)):
        assert run.poll() is None, "the run ended before any attempt was recorded"
        assert time.monotonic() < deadline, "no attempt was recorded in time"
        time.sleep(0.1)
    run.kill()
    run.wait()
    before = attempt_keys(db.parent)
    assert 1 <= len(before) < 6, before  # killed mid-run
    ray_module.init(address=ray_head, logging_level="ERROR")
    try:
        deadline = time.monotonic() + 300  # hang guards here are minutes: Ray's cleanup runs late on a busy machine
        while [a for a in ray_module.util.list_named_actors(all_namespaces=True) if a["namespace"] == "kernel-harness"]:
            assert time.monotonic() < deadline, "the killed driver's actors outlived it"
            time.sleep(0.5)
    finally:
        ray_module.shutdown()
    resumed = harness_run(*args)
    assert resumed.returncode == 0, resumed.stderr
    keys = attempt_keys(db.parent)
    assert len(keys) == 6 and not [k for k, n in Counter(keys).items() if n > 1], keys
    assert set(before) <= set(keys)
    assert {r["status"] for r in results(db.parent)} == {"correct"} and len(results(db.parent)) == 6


def test_ray_evaluator_retries_dedupes_and_gets_no_secrets(ray_module: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KH_TEST_API_KEY", "sk-must-not-leave-the-driver")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-neither")
    problem = load_problem_file(write_problem(tmp_path / "problems"))
    config = EvalConfig(workers_per_gpu=1, trials=2, cache_dir=str(tmp_path / "cache"))
    lines: list[str] = []
    with RayEvaluator(config, ExecutorConfig(kind="ray", num_actors=2), log=lines.append) as ev:
        assert os.environ["KH_TEST_API_KEY"] == "sk-must-not-leave-the-driver"  # hidden from Ray only, then back
        for actor in ev.actors:
            names = ray_module.get(ray_module.get_actor(actor["name"], namespace="kernel-harness")
                                   .environment_names.remote())
            assert "KH_TEST_API_KEY" not in names and "OPENAI_API_KEY" not in names and "PATH" in names

        # identical candidates at once: one evaluation, the other waits for it
        with_threads: list[Any] = [None] * 3
        sources = [GOOD, GOOD, WRONG]

        def one(i: int) -> None:
            with_threads[i] = ev.evaluate(problem, sources[i], "triton")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.status for r in with_threads] == [Status.CORRECT, Status.CORRECT, Status.INCORRECT]
        assert ev.stats["evaluated"] == 2 and ev.stats["deduplicated"] == 1
        assert sorted(r.cached for r in with_threads[:2]) == [False, True]
        assert all(r.node == socket.gethostname() for r in with_threads)

        # kill the actor that holds an evaluation: it is retried on the other and returned once
        done: list[Any] = []
        runner = threading.Thread(target=lambda: done.append(ev.evaluate(problem, GOOD + "\n# v2\n", "triton")))
        runner.start()
        deadline = time.monotonic() + 300
        while not (busy := [s for s in ev._slots if s.in_flight]):
            assert time.monotonic() < deadline, "no actor took the evaluation"
            time.sleep(0.01)
        ray_module.kill(busy[0].handle, no_restart=True)
        runner.join(timeout=300)
        assert len(done) == 1 and done[0].status is Status.CORRECT
        assert ev.stats["retried"] == 1 and ev.stats["actors_lost"] == 1
        assert any("died" in line for line in lines) and any("retrying" in line for line in lines)
        deadline = time.monotonic() + 300
        while len(ev.actors) < 2:  # the replacement joins
            assert time.monotonic() < deadline, lines
            time.sleep(0.2)
        assert busy[0].name not in {a["name"] for a in ev.actors}


def test_bad_executor_settings_are_one_line_errors(ray_module: Any, tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match="num_actors"):
        ExecutorConfig(kind="ray", num_actors=0)
    for bad in (0, True):
        with pytest.raises(ExecutorError, match="executor.cpus_per_actor must be >= 1 or null"):
            ExecutorConfig(kind="ray", cpus_per_actor=bad)
    # ray not installed: a package directory that fails to import stands in for its absence
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(REPO)])}
    missing = harness_run(*smoke_args(tmp_path, "no-ray", "executor=ray"), env=env)
    assert missing.returncode == 2
    assert missing.stderr.strip() == 'error: executor=ray needs the ray package: pip install -e ".[ray]"'
    wrong_group = harness_run(*smoke_args(tmp_path, "local-addr", "executor.address=auto"))
    assert wrong_group.returncode == 2 and "executor.address" in wrong_group.stderr
    too_many = harness_run(*smoke_args(tmp_path, "too-many", "executor=ray", "executor.num_actors=64"))
    assert too_many.returncode == 2 and len(too_many.stderr.strip().splitlines()) == 1
    assert "executor.num_actors=64 needs 64 CPU(s)" in too_many.stderr
    assert not (tmp_path / "runs" / "too-many").exists()


@pytest.mark.parametrize("total, device, cpus_per_actor, expected", [
    ({"CPU": 32.0, "GPU": 2.0}, "cuda", None, ({"num_cpus": 16, "num_gpus": 1}, 2)),  # not 1: torch single-threaded
    ({"CPU": 32.0, "GPU": 2.0}, "cuda", 4, ({"num_cpus": 4, "num_gpus": 1}, 2)),
    ({"CPU": 1.0, "GPU": 2.0}, "cuda", None, ({"num_cpus": 1, "num_gpus": 1}, 2)),
    ({"CPU": 2.0}, "cpu", None, ({"num_cpus": 1, "num_gpus": 0}, 1)),
    ({"CPU": 64.0}, "cpu", None, ({"num_cpus": 1, "num_gpus": 0}, 4)),
])
def test_actor_resources_follow_the_cluster(total, device, cpus_per_actor, expected) -> None:
    from harness.executors import actor_resources

    assert actor_resources(total, device, cpus_per_actor) == expected


def test_a_cuda_evaluator_needs_a_gpu_in_the_cluster() -> None:
    from harness.executors import actor_resources

    with pytest.raises(ExecutorError, match="no GPU"):
        actor_resources({"CPU": 8.0}, "cuda", None)


def test_an_actor_that_cannot_start_says_why(ray_module: Any, tmp_path: Path) -> None:
    """The error names the actor's own exception (the last line of Ray's remote traceback), not only Ray's
    generic first line: here the cache folder is a file on the actor's node."""
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    config = EvalConfig(workers_per_gpu=1, cache_dir=str(not_a_folder))
    with pytest.raises(ExecutorError) as caught:
        RayEvaluator(config, ExecutorConfig(kind="ray", num_actors=1), log=lambda line: None)
    message = str(caught.value)
    assert "failed to start" in message and "Error:" in message.rsplit("...", 1)[-1], message
    assert "cache" in message.rsplit("...", 1)[-1] and "\x1b" not in message and len(message.splitlines()) == 1, message
    assert not ray_module.is_initialized()  # a failed start leaves no Ray instance behind


# declared CUDA, with a kernel of its own in its text: built before it is loaded; its import sleeps, and on a CPU only
# the build worker imports it (a CUDA candidate is not run), so its build lasts at least that long
SLOW_BUILD = '''
import time
import torch.nn as nn

KERNEL = "__global__ void kh_slow_k(float* x) {}"
time.sleep(5)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a + b
'''


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="without nvcc a CPU evaluator builds nothing")
def test_an_actor_builds_ahead_off_its_evaluation_slot(ray_module: Any, tmp_path: Path) -> None:
    """The build runs on the actor beside its evaluation slots: while it runs, the actor's one slot (one warm
    worker) takes another candidate. The built candidate's evaluation then runs on that actor and joins the
    finished build (it waits for no build of its own: one would take the 5 s import again), and the build's
    outcome is its verdict. `prebuild` (what `harness serve` calls as it queues) starts that build early."""
    problem = load_problem_file(write_problem(tmp_path / "problems"))
    config = EvalConfig(device="cpu", workers_per_gpu=1, trials=2, cache_dir=None)
    with RayEvaluator(config, ExecutorConfig(kind="ray", num_actors=1), log=lambda line: None) as ev:
        (slot,) = ev._slots
        ev.prebuild(problem, SLOW_BUILD, "cuda")
        assert slot.building == 1 and slot.in_flight == 0
        other: list[Any] = []
        runner = threading.Thread(target=lambda: other.append(ev.evaluate(problem, GOOD, "triton")))
        runner.start()
        deadline = time.monotonic() + 300  # hang guards only
        while not slot.in_flight:
            assert time.monotonic() < deadline, "the Triton candidate never took the slot"
            time.sleep(0.01)
        assert slot.building == 1  # the slot was taken while the build ran
        runner.join(timeout=600)
        prebuilt = ev.evaluate(problem, SLOW_BUILD, "cuda")
        built_now = ev.evaluate(problem, SLOW_BUILD + "\n# v2\n", "cuda")  # no prebuild: built ahead all the same
        assert [r.status for r in other] == [Status.CORRECT]
        for r in (prebuilt, built_now):
            assert r.status is Status.SKIPPED and "compiled with nvcc" in r.reason, f"{r.status}: {r.reason}"
            assert r.phase_seconds["wait_for_build"] < 5, r.phase_seconds
        assert ev.stats["built_ahead"] == 2 and ev.stats["evaluated"] == 3
        while slot.building:  # the build's end is counted as its reference resolves, beside the evaluation
            assert time.monotonic() < deadline, "a build never ended"
            time.sleep(0.01)
        assert slot.in_flight == 0
