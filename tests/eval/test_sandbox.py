"""Filesystem isolation of workers and authenticated cache entries.

On this machine and in CI `unshare -m` works (as root; `unshare -U -r -m` otherwise), so a
worker must see the filesystem read-only except its own folder and the build folders, and
must say so (`filesystem_isolated`). A blocked write is just an error inside the candidate:
a candidate that needs to write there fails like any other candidate whose forward raises
(`runtime_error`); one that swallows the error is judged on its outputs as usual.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eval import EvalConfig, Evaluator, Status
from eval.crossing import protocol as p
from eval.cache import JsonCache
from eval.process.confine import PROJECT_ROOT, SandboxPlan
from eval.process.sandbox import (UNPRIVILEGED_UID, WorkerProcess, check_identity, identity_problem,
                                  sandbox_plan)
from problems.problem import problem_from_source
from harness.corpus.hostile import FORWARD, GOOD, PROBLEM, RELU, variant
from tests.machine import MOUNT_NS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # every test runs sandboxed evaluator workers


def writes(path: str, swallow: bool = False) -> str:
    """The honest candidate, which writes a file at `path` during forward (and raises if it cannot, unless swallowed)."""
    body = f"        open({path!r}, 'w').write('planted')\n"
    if swallow:
        body = "        try:\n    " + body + "        except OSError:\n            pass\n"
    return variant(FORWARD, body + FORWARD)


EVALUATOR = dict(device="cpu", cache_dir=None, import_timeout_s=30, call_timeout_s=20)


def test_the_plan_matches_the_machine():
    assert sandbox_plan().filesystem is MOUNT_NS
    if MOUNT_NS and os.geteuid() == 0:
        assert sandbox_plan().uid == 65534  # the interpreter is bound back into the masked home, so uid 65534 runs it


# Kills every process it can see or signal outside its own sandbox (the harness, other workers), and answers
# wrongly if it saw any: the verdict shows whether the worker can reach processes beyond its namespace.
SIGNALS_OUTSIDE = variant(FORWARD, """        import os, signal
        me = os.getpid()
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
        for pid in others + [os.getppid()] * (os.getppid() != 0):  # (pid 0 would mean its own process group)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        if others or os.getppid() != 0:
            return torch.zeros_like(a)
""" + FORWARD)


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_a_worker_can_neither_see_nor_signal_processes_outside_its_sandbox():
    # in a child process, so that a hole kills that process, not the test run
    script = f"""
import json
from eval import EvalConfig, Evaluator, Job
from problems.problem import problem_from_source
from tests.eval.test_sandbox import SIGNALS_OUTSIDE
from harness.corpus.hostile import GOOD, PROBLEM
problem = problem_from_source(PROBLEM, name="add_relu")
with Evaluator(EvalConfig(device="cpu", cache_dir=None, workers_per_gpu=2, import_timeout_s=30, call_timeout_s=20)) as ev:
    results = ev.evaluate_many([Job(problem, SIGNALS_OUTSIDE), Job(problem, GOOD)])
print(json.dumps([r.status.value for r in results]))
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"the harness process died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["correct", "correct"], proc.stdout[-2000:]
    assert sandbox_plan().processes, sandbox_plan().prefix


def test_honest_candidate_reports_isolation(evaluator, problem):
    r = evaluator.evaluate(problem, GOOD)
    assert r.status is Status.CORRECT, r.reason + r.error
    assert r.filesystem_isolated is MOUNT_NS
    assert r.network_isolated is True
    assert r.unprivileged is (os.geteuid() == 0 and MOUNT_NS) or not MOUNT_NS


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
@pytest.mark.parametrize("where", ["var_tmp", "project", "home"])
def test_writes_outside_the_worker_folder_fail(evaluator, problem, where, tmp_path_factory):
    target = {"var_tmp": Path("/var/tmp") / f"kh-planted-{os.getpid()}",
              "project": PROJECT_ROOT / f".kh-planted-{os.getpid()}",
              "home": Path.home() / f".kh-planted-{os.getpid()}"}[where]
    try:
        r = evaluator.evaluate(problem, writes(str(target)))
        assert r.status is Status.RUNTIME_ERROR, r.reason + r.error
        assert "Read-only file system" in r.error or "Permission denied" in r.error or "No such file" in r.error, r.error
        assert not target.exists()
        swallowed = evaluator.evaluate(problem, writes(str(target), swallow=True))
        assert swallowed.status is Status.CORRECT, swallowed.reason + swallowed.error  # still judged on its outputs
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)


