"""What a confined worker sees, and the command that confines it.

Where the OS allows a mount namespace (`unshare -m` as root, `unshare -U -r -m` otherwise), the
worker's root is built for it (`_layout`, `_CONFINE`): the system folders, the interpreter, the
compilers, the project's `eval/` and `problems/` (solutions hidden) and the build folders read-only;
its own folder writable; a private, capped `/tmp` and `/dev/shm`; nothing else of the host (homes,
runs, caches, `/run`, `/var`, the host's `/tmp` and its socket files). `_CONFINE` sets this up in a
tiny interpreter (`python -I -S`, a few ms), pivots into it, caps the worker's task count, and then
gives up its privileges before the worker starts: as root it becomes uid 65534, otherwise it enters
a fresh user namespace without a uid mapping, so the worker holds no capability anywhere and can
neither remount nor unmount anything. `confine_command` wraps a worker's command line in that
script, as a `SandboxPlan` says; without a mount namespace, `network_isolation_prefix` alone takes
its network. Which plan applies here is probed by `eval.process.sandbox`, which spawns the workers.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from eval.process._reaper import owner_token

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SandboxPlan:
    """How workers are confined on this machine (probed once): the namespace prefix and the identity."""

    prefix: tuple[str, ...] = ()  # `unshare ...` creating mount (and user) namespaces; () when unavailable
    uid: int | None = None  # the uid the worker becomes (root only), else None
    note: str = ""

    @property
    def filesystem(self) -> bool:
        return bool(self.prefix)

    @property
    def processes(self) -> bool:
        """Whether the worker has a PID namespace of its own: it sees and can signal no process outside it."""
        return "-p" in self.prefix

    @property
    def ipc(self) -> bool:
        """Whether the worker has IPC and UTS namespaces of its own: System V shared memory, semaphores and message
        queues it makes are its namespace's (gone with it), and it sees none of the host's or other workers'."""
        return "-i" in self.prefix


# The worker's own /tmp and /dev/shm: private tmpfs, capped in bytes and in files (inodes); a candidate that fills
# one gets ENOSPC there, and nothing of the host's /tmp (its socket files included) is in sight.
PRIVATE_TMP = "size=2g,nr_inodes=50000"
PRIVATE_SHM = "size=1g,nr_inodes=10000"
# The worker's own folder (its cwd, HOME and TMPDIR: the candidate file, Triton's cache, its own builds) is a private
# tmpfs too, mounted over the host folder's path: the host folder stays empty, and a candidate that fills it hits
# these caps, not the host's disk. A build of a torch extension takes a few hundred MB.
PRIVATE_OWN = "size=4g,nr_inodes=100000"
# The tasks (processes and threads) one worker may hold (`eval.process._pids` says how it is kept per worker). A GPU
# worker holds ~40 threads, a build worker's compilers a few dozen processes; the cap stops a fork bomb.
MAX_PROCESSES = 4096
# The host's folders a worker sees whole (read-only): the system, never a home, /tmp, /run, /var, /opt or /srv.
_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "sys", "proc")
# Of the project, a worker needs only the packages it imports; hand-written solutions stay out of its sight.
_PROJECT_PACKAGES = ("eval", "problems")
# The suite's files are hidden too: a worker is sent the one problem it judges (its public part, `Load.problem_source`),
# and the other problems' files hold their hidden workloads (`get_extra_inputs`).
_PROJECT_HIDDEN = (Path("problems") / "solutions", Path("problems") / "suite")
# Of /sys, the cgroup tree is hidden: it lists every worker's cgroup, its processes (by host pid) and its memory, and
# CUDA reads none of it (the parent joins, freezes and accounts the worker's cgroups from outside).
_SYSTEM_HIDDEN = ("/sys/fs/cgroup",)


