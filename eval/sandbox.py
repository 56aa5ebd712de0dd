"""Spawning and killing sandboxed worker processes (the parent's side of the trust boundary).

A worker is a fresh interpreter (spawned, never forked) in its own session and process
group, in a fresh temporary directory, with an environment reduced to an allow-list and
scrubbed of anything that looks like a secret, its output captured through a pipe and
capped, and (where the OS allows) no network: `unshare -n` gives it a namespace with only
loopback. When the harness runs as root the worker also drops to an unprivileged user, so
it cannot read the parent's memory or environment.

Every temporary folder the evaluator makes is named `kh-<kind>-<owner pid>-...`, so that
`sweep_stale_folders` can remove (and stop the processes of) folders whose owner died,
even by `kill -9`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from eval import protocol
from eval.wire import Channel, ChannelClosed, ChannelTimeout, ProtocolError, new_region_fd

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_PROVIDER_PREFIXES = ("OPENAI", "ANTHROPIC", "AZURE", "AWS", "GOOGLE", "GEMINI", "HF_", "HUGGING", "COHERE", "MISTRAL",
                      "GROQ", "TOGETHER", "DEEPSEEK", "XAI", "OPENROUTER", "FIREWORKS", "WANDB")
_ALLOWED = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
            "CUDA_LAUNCH_BLOCKING", "TRITON_INTERPRET", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "CC", "CXX",
            "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
            "PYTHONPATH", "VIRTUAL_ENV", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
UNPRIVILEGED_UID = 65534
_FOLDER_KINDS = ("worker", "build", "extensions")


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


def is_secret_name(name: str) -> bool:
    """Environment variable names that may hold credentials never reach a worker."""
    upper = name.upper()
    return any(m in upper for m in _SECRET_MARKERS) or upper.startswith(_PROVIDER_PREFIXES)


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An allow-listed environment with no secrets (extra entries are filtered the same way)."""
    env = {k: v for k, v in os.environ.items() if k in _ALLOWED}
    env.update(extra or {})
    paths = [str(PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return {k: v for k, v in env.items() if not is_secret_name(k)}


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


@functools.lru_cache(maxsize=1)
def can_drop_privileges() -> bool:
    """True when running as root and an unprivileged user can still run this interpreter with torch."""
    if os.geteuid() != 0:
        return False
    try:
        proc = subprocess.run([sys.executable, "-c", "import statistics, torch, triton"], user=UNPRIVILEGED_UID,
                              group=UNPRIVILEGED_UID, extra_groups=[], cwd="/", capture_output=True, timeout=120,
                              env=scrubbed_env({"HOME": "/tmp"}))
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def protect_parent() -> None:
    """Make this process non-dumpable so same-user children cannot read its memory or environ."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
        except (OSError, AttributeError):
            pass


def owned_tempdir(kind: str) -> Path:
    """A fresh temporary folder tagged with this process's pid (see `sweep_stale_folders`)."""
    assert kind in _FOLDER_KINDS
    return Path(tempfile.mkdtemp(prefix=f"kh-{kind}-{os.getpid()}-"))


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_folders(root: str | None = None) -> list[Path]:
    """Remove `kh-*` folders whose owner process is gone, first killing processes still working in them."""
    base = Path(root or tempfile.gettempdir())
    removed = []
    for folder in base.glob("kh-*-*-*"):
        parts = folder.name.split("-")
        if len(parts) < 4 or parts[1] not in _FOLDER_KINDS or not parts[2].isdigit() or _owner_alive(int(parts[2])):
            continue
        _kill_processes_in(folder)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _kill_processes_in(folder: Path) -> None:
    """SIGKILL every process whose working directory is `folder` or below (orphaned workers)."""
    target = str(folder.resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd == target or cwd.startswith(target + os.sep):
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except OSError:
                pass


class _CappedOutput:
    """Drains a pipe on a thread, keeping the first and last `cap` bytes."""

    def __init__(self, fd: int, cap: int):
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._cap = cap
        self._fd = fd
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self.total += len(chunk)
            if len(self.head) < self._cap:
                room = self._cap - len(self.head)
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail += chunk
            if len(self.tail) > self._cap:
                del self.tail[: len(self.tail) - self._cap]
        os.close(self._fd)

    def text(self) -> str:
        head = self.head.decode(errors="replace")
        if not self.tail:
            return head
        skipped = self.total - len(self.head) - len(self.tail)
        gap = f"\n... [{skipped} bytes of output dropped] ...\n" if skipped > 0 else ""
        return head + gap + self.tail.decode(errors="replace")


class WorkerProcess:
    """One sandboxed `eval.worker` process and the channel to it.

    `kind` is "worker" (a pooled evaluation worker) or "build" (a throwaway CUDA/C++ build);
    builds run at a lower CPU priority so they never slow a timing on the same host.
    """

    def __init__(self, *, device: str, gpu_index: int | None, log_cap_bytes: int, isolate_network: bool,
                 extra_env: dict[str, str] | None = None, max_reply_bytes: int = 1 << 30, kind: str = "worker"):
        self.workdir = owned_tempdir(kind)
        self.gpu_index = gpu_index
        env_extra = dict(extra_env or {})
        env_extra.update(HOME=str(self.workdir), TMPDIR=str(self.workdir),
                         TRITON_CACHE_DIR=str(self.workdir / "triton-cache"))
        env_extra.setdefault("TORCH_EXTENSIONS_DIR", str(self.workdir / "torch-extensions"))
        if device == "cpu":
            env_extra["TRITON_INTERPRET"] = "1"
            env_extra["CUDA_VISIBLE_DEVICES"] = ""
        elif gpu_index is not None:
            env_extra["CUDA_VISIBLE_DEVICES"] = str(gpu_index)
        self.unprivileged = can_drop_privileges()
        if self.unprivileged:
            env_extra["KH_DROP_UID"] = str(UNPRIVILEGED_UID)
            os.chown(self.workdir, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        env = scrubbed_env(env_extra)
        prefix = network_isolation_prefix() if isolate_network else ()
        if kind == "build" and shutil.which("nice"):
            prefix = (shutil.which("nice"), "-n", "10", *prefix)
        self.network_isolated_requested = bool(prefix)
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        out_r, out_w = os.pipe()
        to_child, to_parent = new_region_fd(), new_region_fd()
        regions = (to_child, to_parent) if to_child is not None and to_parent is not None else ()
        child_fds = [os.dup(fd) for fd in regions]  # the child's copies; inheritable for pass_fds
        cmd = [*prefix, sys.executable, "-m", "eval.worker", str(p2c_r), str(c2p_w)]
        if child_fds:
            cmd += [str(child_fds[1]), str(child_fds[0])]  # the child sends in to_parent, reads to_child
        try:
            self.proc = subprocess.Popen(
                cmd, pass_fds=(p2c_r, c2p_w, *child_fds), stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                env=env, cwd=self.workdir, start_new_session=True, close_fds=True,
            )
        finally:
            for fd in (p2c_r, c2p_w, out_w, *child_fds):
                os.close(fd)
        self.channel = Channel(c2p_r, p2c_w, send_fd=regions[0] if regions else None,
                               recv_fd=regions[1] if regions else None, max_payload_bytes=max_reply_bytes)
        self.output = _CappedOutput(out_r, log_cap_bytes)
        self.info: dict[str, Any] = {}
        self.started = time.monotonic()

    def request(self, message: protocol.Request, tensors: list[torch.Tensor] | None = None,
                timeout: float | None = None, device: torch.device | None = None) -> tuple[Any, list[torch.Tensor]]:
        """Send one command and wait for its typed reply (tensors land on `device`).

        Kills the worker and raises WorkerTimeout on timeout, WorkerDied on death or on any
        malformed, oversized, forged or out-of-order reply (which is then the candidate's fault).
        """
        try:
            self.channel.send(protocol.encode(message), tensors)
            header, out = self.channel.recv(timeout=timeout, device=device)
            reply = protocol.decode_reply(message, header)
        except ChannelTimeout:
            self.kill()
            raise WorkerTimeout(f"no answer to '{message.cmd}' within {timeout:.0f} s", self.output.text()) from None
        except ChannelClosed:
            raise WorkerDied(self._death_detail(), self._final_output()) from None
        except ProtocolError as exc:
            self.kill()
            raise WorkerDied(f"the worker broke the protocol answering '{message.cmd}': {exc}", self.output.text()) from None
        return reply, out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _death_detail(self) -> str:
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
        self.output._thread.join(timeout=2)
        return self.output.text()

    def kill(self) -> None:
        """Kill the worker's whole process group and remove its directory."""
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
        shutil.rmtree(self.workdir, ignore_errors=True)

    def close(self) -> None:
        """Ask the worker to exit, then make sure it is gone."""
        if self.alive():
            try:
                self.channel.send(protocol.encode(protocol.Exit()))
                self.proc.wait(timeout=5)
            except (ChannelClosed, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