def test_writes_inside_the_worker_folder_work(evaluator, problem):
    r = evaluator.evaluate(problem, writes("scratch.txt"))
    assert r.status is Status.CORRECT, r.reason + r.error


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_tmp_is_private_writable_and_capped(evaluator, problem):
    """A candidate that builds or writes under /tmp works (e.g. /tmp/cuda_extensions), in a tmpfs of its own: the
    host never sees the file, and the tmpfs's caps on bytes and files hold (ENOSPC past them)."""
    target = Path("/tmp") / f"kh-private-{os.getpid()}" / "build.o"
    r = evaluator.evaluate(problem, variant(FORWARD, f"""        import os
        os.makedirs({str(target.parent)!r}, exist_ok=True)
        open({str(target)!r}, 'w').write('object')
        st = os.statvfs('/tmp')
        if st.f_blocks * st.f_frsize > (2 << 30) or st.f_files > 50000:
            raise RuntimeError(f'/tmp is not capped: {{st.f_blocks * st.f_frsize}} bytes, {{st.f_files}} files')
""" + FORWARD))
    assert r.status is Status.CORRECT, r.reason + r.error
    assert not target.parent.exists()  # the host's /tmp never had it


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_too_many_files_in_tmp_fail_at_the_cap(evaluator, problem):
    """The 200,000-file attack: the private /tmp runs out of inodes at its cap, an error inside the candidate."""
    r = evaluator.evaluate(problem, variant(FORWARD, """        import os
        os.makedirs('/tmp/many', exist_ok=True)
        for i in range(60000):
            open(f'/tmp/many/{i}', 'w').close()
""" + FORWARD))
    assert r.status is Status.RUNTIME_ERROR, r.reason + r.error
    assert "No space left on device" in r.error, r.error
    assert "a sandbox limit was hit" in r.reason and "nr_inodes=50000" in r.reason, r.reason


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_the_worker_folder_is_private_and_capped(evaluator, problem):
    """The 8 GiB-in-its-folder attack: the worker's own folder (its cwd) is a private tmpfs over the host folder's
    path, capped in bytes (`confine.PRIVATE_OWN`): a file past the cap fails with ENOSPC, the verdict names the limit,
    and nothing of it reaches the host's disk (the folder is a tmpfs mount of its own)."""
    r = evaluator.evaluate(problem, variant(FORWARD, """        import os
        st = os.statvfs('.')
        if st.f_blocks * st.f_frsize > (4 << 30) or st.f_files > 100000:
            raise RuntimeError(f'the worker folder is not capped: {st.f_blocks * st.f_frsize} bytes, {st.f_files} files')
        own = [line for line in open('/proc/self/mountinfo') if line.split()[4] == os.getcwd()]
        if not own or ' - tmpfs ' not in own[-1]:
            raise RuntimeError(f'the worker folder is not a private tmpfs: {own}')
        with open('big.bin', 'wb') as f:  # 5 GiB at once: no write loop whose speed a busy host decides
            os.posix_fallocate(f.fileno(), 0, 5 << 30)
""" + FORWARD))
    assert r.status is Status.RUNTIME_ERROR, r.reason + r.error
    assert "No space left on device" in r.error, r.error
    assert "a sandbox limit was hit" in r.reason and "size=4g" in r.reason, r.reason


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_host_socket_files_are_out_of_reach(evaluator, problem):
    """A world-writable unix socket in the host's /tmp (and one under /run): the candidate's connect() fails,
    because neither file exists in its view, and the listener hears nothing."""
    import socket

    paths = [Path("/tmp") / f"kh-listener-{os.getpid()}.sock"]
    if os.path.isdir("/run") and os.access("/run", os.W_OK):
        paths.append(Path("/run") / f"kh-listener-{os.getpid()}.sock")
    listeners = []
    try:
        for path in paths:
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(str(path))
            os.chmod(path, 0o777)
            srv.listen(4)
            srv.setblocking(False)
            listeners.append(srv)
        body = "        import socket\n"
        for path in paths:
            body += (f"        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                     f"        try:\n            s.connect({str(path)!r})\n            s.sendall(b'leak')\n"
                     f"            raise RuntimeError('reached {path}')\n"
                     f"        except (FileNotFoundError, ConnectionRefusedError, PermissionError):\n            pass\n")
        r = evaluator.evaluate(problem, variant(FORWARD, body + FORWARD))
        assert r.status is Status.CORRECT, r.reason + r.error
        for srv in listeners:
            with pytest.raises(BlockingIOError):
                srv.accept()  # nobody connected
    finally:
        for srv in listeners:
            srv.close()
        for path in paths:
            path.unlink(missing_ok=True)


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_a_0600_file_of_the_harness_user_outside_its_home_is_out_of_sight(evaluator, problem):
    """The view is built, not inherited: a private file of the harness's user in a folder no worker needs
    (here /var/tmp) does not exist for the candidate, whatever uid it runs as, and neither does /etc/shadow's
    content (root's)."""
    secret = Path("/var/tmp") / f"kh-secret-{os.getpid()}"
    secret.write_text("hmac key")
    secret.chmod(0o600)
    try:
        r = evaluator.evaluate(problem, variant(FORWARD, f"""        import os
        if os.path.exists({str(secret)!r}):
            raise RuntimeError('saw the secret')
        try:
            open('/etc/shadow').read()
            raise RuntimeError('read /etc/shadow')
        except (PermissionError, FileNotFoundError):
            pass
""" + FORWARD))
        assert r.status is Status.CORRECT, r.reason + r.error
    finally:
        secret.unlink()


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_solutions_runs_tests_and_caches_of_the_project_are_hidden(evaluator, problem):
    """The plagiarist: a candidate that would execute the harness's own solution (or read a run's store, a test,
    a cache) finds none of them; only the packages a worker imports are bound back."""
    solution = PROJECT_ROOT / "problems" / "solutions" / "level1" / "13_softmax.py"
    suite_file = PROJECT_ROOT / "problems" / "suite" / "level1" / "13_softmax.py"  # holds its hidden workloads
    assert solution.exists() and suite_file.exists()
    planted = [PROJECT_ROOT / "runs" / f"kh-run-{os.getpid()}" / "config.yaml",
               PROJECT_ROOT / ".eval_cache" / f"kh-{os.getpid()}.json"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("secret")
    try:
        visible = [PROJECT_ROOT / "tests" / "conftest.py", PROJECT_ROOT / "harness" / "corpus" / "hostile.py",
                   PROJECT_ROOT / "README.md"]
        assert all(path.exists() for path in visible)  # each is there on the host, so not seeing it means hidden
        checks = [solution, suite_file, *planted, *visible]
        body = "        import os\n"
        for path in checks:
            body += f"        if os.path.exists({str(path)!r}):\n            raise RuntimeError('saw {path.name}')\n"
        body += f"        assert os.path.isdir({str(PROJECT_ROOT / 'eval')!r})\n"
        r = evaluator.evaluate(problem, variant(FORWARD, body + FORWARD))
        assert r.status is Status.CORRECT, r.reason + r.error
    finally:
        for path in planted:
            path.unlink(missing_ok=True)
        shutil.rmtree(PROJECT_ROOT / "runs" / f"kh-run-{os.getpid()}", ignore_errors=True)


@pytest.mark.skipif(not MOUNT_NS or not os.listdir("/sys/fs/cgroup"), reason="no mount namespaces or no cgroup tree")
def test_the_cgroup_tree_is_out_of_sight_and_the_rest_of_sys_stays(evaluator, problem):
    """The host's cgroup tree lists every worker's cgroup with its processes (host pids) and memory: a candidate
    that reads it learns about the others. The worker finds /sys/fs/cgroup empty and not writable, and the rest
    of /sys (devices, buses: what CUDA reads) there."""
    assert os.listdir("/sys/devices")
    body = """        import os
        if os.listdir("/sys/fs/cgroup"):
            raise RuntimeError("saw the cgroup tree: " + ",".join(sorted(os.listdir("/sys/fs/cgroup"))[:5]))
        try:
            open("/sys/fs/cgroup/planted", "w")
        except OSError:
            pass
        else:
            raise RuntimeError("wrote into the cgroup tree's place")
        assert os.listdir("/sys/devices")
"""
    r = evaluator.evaluate(problem, variant(FORWARD, body + FORWARD))
    assert r.status is Status.CORRECT, r.reason + r.error


def test_the_worker_is_sent_only_the_public_part_of_its_problem(evaluator):
    """Hidden shapes are checked but never shown, not even to code that searches its own process: the candidate
    looks through every object the worker holds for the problem's module, and answers wrongly if any it finds defines
    `get_extra_inputs` or `META` (the worker is sent `problems.public_source` of the problem)."""
    hidden = PROBLEM + "\n\nMETA = {'small': {}}\n\n\ndef get_extra_inputs():\n    return [[torch.randn(1, 77), torch.randn(1, 77)]]\n"
    body = """        collector = __import__("g" + "c")
        modules = [o for o in collector.get_objects() if type(o).__name__ == "module" and hasattr(o, "get_init_inputs")]
        assert modules, "found no problem module"
        if any(hasattr(m, "get_extra_inputs") or hasattr(m, "META") for m in modules):
            raise RuntimeError("saw the hidden workloads")
"""
    r = evaluator.evaluate(problem_from_source(hidden, name="add_relu_hidden"), variant(FORWARD, body + FORWARD))
    assert r.status is Status.CORRECT, r.reason + r.error
    assert "extra0" in r.workloads or r.trials > 5, r.workloads  # the hidden shapes were still judged


SHM_KEY_HOST, SHM_KEY_WORKER = 0x4B480000 + os.getpid() % 0xFFFF, 0x4B470000 + os.getpid() % 0xFFFF


def _shm_keys() -> set[int]:
    """The System V shared-memory keys this process's IPC namespace holds."""
    with open("/proc/sysvipc/shm") as listing:
        return {int(line.split()[0]) for line in list(listing)[1:] if line.split()}


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_system_v_ipc_and_the_host_name_are_the_workers_own(evaluator, problem):
    """System V shared memory is a namespace's, not a process's: without an IPC namespace of its own, a worker
    would see the host's segments and other workers', and a segment it leaves behind would outlive it (and its
    memory limit). The candidate answers wrongly if it sees the host's namespaces or the host's segment; the one it
    makes and leaves must be gone with it."""
    libc = ctypes.CDLL(None, use_errno=True)
    host_segment = libc.shmget(SHM_KEY_HOST, 4096, 0o1600)  # IPC_CREAT | 0600
    assert host_segment >= 0, os.strerror(ctypes.get_errno())
    try:
        namespaces = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("ipc", "uts")}
        body = f"""        import ctypes, os
        for kind, host in {namespaces!r}.items():
            if os.readlink(f"/proc/self/ns/{{kind}}") == host:
                raise RuntimeError(f"shares the host's {{kind}} namespace")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.shmget({SHM_KEY_HOST}, 0, 0) >= 0:
            raise RuntimeError("reached the host's shared memory segment")
        assert libc.shmget({SHM_KEY_WORKER}, 1 << 20, 0o1666) >= 0  # made, never removed
"""
        r = evaluator.evaluate(problem, variant(FORWARD, body + FORWARD))
        assert r.status is Status.CORRECT, r.reason + r.error
        assert r.ipc_isolated is True
        assert SHM_KEY_HOST in _shm_keys() and SHM_KEY_WORKER not in _shm_keys()
    finally:
        libc.shmctl(host_segment, 0, None)  # IPC_RMID


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_parent_home_is_hidden(evaluator, problem, tmp_path):
    home_file = Path.home() / f".kh-secret-{os.getpid()}"
    home_file.write_text("secret")
    try:
        source = variant(FORWARD, f"        import os\n        if os.path.exists({str(home_file)!r}):\n"
                                  "            raise RuntimeError('saw the home folder')\n" + FORWARD)
        r = evaluator.evaluate(problem, source)
        assert r.status is Status.CORRECT, r.reason + r.error
    finally:
        home_file.unlink()