# Runs as `python -I -S -c _CONFINE SPEC CMD...` inside fresh mount (and network, PID) namespaces, as root of
# them. It builds the worker's root in a tmpfs: the system folders (SPEC's `system`), what SPEC binds read-only
# (the interpreter, its packages, the project's packages, prebuilt extensions), the worker's writable folders, a
# private capped /tmp and /dev/shm; hides SPEC's `hide` folders; pivots into it and lets go of the host's root;
# remounts all but the writable folders read-only; drops privileges; then execs CMD. Its first act is to join the
# worker's cgroups (SPEC's `join`: its pids cgroup, `eval.process._pids`, and its freezer cgroup,
# `eval.process._freeze`); without a pids cgroup its last is to set RLIMIT_NPROC (in a user namespace of its own when
# SPEC's `userns` or without a uid to become): the per-worker process limit.
_CONFINE = r"""
import ctypes, json, os, sys
spec = json.loads(sys.argv[1]); cmd = sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
def mount(src, dst, fstype, flags, data=None):
    enc = lambda v: None if v is None else os.fsencode(v)
    if libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
        raise OSError(ctypes.get_errno(), f"mount {src} on {dst}: {os.strerror(ctypes.get_errno())}")
def fail(what):
    raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")
mount(None, "/", None, REC | PRIVATE)
cwd = os.getcwd()
writable = [os.path.realpath(p) for p in spec["writable"]]
keep = {p: os.open(p, os.O_PATH) for p in dict.fromkeys(spec["bind"] + writable) if os.path.exists(p)}
for procs in spec["join"]:  # the worker's own cgroups, joined before anything of it can fork
    with open(procs, "w") as fh:
        fh.write("0")
R = spec["build_at"]
mount("tmpfs", R, "tmpfs", NOSUID | NODEV, "mode=0755,size=16m")
for name in spec["system"]:
    src = "/" + name
    if os.path.islink(src):
        os.symlink(os.readlink(src), R + src)
    elif os.path.isdir(src):
        os.makedirs(R + src, exist_ok=True)
        mount(src, R + src, None, BIND | REC)
private = spec["private"]
for path, opts in private:  # a writable tmpfs of its own, capped in bytes and files
    os.makedirs(R + path, exist_ok=True)
    mount("tmpfs", R + path, "tmpfs", NOSUID | NODEV, "mode=1777," + opts)
for path, fd in keep.items():
    os.makedirs(R + path, exist_ok=True)
    mount(f"/proc/self/fd/{fd}", R + path, None, BIND | REC)
    os.close(fd)
for path in spec["hide"]:  # inside what was bound: what no worker may read (an empty read-only folder)
    if os.path.isdir(R + path):
        mount("tmpfs", R + path, "tmpfs", NOSUID | NODEV, "mode=0755,size=4k")
# /proc itself stays writable (the CUDA driver fails on a read-only /proc); its system-wide knobs do not
for path in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"):
    try:
        mount(R + path, R + path, None, BIND | REC)
    except OSError:
        pass
os.makedirs(R + "/.old")
pivot_root = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}[os.uname().machine]
if libc.syscall(pivot_root, os.fsencode(R), os.fsencode(R + "/.old")) != 0:
    fail("pivot_root")
os.chdir("/")
if libc.umount2(b"/.old", 2) != 0:  # MNT_DETACH: nothing of the host's root stays reachable
    fail("umount /.old")
os.rmdir("/.old")
def unescape(p):
    return p.encode().decode("unicode_escape").encode("latin-1").decode()
open_points = writable + [path for path, _ in private] + ["/proc"]
points = [unescape(line.split()[4]) for line in open("/proc/self/mountinfo")]
for point in dict.fromkeys(points):
    if point in open_points or any(point.startswith(w.rstrip("/") + "/") for w in writable):
        continue
    try:
        st = os.statvfs(point)
    except OSError:
        continue
    flags = REMOUNT | BIND | RDONLY | (st.f_flag & (NOSUID | NODEV | NOEXEC | 1024 | 2048))
    if st.f_flag & 4096:
        flags |= 1 << 21
    try:
        mount(None, point, None, flags)
    except OSError:
        if point == "/":
            raise
os.chdir(cwd)  # the worker's folder, bound at the same path
import resource
if spec.get("loopback"):  # profile (issue 57): a profiler's front end reaches its target over the namespace's own lo
    import fcntl, socket, struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0))  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", struct.unpack("16sH14x", got)[1] | 1))  # SIOCSIFFLAGS: up
uid = spec.get("uid")
if uid is not None:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
if (uid is None or spec["userns"]) and libc.unshare(0x10000000) != 0:
    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER) failed")
if not spec["pids_cgroup"]:  # set inside the worker's own user namespace, the kernel counts it per worker
    resource.setrlimit(resource.RLIMIT_NPROC, (spec["nproc"], spec["nproc"]))
os.execv(cmd[0], cmd)
"""


