"""Spawning and killing sandboxed worker processes (the parent's side of the trust boundary).

A worker is a fresh interpreter (spawned, never forked) in its own session and process
group, in a fresh temporary directory, with an environment reduced to an allow-list and
scrubbed of anything that looks like a secret, its output captured through a pipe and
capped, and (where the OS allows) no network: `unshare -n` gives it a namespace with only
loopback.

Where the OS allows a mount namespace, the worker runs in a root built for it, without privileges
(`eval.process.confine`: what it sees there, and the command that confines it). Where no confinement
keeps candidate code from the harness's own identity, `check_identity` refuses to start (unless
`eval.allow_unconfined_workers`). Which plan applied is probed once (`sandbox_plan`) and reported per
worker; the worker also probes for itself (`filesystem_isolated`). The parent watches each worker tree's
memory (`eval.process._watchdog`).

Every temporary folder the evaluator makes is named `kh-<kind>-<owner pid>.<start time>-...`
(`eval.process._reaper`), so that the owner's reaper, or the next start-up's sweep, removes it (and stops the
processes in it) however the owner ended, `kill -9` included.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from eval.crossing import protocol
from eval.process._bytecode import interpreter_flags
from eval._kernel_symbols import pin_folder
from eval.process import _freeze as freeze, _memcg as memcg, _pids as pids
from eval.process._capped_output import CappedOutput
from eval.process._reaper import owned_tempdir
from eval.process._watchdog import GIB, WATCH
from eval.process._worker_env import scrubbed_env, worker_env_entries
from eval.process.confine import (
    MAX_PROCESSES,
    PRIVATE_OWN,
    PRIVATE_SHM,
    PRIVATE_TMP,
    SandboxPlan,
    confine_command,
    network_isolation_prefix,
)
from eval.crossing.wire import Channel, ChannelClosed, ChannelTimeout, PayloadTooLarge, ProtocolError, new_region_fd

UNPRIVILEGED_UID = 65534


class WorkerDied(RuntimeError):
    """The worker process exited or was killed; `detail` says how."""

    def __init__(self, detail: str, output: str = ""):
        super().__init__(detail)
        self.detail = detail
        self.output = output


class WorkerTimeout(RuntimeError):
    """The worker did not answer in time and was killed."""

    def __init__(self, detail: str, output: str = ""):
        super().__init__(detail)
        self.detail = detail
        self.output = output


def limit_hit(error: str) -> str:
    """The tmpfs limit that a failure's text shows was hit, as a sentence for the verdict (or "")."""
    if "No space left on device" in error or "[Errno 28]" in error:
        return (f"a sandbox limit was hit: the worker's own folder ({PRIVATE_OWN}), /tmp ({PRIVATE_TMP}) and "
                f"/dev/shm ({PRIVATE_SHM}) are private tmpfs capped in bytes and files (eval/process/confine.py: "
                f"PRIVATE_OWN, PRIVATE_TMP, PRIVATE_SHM)")
    return ""


def _refused_fork(error: str) -> bool:
    """Whether a failure's text shows a refused fork or thread start (EAGAIN)."""
    return "can't start new thread" in error or "[Errno 11] Resource temporarily unavailable" in error


# observed: the reference process alone keeps the host's PID namespace (`WorkerProcess(host_pids=True)`): a CUDA IPC
# handle names its exporter by the pid the exporter sees, so an exporter inside a PID namespace cannot be opened.
# No candidate sees it there: every candidate's worker has a PID namespace of its own.
_PID_NAMESPACE = ("-p", "--kill-child", "--mount-proc")