def test_probe_is_truthful_without_a_sandbox():
    worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=4096, isolate_network=True, isolate_filesystem=False)
    try:
        reply, _ = worker.request(p.Hello(device="cpu"), timeout=120)
    finally:
        worker.close()
    assert reply.info["filesystem_isolated"] is False


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_triton_cache_and_temporary_files_work_in_the_sandbox():
    worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=4096, isolate_network=True)
    try:
        reply, _ = worker.request(p.Hello(device="cpu"), timeout=120)
        assert reply.info["filesystem_isolated"] is True and reply.info["network_isolated"] is True
        load, _ = worker.request(p.Load(problem_source=PROBLEM, candidate_source=variant(FORWARD, """        import os, tempfile
        with tempfile.NamedTemporaryFile() as f:
            f.write(b'x')
        cache = os.environ['TRITON_CACHE_DIR']
        os.makedirs(cache, exist_ok=True)
        open(os.path.join(cache, 'probe'), 'w').write('x')
        open('/dev/shm/kh-probe', 'w').write('x')
""" + FORWARD), weight_seed=1), timeout=120)
        assert load.ok, load.error
        import torch

        run, out = worker.request(p.Run(args=[{"t": 0}, {"t": 1}]), [torch.randn(4096), torch.randn(4096)], timeout=60)
        assert run.ok, run.error
    finally:
        worker.close()
    assert not Path("/dev/shm/kh-probe").exists()  # the worker's /dev/shm is its own