@functools.lru_cache(maxsize=1)
def network_isolation_prefix() -> tuple[str, ...]:
    """The command prefix that puts a child in an empty network namespace, or () if unavailable."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    candidates = [(unshare, "-n", "--")] if os.geteuid() == 0 else [(unshare, "-rn", "--")]
    for prefix in candidates:
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return prefix
    return ()


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def _needed_paths() -> list[str]:
    """What the worker must read beyond the system folders: the interpreter, its libraries, the CUDA toolkit, the
    project's packages, this harness's prebuilt extensions and its workers' bytecode (`eval.process._bytecode`). Never a
    folder that holds the whole project."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    # an import path is bound whole, unless it is a shared area itself or holds one (a script run from /tmp puts
    # /tmp on sys.path; from a home, the home): its packages then stay out of the worker's view
    shared = {os.path.realpath(a) for a in (tempfile.gettempdir(), "/tmp", "/var", "/run", "/home",
                                            os.path.expanduser("~"))}
    paths |= {p for p in sys.path if p and os.path.isabs(p) and not any(_under(a, [os.path.realpath(p)])
                                                                        for a in shared)}
    paths |= {os.environ[k] for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k)}
    paths |= {p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if os.path.isabs(p)}
    paths |= _toolchain_paths()
    root = os.path.realpath(PROJECT_ROOT)
    paths = {p for p in (os.path.realpath(q) for q in paths) if not _under(root, [p])}
    paths |= {str(PROJECT_ROOT / name) for name in _PROJECT_PACKAGES}
    paths |= {str(p) for kind in ("extensions", "bytecode")
              for p in Path(tempfile.gettempdir()).glob(f"kh-{kind}-{owner_token()}-*")}
    return sorted(p for p in paths if os.path.exists(p))


def _toolchain_paths() -> set[str]:
    """Where the compilers live (PATH, CC, CXX, Triton's ptxas): Triton builds its driver module with `CC` and
    nvcc calls the host compiler, which needs its whole installation (`<prefix>/bin` gives `<prefix>`), never a
    home or the project's parent."""
    home = os.path.realpath(os.path.expanduser("~"))
    compilers = []
    for var in ("CC", "CXX", "TRITON_PTXAS_PATH"):
        found = shutil.which(os.environ[var]) if os.environ.get(var) else None
        if found:
            compilers += [os.path.dirname(found), os.path.dirname(os.path.realpath(found))]
    paths = set()
    for entry in [p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)] + compilers:
        path = os.path.realpath(entry)
        parent = os.path.dirname(path) if os.path.basename(path) == "bin" else path
        # a PATH folder in the home is bound alone (its parent may hold credentials); a named compiler's whole prefix
        whole = (entry in compilers or not _under(path, [home])) and parent not in ("/", home)
        paths.add(parent if whole and not _under(os.path.realpath(PROJECT_ROOT), [parent]) else path)
    return paths


def _layout(writable: list[str], extra_binds: Sequence[str] = ()) -> dict[str, Any]:
    """The worker's root, built: system folders, read-only binds (`extra_binds` too: a profiler's installation),
    writable folders, private tmpfs, hidden folders."""
    system = [f"/{name}" for name in _SYSTEM if os.path.exists(f"/{name}")]
    seen = [os.path.realpath(s) for s in system]
    extra = [os.path.realpath(b) for b in extra_binds if os.path.isdir(b)]  # profile (issue 57)
    binds = [p for p in sorted({*_needed_paths(), *extra}) if not _under(p, seen)]
    binds = sorted(p for p in binds if not any(_under(p, [o]) for o in binds if o != p))
    own = writable[:1]  # the worker's own folder comes first (`sandbox.WorkerProcess._writable`)
    shared = [w for w in writable[1:] if not _under(w, own)]  # a build folder outside it stays the host's
    return {"system": [s.lstrip("/") for s in system], "bind": binds, "writable": shared,
            "private": [["/tmp", PRIVATE_TMP], ["/dev/shm", PRIVATE_SHM]] + [[f, PRIVATE_OWN] for f in own],
            "hide": [str(PROJECT_ROOT / h) for h in _PROJECT_HIDDEN] + list(_SYSTEM_HIDDEN), "build_at": "/tmp"}


def confine_command(plan: SandboxPlan, writable: list[str], cmd: list[str], network: bool,
                    max_processes: int = MAX_PROCESSES, pids_group: Path | None = None,
                    freeze_group: Path | None = None, userns: bool = False,
                    memory_group: Path | None = None, extra_binds: Sequence[str] = (),
                    loopback: bool = False) -> list[str]:
    """`cmd` wrapped so that it runs confined as `plan` says (unchanged when the plan has no prefix): in
    `pids_group` if given, else under RLIMIT_NPROC `max_processes` (in a user namespace of its own if `userns`); in
    `freeze_group` and `memory_group` too if given; `extra_binds` read-only and, with `loopback`, its network
    namespace's loopback up (a profiler's front end talks to its target over it: `eval.profiling`)."""
    if not plan.prefix:
        return cmd
    join = [str(g / "cgroup.procs") for g in dict.fromkeys((pids_group, freeze_group, memory_group)) if g is not None]
    spec = json.dumps({"uid": plan.uid, "nproc": max_processes, "join": join, "pids_cgroup": pids_group is not None,
                       "userns": userns, "loopback": loopback,  # profile (issue 57)
                       **_layout([os.path.realpath(w) for w in writable], extra_binds)})
    prefix = [a for a in plan.prefix if network or a != "-n"]
    return [*prefix, sys.executable, "-I", "-S", "-c", _CONFINE, spec, *cmd]