@functools.lru_cache(maxsize=1)
def sandbox_plan() -> SandboxPlan:
    """The strongest confinement that works here: mount namespace plus uid 65534 (root), plus a user
    namespace without capabilities, or nothing (then only `network_isolation_prefix` applies)."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux") or os.environ.get("KH_NO_FS_SANDBOX"):
        return SandboxPlan(note="no mount namespace: unshare is unavailable or disabled")
    root = os.geteuid() == 0
    gpu = _cuda_visible()
    # a PID namespace too where the kernel allows it: without one, a worker could signal the harness (same
    # uid when not root) or the other workers (uid 65534), e.g. `os.kill(-1, SIGKILL)`
    pid_ns = _PID_NAMESPACE
    ipc_uts = ("-i", "-u")  # System V IPC (shared memory outlives its process otherwise) and the host name
    bases = [(("-m", "-n"), UNPRIVILEGED_UID), (("-m", "-n"), None)] if root else [(("-U", "-r", "-m", "-n"), None)]
    for flags, uid in bases:
        for extra in ((*ipc_uts, *pid_ns), pid_ns, ipc_uts, ()):
            plan = SandboxPlan((unshare, *flags, *extra, "--"), uid)
            if _confinement_works(plan, gpu):
                return plan
    return SandboxPlan(note="mount namespaces are not permitted here")


def process_limit_plan(plan: SandboxPlan) -> str:
    """How a worker confined by `plan` is held to its process limit (`eval.process._pids`): "cgroup", "userns"
    (RLIMIT_NPROC in a user namespace of its own: always so for a non-root harness), "uid" (RLIMIT_NPROC shared by the
    uid) or "none" (no confinement, so no limit)."""
    if not plan.filesystem:
        return "none"
    if pids.cgroup_base() is not None:
        return "cgroup"
    return "userns" if plan.uid is None or _nobody_userns() else "uid"


@functools.lru_cache(maxsize=1)
def _nobody_userns() -> bool:
    """Whether uid 65534 may make a user namespace here (some hosts allow it to root alone)."""
    check = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000) != 0)"
    try:
        return subprocess.run([sys.executable, "-I", "-S", "-c", check], user=UNPRIVILEGED_UID,
                              group=UNPRIVILEGED_UID, extra_groups=[], cwd="/", capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _confinement_works(plan: SandboxPlan, gpu: bool) -> bool:
    """Run a probe confined by `plan` in a fresh folder where workers' folders go (the temporary folder): it must
    import what a worker imports, start CUDA when there is a GPU, and write there."""
    probe_dir = owned_tempdir("probe")  # a fresh one: an earlier attempt may have chowned its own
    own, out = probe_dir / "own", probe_dir / "out"  # its private folder (a tmpfs inside), and one the host sees
    try:
        for folder in (probe_dir, own, out):
            folder.mkdir(exist_ok=True)
            if plan.uid is not None:
                os.chown(folder, plan.uid, plan.uid)
        check = "import statistics, torch, triton" if plan.uid is not None else "import statistics"
        if gpu:  # a confinement the CUDA driver cannot work in is no plan (the next, weaker one is tried)
            check += "; import torch; assert torch.ones(1, device='cuda').sum().item() == 1"
        check += f"; open({str(own / 'scratch')!r}, 'w').write('1'); open({str(out / 'ok')!r}, 'w').write('1')"
        cmd = confine_command(plan, [str(own), str(out)], [sys.executable, "-c", check], network=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=120, cwd="/",
                                  env=scrubbed_env({"HOME": str(probe_dir), "TMPDIR": str(probe_dir)}))
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0 and (out / "ok").exists()
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)


def _cuda_visible() -> bool:
    """Whether this machine shows a CUDA GPU (without creating a CUDA context here)."""
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001  no usable torch: nothing to check
        return False


@functools.lru_cache(maxsize=1)
def can_drop_privileges() -> bool:
    """True when workers run as uid 65534: the harness is root and that user can run this interpreter with torch
    (inside the sandbox, where the parent's home is masked and the interpreter bound back, or without one)."""
    if os.geteuid() != 0:
        return False
    if sandbox_plan().filesystem:
        return sandbox_plan().uid is not None
    return _runs_as_nobody()


@functools.lru_cache(maxsize=1)
def _runs_as_nobody() -> bool:
    """Without a sandbox: can uid 65534 run this interpreter with torch as it is installed, and reach and write a
    folder where workers' folders go (a temporary folder inside a private one is out of its reach)?"""
    probe_dir = owned_tempdir("probe")
    try:
        os.chown(probe_dir, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        check = f"import statistics, torch, triton; open({str(probe_dir / 'ok')!r}, 'w').write('1')"
        proc = subprocess.run([sys.executable, "-c", check], user=UNPRIVILEGED_UID, group=UNPRIVILEGED_UID,
                              extra_groups=[], cwd="/", capture_output=True, timeout=120,
                              env=scrubbed_env({"HOME": "/tmp"}))
        return proc.returncode == 0 and (probe_dir / "ok").exists()
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)


def identity_problem(plan: SandboxPlan, euid: int, nobody_runs: bool) -> str | None:
    """Why candidate code would run with this harness's own identity and file access under `plan` (None when it
    would not): root's workers become uid 65534 (inside the built view, or without one); a non-root harness's
    workers keep its uid but see only the built view. Root whose workers keep uid 0 reads root's files in view."""
    if plan.filesystem and (plan.uid is not None or euid != 0):
        return None
    if not plan.filesystem and euid == 0 and nobody_runs:
        return None
    why = plan.note or "uid 65534 cannot run the interpreter here"
    return (f"workers would run candidate code as uid {euid}, with this harness's file access ({why}); run where "
            "`unshare -U -r -m` works, or as root with the interpreter readable by uid 65534, or set "
            "eval.allow_unconfined_workers=true to accept it (every result records filesystem_isolated and "
            "unprivileged)")


def check_identity(allow: bool) -> None:
    """Refuse to start workers that would run candidate code with this harness's identity, unless `allow`."""
    plan = sandbox_plan()
    problem = identity_problem(plan, os.geteuid(), os.geteuid() == 0 and not plan.filesystem and _runs_as_nobody())
    if problem and not allow:
        raise SandboxRefused(problem)


class SandboxRefused(RuntimeError):
    """No confinement here keeps candidate code from this harness's own identity (a one-line reason)."""


def protect_parent() -> None:
    """Make this process non-dumpable so same-user children cannot read its memory or environ."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
        except (OSError, AttributeError):
            pass


def _worker_plan(isolate_filesystem: bool, host_pids: bool) -> SandboxPlan:
    """The confinement one worker gets: the probed plan (none when filesystem isolation is off), without the PID
    namespace for the one process that must keep the host's (`host_pids`, see `_PID_NAMESPACE`)."""
    plan = sandbox_plan() if isolate_filesystem else SandboxPlan()
    if host_pids:  # observed: the reference process exports CUDA IPC memory, named by the pid it sees itself
        plan = dataclasses.replace(plan, prefix=tuple(a for a in plan.prefix if a not in _PID_NAMESPACE))
    return plan


def _launch_prefix(plan: SandboxPlan, isolate_network: bool, kind: str) -> tuple[str, ...]:
    """What the worker's command starts with outside its confinement: `unshare -n` where no mount namespace already
    cuts the network, and a lower CPU priority for a build, so that it never slows a timing on the same host."""
    prefix = network_isolation_prefix() if isolate_network and not plan.filesystem else ()
    if kind == "build" and shutil.which("nice"):
        prefix = (shutil.which("nice"), "-n", "10", *prefix)
    return prefix


@dataclasses.dataclass(frozen=True)
class _WorkerFds:
    """The file descriptors between the parent and one worker: the channel's two pipes, the shared-memory regions
    that carry its tensors (where the OS makes them) and the pipe of its output. The child's ends are passed to it
    (`child_ends`) and closed here once it is started, or failed to start: a copy left open here would keep a pipe
    from closing when the worker dies."""

    p2c_r: int
    p2c_w: int
    c2p_r: int
    c2p_w: int
    out_r: int
    out_w: int
    regions: tuple[int, ...]  # (to_child, to_parent), or none
    child_fds: list[int]  # the child's copies of the regions

    @classmethod
    def open(cls) -> _WorkerFds:
        """Make the pipes, then the regions (none unless both can be made) and the child's copies of them."""
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        out_r, out_w = os.pipe()
        to_child, to_parent = new_region_fd(), new_region_fd()
        regions = (to_child, to_parent) if to_child is not None and to_parent is not None else ()
        child_fds = [os.dup(fd) for fd in regions]  # the child's copies; inheritable for pass_fds
        return cls(p2c_r, p2c_w, c2p_r, c2p_w, out_r, out_w, regions, child_fds)

    def worker_args(self) -> list[str]:
        """The worker's arguments that name its ends of the channel."""
        args = [str(self.p2c_r), str(self.c2p_w)]
        if self.child_fds:
            args += [str(self.child_fds[1]), str(self.child_fds[0])]  # the child sends in to_parent, reads to_child
        return args

    def child_ends(self) -> tuple[int, ...]:
        """The descriptors the worker inherits (its output goes to `out_w`, given as its stdout and stderr)."""
        return (self.p2c_r, self.c2p_w, *self.child_fds)

    def close_child_ends(self) -> None:
        """Close this process's copies of the worker's ends, its output pipe's included."""
        for fd in (self.p2c_r, self.c2p_w, self.out_w, *self.child_fds):
            os.close(fd)


class WorkerProcess:
    """One sandboxed `eval.worker` process and the channel to it.

    `kind` is "worker" (a pooled evaluation worker) or "build" (a throwaway CUDA/C++ build);
    builds run at a lower CPU priority so they never slow a timing on the same host.
    """

    def __init__(self, *, device: str, gpu_index: int | None, log_cap_bytes: int, isolate_network: bool,
                 extra_env: dict[str, str] | None = None, max_reply_bytes: int = 1 << 30, kind: str = "worker",
                 isolate_filesystem: bool = True, memory_limit_bytes: int | None = None,
                 max_processes: int = MAX_PROCESSES, bytecode: Path | None = None,
                 wrapper: Sequence[str] = (), module: str = "eval.worker", extra_binds: Sequence[str] = (),
                 host_pids: bool = False):
        """`wrapper`, `module`, `extra_binds` (profile, issue 57): a profiling process runs `module` instead of the
        worker loop, under `wrapper` (a profiler's command line, whose installation `extra_binds` shows it), in the
        same sandbox, its loopback up for the profiler."""
        self.workdir = owned_tempdir(kind)
        self.gpu_index = gpu_index
        env_extra = worker_env_entries(self.workdir, extra_env, device, gpu_index)
        plan = _worker_plan(isolate_filesystem, host_pids)
        self._set_identity(plan, env_extra)
        env = scrubbed_env(env_extra)
        prefix = _launch_prefix(plan, isolate_network, kind)
        fds = _WorkerFds.open()
        cmd = [*wrapper, sys.executable, *interpreter_flags(bytecode), "-m", module, *fds.worker_args()]
        self._make_groups(plan, kind, max_processes, memory_limit_bytes)
        if plan.filesystem:
            cmd = confine_command(plan, self._writable(env_extra), cmd, network=isolate_network,
                                  max_processes=max_processes, pids_group=self.pids_group,
                                  freeze_group=self.freeze_group, userns=self.process_limit == "userns",
                                  memory_group=self.memory_group, extra_binds=extra_binds,
                                  loopback=bool(wrapper))  # profile (issue 57)
        self._spawn([*prefix, *cmd], env, fds)
        self._watch(plan, memory_limit_bytes)
        self.channel = Channel(fds.c2p_r, fds.p2c_w, send_fd=fds.regions[0] if fds.regions else None,
                               recv_fd=fds.regions[1] if fds.regions else None, max_payload_bytes=max_reply_bytes)
        self.output = CappedOutput(fds.out_r, log_cap_bytes)
        self.info: dict[str, Any] = {}
        self.capture_key = 0  # keys the captures of its timed outputs (set by the evaluator when it says hello)
        self.own_folders: list[int] = []  # where it may write, as its mount namespace shows them (`pin_own_folders`)
        self._private_tmp = plan.filesystem  # its /tmp and /dev/shm are tmpfs of its own, not the host's

    def _set_identity(self, plan: SandboxPlan, env_extra: dict[str, str]) -> None:
        """Record what isolates the worker (every result says so) and, where it runs as uid 65534, give it its own
        folder; without a sandbox that changes the uid, the worker drops to it itself (`KH_DROP_UID`)."""
        self.filesystem_isolated_requested = plan.filesystem
        self.unprivileged = plan.uid is not None if plan.filesystem else os.geteuid() == 0 and _runs_as_nobody()
        self.ipc_isolated = plan.ipc
        if self.unprivileged:
            if not plan.filesystem:
                env_extra["KH_DROP_UID"] = str(UNPRIVILEGED_UID)
            os.chown(self.workdir, UNPRIVILEGED_UID, UNPRIVILEGED_UID)

    def _make_groups(self, plan: SandboxPlan, kind: str, max_processes: int, memory_limit_bytes: int | None) -> None:
        """The worker's cgroups, made before it starts so that its confinement can put it in them: the one that
        holds it to its process limit (else the limit's fallback, recorded in every result), the one it is frozen
        in and the one its memory is accounted in."""
        self.max_processes = max_processes
        self.process_limit = process_limit_plan(plan)  # recorded in every result
        self.pids_group: Path | None = None
        if self.process_limit == "cgroup":
            try:
                self.pids_group = pids.create(self.workdir.name, max_processes)
            except OSError:  # the probed hierarchy refuses this one: the limit in a user namespace of its own
                self.process_limit = "userns" if plan.uid is None or _nobody_userns() else "uid"
        self.freeze_group = self._freeze_group(plan) if kind == "worker" else None  # a build is never frozen
        self.memory_group = self._memory_group(plan) if memory_limit_bytes else None
        self.memory_accounting = "cgroup" if self.memory_group else "pss"  # recorded in every result

    def _spawn(self, cmd: list[str], env: dict[str, str], fds: _WorkerFds) -> None:
        """Start the worker in a session of its own (so that its whole group can be killed), in its own folder, with
        the channel's ends alone inherited; this process's copies of them are closed whether or not it started."""
        try:
            self.proc = subprocess.Popen(
                cmd, pass_fds=fds.child_ends(), stdin=subprocess.DEVNULL, stdout=fds.out_w, stderr=fds.out_w,
                env=env, cwd=self.workdir, start_new_session=True, close_fds=True,
            )
        finally:
            fds.close_child_ends()

    def _watch(self, plan: SandboxPlan, memory_limit_bytes: int | None) -> None:
        """What holds the started worker: its freezer, and the watchdog that kills it over its memory limit (after
        `killed_for` is reset: the watchdog may fire at once, and sets it)."""
        # stops all of it while the reference is timed; `freezer.mechanism` is recorded in every result
        self.freezer = freeze.Freezer(self.proc.pid, group=self.freeze_group, members=self.pids_group,
                                      pid_namespace=plan.processes)
        self.killed_for = ""  # why the parent killed it, when it did (a limit), for the verdict
        self.forks_refused = 0  # the kernel's count of forks refused at its process limit, kept once it is killed
        if memory_limit_bytes:
            charged = functools.partial(memcg.charged_bytes, self.memory_group) if self.memory_group else None
            WATCH.watch(self.proc.pid, memory_limit_bytes, functools.partial(self._over_memory, memory_limit_bytes),
                        charged)

    def pin_own_folders(self) -> None:
        """Hold a handle on each folder the worker may write, as its mount namespace shows it: its own folder and,
        when the plan gave it private ones, its `/tmp` and `/dev/shm` (each a tmpfs of its own; the host's folders of
        those paths are not what it sees). Called once the worker has started and before any candidate code runs
        in it, through the launcher's root (`unshare`, or the worker itself without a PID namespace), so that what
        the parent reads there later (`eval._kernel_symbols`: the extensions it built at run time, wherever
        `load_inline`'s `build_directory` put them) is those tmpfs, whatever the candidate mounts or links
        afterwards. Without private ones, `/tmp` is the host's, shared with others, and is never read."""
        if self.own_folders:
            return
        paths = [os.path.realpath(self.workdir)] + (["/tmp", "/dev/shm"] if self._private_tmp else [])
        self.own_folders = [fd for fd in (pin_folder(self.proc.pid, path) for path in paths) if fd is not None]

    def _freeze_group(self, plan: SandboxPlan) -> Path | None:
        """The cgroup v2 the worker is frozen in (`eval.process._freeze`): its pids cgroup where that is one, else a
        cgroup of its own where one can be made; None without confinement (nothing joins it then) or a cgroup v2."""
        if freeze.can_freeze(self.pids_group):
            return self.pids_group
        if not plan.filesystem or freeze.cgroup_base() is None:
            return None
        try:
            return freeze.create(self.workdir.name)
        except OSError:
            return None

    def _memory_group(self, plan: SandboxPlan) -> Path | None:
        """The memory cgroup the worker is accounted in (`eval.process._memcg`): its pids cgroup where that one
        accounts memory (cgroup v2 with both controllers), else one of its own where one can be made; None without
        confinement (nothing joins it then) or where none can be made (its Pss alone then holds it to its limit)."""
        if self.pids_group is not None and (self.pids_group / "memory.stat").exists():
            return self.pids_group
        if not plan.filesystem or memcg.base() is None:
            return None
        try:
            return memcg.create(self.workdir.name)
        except OSError:
            return None

    def _writable(self, env: dict[str, str]) -> list[str]:
        """The worker's own folder and its build folder, nothing else: a build worker builds into its candidate's
        build folder; an evaluating worker loads prebuilt extensions read-only (`eval.worker.prebuilt`) and
        builds anything else into its own folder, so no worker can alter another candidate's build."""
        folders = [str(self.workdir)]
        if env.get("TORCH_EXTENSIONS_DIR"):
            folders.append(env["TORCH_EXTENSIONS_DIR"])
        return [f for f in dict.fromkeys(folders) if os.path.isdir(f)]

    def _over_memory(self, limit: int, rss: int) -> None:
        """The watchdog's call (its own thread): record why, then kill the group; the request in flight then ends
        as `WorkerDied` with this reason."""
        self.killed_for = (f"its processes held {rss / GIB:.1f} GiB of memory (shared memory, memfd and tmpfs pages "
                           f"counted), over the limit of {limit / GIB:.1f} GiB per worker (eval.max_worker_memory_gib)")
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def limit_note(self, error: str) -> str:
        """The sandbox limit this worker hit, as a sentence for the verdict (or ""): a full tmpfs, shown by the error's
        text; the process limit, as the kernel counted it (cgroup plan) or as the error's text shows a refused fork."""
        return limit_hit(error) or self.process_limit_note(error)

    def process_limit_note(self, error: str) -> str:
        """The process limit as `limit_note` names it, where the kernel refused a fork at it (its count, with the
        cgroup plan) or the error's text shows a refused fork; else ""."""
        where = {"cgroup": "pids.max of its own cgroup", "userns": "RLIMIT_NPROC in its own user namespace",
                 "uid": "RLIMIT_NPROC, shared by its uid"}.get(self.process_limit, "")
        refused = max(self.forks_refused, pids.times_hit(self.pids_group) if self.pids_group else 0)
        if refused or (self.process_limit != "cgroup" and where and _refused_fork(error)):
            count = (f"the kernel refused {refused} forks or thread starts" if refused
                     else "a fork or thread start failed")
            return (f"a sandbox limit was hit: {count} at the limit of {self.max_processes} processes and threads "
                    f"per worker (eval.max_worker_processes; {where})")
        return ""

    def with_notes(self, reason: str, output: str) -> str:
        """`reason` for a worker that died or timed out, naming the limits it hit: a sandbox limit, and its log's."""
        notes = [n for n in (self.limit_note(output), self.output.over_cap()) if n]
        return f"{reason} ({'; '.join(notes)})" if notes else reason

    def cap_replies(self, max_bytes: int) -> None:
        """The most tensor bytes one reply may carry from now on; more ends as `WorkerDied` (a verdict)."""
        self.channel.max_payload_bytes = max_bytes

    def request(self, message: protocol.Request, tensors: list[torch.Tensor] | None = None,
                timeout: float | None = None, device: torch.device | None = None) -> tuple[Any, list[torch.Tensor]]:
        """Send one command and wait for its typed reply (tensors land on `device`).

        Kills the worker and raises WorkerTimeout on timeout, WorkerDied on death or on any
        malformed, oversized, forged or out-of-order reply (which is then the candidate's fault).
        """
        def exchange() -> tuple[dict[str, Any], list[torch.Tensor], float]:
            self.channel.send(protocol.encode(message), tensors)
            return (*self.channel.recv(timeout=timeout, device=device), 0.0)

        reply, out, _ = self._exchange(message, exchange, timeout)
        return reply, out

    def timed_request(self, message: protocol.Request, timeout: float | None = None,
                      device: torch.device | None = None) -> tuple[Any, list[torch.Tensor], float]:
        """`request` for a timed command (`Request.timed`), with the wall time in ms the parent observed from the
        request's first byte written to the reply's last byte read (`wire.Channel.exchange_timed`)."""
        assert message.timed, f"'{message.cmd}' is not a timed command"
        return self._exchange(message, lambda: self.channel.exchange_timed(protocol.encode(message), timeout, device),
                              timeout)

    def _exchange(self, message: protocol.Request,
                  exchange: Callable[[], tuple[dict[str, Any], list[torch.Tensor], float]],
                  timeout: float | None) -> tuple[Any, list[torch.Tensor], float]:
        """Run one exchange with the worker; what went wrong becomes WorkerTimeout or WorkerDied (see `request`)."""
        try:
            header, out, wall_ms = exchange()
            reply = protocol.decode_reply(message, header)
        except ChannelTimeout:
            self.kill()
            raise WorkerTimeout(f"no answer to '{message.cmd}' within {timeout:.0f} s", self.output.text()) from None
        except ChannelClosed:
            raise WorkerDied(self._death_detail(), self._final_output()) from None
        except PayloadTooLarge as exc:
            self.kill()
            raise WorkerDied(f"its reply to '{message.cmd}' carried {exc.nbytes} bytes of tensors, over the limit of "
                             f"{exc.limit} bytes (eval.max_output_bytes, or the reference's own output size where "
                             "larger)", self.output.text()) from None
        except ProtocolError as exc:
            self.kill()
            raise WorkerDied(f"the worker broke the protocol answering '{message.cmd}': {exc}",
                             self.output.text()) from None
        return reply, out, wall_ms

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def pid(self) -> int:
        """The host pid of the worker's launcher (the worker runs in its process tree)."""
        return self.proc.pid

    def _death_detail(self) -> str:
        if self.killed_for:
            self.kill()
            return f"worker killed: {self.killed_for}"
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "worker closed its channel and was killed"
        self.kill()
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"worker killed by signal {name}"
        return f"worker exited with code {code}"

    def _final_output(self) -> str:
        self.output.join(timeout=2)
        return self.output.text()

    def kill(self) -> None:
        """Kill the worker's whole process group and remove its directory."""
        WATCH.forget(self.proc.pid)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        else:
            try:  # children the candidate left behind in its group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.channel.close()
        for fd in self.own_folders:  # a handle would keep the worker's tmpfs alive
            os.close(fd)
        self.own_folders = []
        if self.pids_group is not None:  # its count outlives the cgroup, for a verdict given after the kill
            self.forks_refused = max(self.forks_refused, pids.times_hit(self.pids_group))
        for group in dict.fromkeys((self.pids_group, self.freeze_group, self.memory_group)):
            if group is not None:
                pids.remove(group)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def abort(self) -> None:
        """Kill the worker's process group and nothing else: safe while another thread waits on its channel, which
        then sees the channel close (and calls `kill`, which cleans up)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        """Ask the worker to exit, then make sure it is gone."""
        if self.alive():
            try:
                self.channel.send(protocol.encode(protocol.Exit()))
                self.proc.wait(timeout=5)
            except (ChannelClosed, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