# -- the result cache ---------------------------------------------------------------------------
def test_cache_roundtrip_and_key_file(tmp_path):
    cache = JsonCache(tmp_path, "results")
    cache.put("k", {"status": "correct"})
    assert cache.get("k") == {"status": "correct"}
    assert (tmp_path / "hmac.key").stat().st_mode & 0o777 == 0o600
    assert JsonCache(tmp_path, "results").get("k") == {"status": "correct"}  # same key across sessions


def _first_use(root: str, barrier) -> str:
    barrier.wait()
    return JsonCache(root, "results")._secret.hex()


def test_processes_opening_a_fresh_cache_at_once_all_get_its_one_key(tmp_path):
    """Ray actors (or harness processes) sharing one `cache_dir` start together: none may read a key file that
    another has created but not yet written, and all must end up with the same key."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(8) as pool:
        for round_ in range(10):
            root = tmp_path / f"cache{round_}"
            barrier = manager.Barrier(8)
            keys = pool.starmap(_first_use, [(str(root), barrier)] * 8)
            assert len(set(keys)) == 1 and (root / "hmac.key").read_text().strip() == keys[0]
            assert sorted(p.name for p in root.iterdir()) == ["hmac.key", "results"]  # no temporary file left


@pytest.mark.parametrize("tamper", ["plain_json", "edited_value", "moved_to_other_key", "forged_mac", "garbage"])
def test_planted_or_modified_cache_entries_are_ignored(tmp_path, tamper):
    cache = JsonCache(tmp_path, "results")
    cache.put("k", {"status": "incorrect"})
    entry = json.loads((cache.dir / "k.json").read_text())
    target = cache.dir / "k.json"
    if tamper == "plain_json":  # the format before authentication, or a naive forgery
        target.write_text(json.dumps({"status": "correct", "speedup": 100.0}))
    elif tamper == "edited_value":
        entry["value"] = entry["value"].replace("incorrect", "correct")
        target.write_text(json.dumps(entry))
    elif tamper == "moved_to_other_key":
        target = cache.dir / "other.json"
        target.write_text(json.dumps(entry))
    elif tamper == "forged_mac":
        entry["value"] = json.dumps({"status": "correct"})
        entry["mac"] = "0" * 64
        target.write_text(json.dumps(entry))
    else:
        target.write_bytes(b"\x00\xff not json")
    assert cache.get(target.stem) is None


def test_planted_result_is_evaluated_again(tmp_path):
    problem = problem_from_source(PROBLEM, name="add_relu")
    wrong = variant(RELU, "(a + b)")
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path))) as ev:
        first = ev.evaluate(problem, wrong)
        assert first.status is Status.INCORRECT
        for path in (tmp_path / "results").glob("*.json"):  # plant a correct verdict, without the key
            forged = dict(first.to_dict(), status="correct", reason="correct", speedup=50.0)
            path.write_text(json.dumps(forged))
        again = ev.evaluate(problem, wrong)
    assert not again.cached and again.status is Status.INCORRECT


# -- the worker's identity ----------------------------------------------------------------------
@pytest.mark.parametrize("plan, euid, nobody_runs, refused", [
    (SandboxPlan(("unshare", "-m", "-n", "--"), UNPRIVILEGED_UID), 0, False, False),  # root: uid 65534, built view
    (SandboxPlan(("unshare", "-U", "-r", "-m", "-n", "--")), 1001, False, False),  # non-root: its uid, built view
    (SandboxPlan(("unshare", "-m", "-n", "--")), 0, True, True),  # root keeping uid 0: reads root's files in view
    (SandboxPlan(note="mount namespaces are not permitted here"), 0, True, False),  # root, no view: uid 65534
    (SandboxPlan(note="mount namespaces are not permitted here"), 0, False, True),
    (SandboxPlan(note="mount namespaces are not permitted here"), 1001, False, True),  # its uid, all its files
])
def test_candidate_code_never_runs_with_the_harness_identity_unless_allowed(plan, euid, nobody_runs, refused):
    problem = identity_problem(plan, euid, nobody_runs)
    assert (problem is not None) is refused
    if refused:
        assert f"as uid {euid}" in problem and "eval.allow_unconfined_workers=true" in problem
        assert "\n" not in problem


def test_the_evaluator_starts_here_only_with_a_confinement_that_drops_the_identity():
    """On this machine (root with uid 65534, or a user namespace) the check passes; the same check with the plan
    this machine would fall back to without namespaces is what `KH_NO_FS_SANDBOX` exercises."""
    check_identity(allow=False)  # raises SandboxRefused where the machine offers no such confinement
    env = dict(os.environ, KH_NO_FS_SANDBOX="1")
    code = ("import os\nfrom eval.process.sandbox import check_identity, SandboxRefused\n"
            "try:\n    check_identity(allow=False)\n    print('started')\n"
            "except SandboxRefused as exc:\n    print('refused:', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT,
                         timeout=300).stdout
    if os.geteuid() == 0:  # root without namespaces: uid 65534 if it can run the interpreter, else refused
        assert out.startswith("started") or "as uid 0" in out, out
    else:
        assert out.startswith("refused:") and f"as uid {os.geteuid()}" in out, out


# -- resource limits ----------------------------------------------------------------------------
def test_a_worker_over_its_memory_limit_is_killed_and_the_verdict_names_the_limit(problem):
    """The 4 GiB host-RAM attack: the parent's watchdog sums the worker's process tree (children included) and
    kills it over `eval.max_worker_memory_gib`; the verdict names the limit. An honest candidate under the same
    limit is correct."""
    hog = variant(FORWARD, """        import os, time
        if os.fork() == 0:  # the memory is held by a child: the whole tree counts
            held = b'x' * (3 << 30)
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
""" + FORWARD)
    with Evaluator(EvalConfig(device="cpu", cache_dir=None, max_worker_memory_gib=1.5, call_timeout_s=120)) as ev:
        honest = ev.evaluate(problem, GOOD)
        r = ev.evaluate(problem, hog)
    assert honest.status is Status.CORRECT, honest.reason + honest.error
    assert r.status is Status.CRASH, f"{r.status}: {r.reason} {r.error}"
    assert "over the limit of 1.5 GiB per worker (eval.max_worker_memory_gib)" in r.reason + r.error, r.reason


MEMFD_HOG = variant(FORWARD, """        import os, time
        fd = os.memfd_create("held")  # filled through write(), never mapped: no process's Pss shows it
        for _ in range(40):
            os.write(fd, b"x" * (64 << 20))
        time.sleep(60)
