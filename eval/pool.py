"""Warm sandboxed workers for every GPU of the host, and the gate that keeps timing clean.

Each GPU gets `workers_per_gpu` workers, spawned ahead with torch, Triton, the CUDA context
and the profiler initialised. An evaluation leases any idle worker (so work spreads over all
GPUs), and gives it back when done: a clean worker is unloaded and reused in the
background; any other is killed and a replacement spawned in the background, never on a
candidate's path.

Several evaluations run on one GPU at once (imports, JIT, correctness trials), but timing
must have the GPU to itself: each GPU's `GpuGate` is a shared/exclusive lock that every
GPU-touching step of an evaluation holds, in the parent as in the worker, and timing holds
exclusively. Writers are preferred, so a timing waits only for the steps already running.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from eval import protocol
from eval.sandbox import WorkerDied, WorkerProcess, WorkerTimeout


class GpuGate:
    """Shared/exclusive access to one GPU. The exclusive holder's own nested requests pass straight through.

    It also keeps account of itself (`usage`): how long it was held exclusively, how long by at
    least one shared holder, and how long exclusive requests waited, which tells whether the
    exclusive steps bound a GPU's throughput.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._owner: int | None = None
        self._writers_waiting = 0
        self._exclusive_s = self._shared_s = self._exclusive_wait_s = 0.0
        self._exclusive_holds = 0
        self._shared_since = 0.0

    def usage(self) -> dict[str, float]:
        """Seconds held exclusively, seconds with any shared holder, exclusive holds and their total wait, so far."""
        with self._cond:
            return {"exclusive_s": round(self._exclusive_s, 4), "shared_s": round(self._shared_s, 4),
                    "exclusive_holds": self._exclusive_holds, "exclusive_wait_s": round(self._exclusive_wait_s, 4)}

    @contextlib.contextmanager
    def hold(self, access: str) -> Iterator[None]:
        """`access` is "shared", "exclusive" or "none"."""
        if access == "none" or self._owner == threading.get_ident():
            yield
            return
        with self._cond:
            asked = time.perf_counter()
            if access == "exclusive":
                self._writers_waiting += 1
                self._cond.wait_for(lambda: self._owner is None and self._shared == 0)
                self._writers_waiting -= 1
                self._owner = threading.get_ident()
                self._exclusive_holds += 1
                self._exclusive_wait_s += time.perf_counter() - asked
            else:
                self._cond.wait_for(lambda: self._owner is None and self._writers_waiting == 0)
                if self._shared == 0:
                    self._shared_since = time.perf_counter()
                self._shared += 1
            got = time.perf_counter()
        try:
            yield
        finally:
            with self._cond:
                now = time.perf_counter()
                if access == "exclusive":
                    self._owner = None
                    self._exclusive_s += now - got
                else:
                    self._shared -= 1
                    if self._shared == 0:
                        self._shared_s += now - self._shared_since
                self._cond.notify_all()


@dataclass
class Lease:
    """A worker lent to one evaluation, with its GPU's gate and the device the parent uses beside it."""

    worker: WorkerProcess
    gate: GpuGate
    device: torch.device
    gpu_index: int | None


class _SpawnFailure:
    def __init__(self, gpu_index: int | None, error: str):
        self.gpu_index, self.error = gpu_index, error


class WorkerPool:
    """Workers for a list of GPUs (or for the CPU when `gpu_indices` is [None])."""

    def __init__(self, gpu_indices: list[int | None], per_device: int, make_worker: Callable[[int | None], WorkerProcess]):
        self._make_worker = make_worker
        self._idle: queue.Queue[WorkerProcess | _SpawnFailure] = queue.Queue()
        self._gates = {g: GpuGate() for g in gpu_indices}
        self._live: set[WorkerProcess] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._started = 0
        self._warm = threading.Event()
        self.size = len(gpu_indices) * per_device
        self._background = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="kh-pool")
        for g in gpu_indices:
            for _ in range(per_device):
                self._replace(g)

    def wait_warm(self, timeout: float | None = None) -> bool:
        """Block until every first-generation worker has started (or failed to); True if all did in time."""
        return self._warm.wait(timeout)

    def gate(self, gpu_index: int | None) -> GpuGate:
        return self._gates[gpu_index]

    def gate_usage(self) -> dict[str, dict[str, float]]:
        """Each GPU's `GpuGate.usage()`, keyed by GPU index ("cpu" for the CPU)."""
        return {"cpu" if g is None else str(g): gate.usage() for g, gate in self._gates.items()}

    def acquire(self) -> Lease:
        """The next idle worker on any GPU (waits until one is ready)."""
        while True:
            item = self._idle.get()
            if isinstance(item, _SpawnFailure):
                self._replace(item.gpu_index)
                raise RuntimeError(f"an evaluation worker failed to start: {item.error}")
            if item.alive():
                break
            self._discard(item)
        g = item.gpu_index
        device = torch.device(f"cuda:{g}") if g is not None else torch.device("cpu")
        return Lease(item, self._gates[g], device, g)

    def release(self, lease: Lease, reusable: bool) -> None:
        """Give a worker back: reused after an unload when `reusable`, else replaced. Both in the background."""
        if self._closed:
            self._discard(lease.worker, respawn=False)
            return
        self._background.submit(self._recycle if reusable else self._discard, lease.worker)

    def close(self) -> None:
        """Stop every worker, idle, leased or starting."""
        self._closed = True
        self._background.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            live = list(self._live)
        for worker in live:
            worker.close()

    def _count_start(self) -> None:
        with self._lock:
            self._started += 1
            if self._started >= self.size:
                self._warm.set()

    def _recycle(self, worker: WorkerProcess) -> None:
        try:
            reply, _ = worker.request(protocol.Unload(), timeout=60)
        except (WorkerDied, WorkerTimeout):
            reply = None
        if reply is not None and reply.ok and worker.alive() and not self._closed:
            self._idle.put(worker)
        else:
            self._discard(worker)

    def _discard(self, worker: WorkerProcess, respawn: bool = True) -> None:
        worker.kill()
        with self._lock:
            self._live.discard(worker)
        if respawn and not self._closed:
            self._replace(worker.gpu_index)

    def _replace(self, gpu_index: int | None) -> None:
        try:
            self._background.submit(self._start, gpu_index)
        except RuntimeError:  # shutting down
            pass

    def _start(self, gpu_index: int | None) -> None:
        if self._closed:
            return
        try:
            worker = self._make_worker(gpu_index)
        except Exception as exc:  # noqa: BLE001  reported to the next evaluation that asks
            self._idle.put(_SpawnFailure(gpu_index, str(exc)))
            self._count_start()
            return
        self._count_start()
        with self._lock:
            self._live.add(worker)
        if self._closed:
            worker.close()
            return
        self._idle.put(worker)