""" + FORWARD)


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_memory_the_worker_never_maps_counts_against_its_limit(problem):
    """2.5 GiB in a memfd that is never mapped (and so in no Pss) is charged to the worker's memory cgroup, where
    the host allows one (`eval.process._memcg`), and the worker is killed over its limit like any other; where the host
    allows none, the result says the Pss alone held it (and the memfd goes unseen: a known limit)."""
    from eval.process import _memcg

    with Evaluator(EvalConfig(device="cpu", cache_dir=None, max_worker_memory_gib=1.5, call_timeout_s=120)) as ev:
        honest = ev.evaluate(problem, GOOD)
        r = ev.evaluate(problem, MEMFD_HOG)
    assert honest.status is Status.CORRECT, honest.reason + honest.error
    if _memcg.base() is None:
        assert honest.memory_accounting == "pss"
        pytest.skip("no memory cgroup can be made on this host")
    assert honest.memory_accounting == r.memory_accounting == "cgroup"
    assert r.status is Status.CRASH, f"{r.status}: {r.reason} {r.error}"
    assert "over the limit of 1.5 GiB per worker (eval.max_worker_memory_gib)" in r.reason + r.error, r.reason
    assert "shared memory, memfd and tmpfs pages counted" in r.reason + r.error


def _bomb(hold_s: float) -> str:
    """The honest candidate, whose first forward forks until refused, holds its children `hold_s` seconds, then
    raises saying how many it got."""
    return variant(FORWARD, f"""        import os, time
        kids = []
        try:
            for _ in range(2000):
                pid = os.fork()
                if pid == 0:
                    time.sleep(600)
                    os._exit(0)
                kids.append(pid)
        except BlockingIOError as exc:
            time.sleep({hold_s})
            raise RuntimeError(f'fork failed after {{len(kids)}} children: {{exc}}')
        finally:
            for pid in kids:
                os.kill(pid, 9)
""" + FORWARD)


def _expected_process_limit() -> str:
    """The plan this machine gives (`eval.process._pids`): the test user's cgroup rights decide it."""
    from eval.process import _pids as pids
    from eval.process.sandbox import process_limit_plan
    return process_limit_plan(sandbox_plan()) if pids.cgroup_base() is None else "cgroup"


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_a_fork_bomb_stops_at_the_process_limit_and_the_verdict_names_it(problem):
    """Forking past `eval.max_worker_processes` fails with EAGAIN inside the candidate (its own cgroup's pids.max, or
    RLIMIT_NPROC in its own user namespace); the verdict names the limit, its setting and the plan; the honest
    candidate under the same limit passes."""
    with Evaluator(EvalConfig(device="cpu", cache_dir=None, max_worker_processes=200)) as ev:
        honest = ev.evaluate(problem, GOOD)
        r = ev.evaluate(problem, _bomb(0))
    assert honest.status is Status.CORRECT, honest.reason + honest.error
    assert honest.process_limit == r.process_limit == _expected_process_limit(), r.process_limit
    assert r.status is Status.RUNTIME_ERROR, f"{r.status}: {r.reason} {r.error}"
    assert "fork failed after" in r.error and "Resource temporarily unavailable" in r.error, r.error
    assert "at the limit of 200 processes and threads per worker (eval.max_worker_processes;" in r.reason, r.reason
    if r.process_limit == "cgroup":  # the kernel's own count, not the candidate's text
        assert "the kernel refused" in r.reason, r.reason


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_a_fork_bomb_that_keeps_forking_at_the_limit_is_judged_as_the_limit_not_as_a_timeout(problem):
    """A bomb that swallows every refused fork and tries again never raises: its call runs out of time. Where the
    kernel counts the refusals (the cgroup plan), the verdict is the limit it hit, a runtime error naming it."""
    spinning = variant(FORWARD, """        import os, signal
        while True:
            try:
                if os.fork() == 0:
                    signal.pause()
            except BlockingIOError:
                pass
""" + FORWARD)
    with Evaluator(EvalConfig(device="cpu", cache_dir=None, max_worker_processes=200, call_timeout_s=20)) as ev:
        r = ev.evaluate(problem, spinning)
    if r.process_limit != "cgroup":
        assert r.status is Status.TIMEOUT, f"{r.status}: {r.reason}"  # no count of refusals to judge it by
        return
    assert r.status is Status.RUNTIME_ERROR, f"{r.status}: {r.reason} {r.error}"
    assert r.reason.startswith("a sandbox limit was hit: the kernel refused"), r.reason
    assert "at the limit of 200 processes and threads per worker" in r.reason and "ran out of time" in r.reason


def _tasks_under(root: int) -> int:
    """Tasks (threads included) that process `root` and its descendants hold: the bomb's own count, which other
    processes of the same uid on this machine (other tests, other runs) do not move."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(pid))
    count, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
        todo += children.get(pid, [])
    return count


def _load(worker: WorkerProcess, candidate: str) -> p.LoadReply:
    """Greet `worker` and load the add_relu problem with `candidate` (whose import runs in the worker)."""
    hello, _ = worker.request(p.Hello(device="cpu", capture_key=1), timeout=600)
    assert hello.ok, hello.error
    reply, _ = worker.request(p.Load(problem_source=PROBLEM, problem_label="<add_relu>", candidate_source=candidate,
                                     weight_seed=1), timeout=600)
    return reply


@pytest.mark.skipif(not MOUNT_NS or _expected_process_limit() == "uid",
                    reason="no per-worker process limit here (mount namespaces, or a cgroup or user namespace)")
def test_a_fork_bomb_in_one_worker_leaves_a_concurrent_worker_its_own_budget():
    """The process limit is per worker: while one worker's candidate holds every task its limit allows (children that
    sleep until the worker is killed), another worker of the same uid, alive at the same time, still starts 150
    threads (a limit counted per uid, as RLIMIT_NPROC alone is, would refuse them)."""
    bomb = """import os, time
held = 0
try:
    for _ in range(2000):
        if os.fork() == 0:
            time.sleep(3600)
            os._exit(0)
        held += 1
except BlockingIOError:
    pass
""" + GOOD
    threads = """import threading, time
started = [threading.Thread(target=time.sleep, args=(0.5,)) for _ in range(150)]
for t in started:
    t.start()
for t in started:
    t.join()
""" + GOOD
    bomber = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=4096, isolate_network=True, max_processes=300)
    honest = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=4096, isolate_network=True, max_processes=300)
    try:
        before = _tasks_under(bomber.proc.pid)
        bombed = _load(bomber, bomb)  # returns with its children still holding their tasks
        held = _tasks_under(bomber.proc.pid) - before
        loaded = _load(honest, threads)
        assert bomber.alive()
    finally:
        bomber.kill()
        honest.kill()
    assert bombed.ok, bombed.error
    assert held >= 250, f"the bomb held only {held} tasks"
    assert loaded.ok, loaded.error


def test_an_import_path_that_is_or_holds_a_shared_area_is_not_bound(monkeypatch):
    """A harness started by a script in /tmp (or in a home) has that folder on sys.path. Bound whole, it showed the
    worker the host's /tmp (its socket files) or the home; it also broke the built root, so the evaluator refused to
    start. Such a path is left out; a package folder inside one (say /tmp/site on PYTHONPATH) is still bound."""
    import tempfile

    from eval.process.confine import _needed_paths

    site = Path(tempfile.mkdtemp(prefix="kh-test-site-"))
    try:
        monkeypatch.setattr(sys, "path", [tempfile.gettempdir(), os.path.expanduser("~"), "/", str(site), *sys.path])
        bound = _needed_paths()
        for shared in (tempfile.gettempdir(), os.path.expanduser("~"), "/"):
            assert os.path.realpath(shared) not in bound, (shared, bound)
        assert str(site.resolve()) in bound, bound
    finally:
        site.rmdir()
