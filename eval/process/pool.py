"""Warm sandboxed workers for every GPU of the host, and the gate that keeps timing clean.

Each GPU keeps `workers_per_gpu` spare workers warm, spawned ahead with torch, Triton, the CUDA
context, the profiler and the native timing loop initialised. An evaluation leases any idle
worker (so work spreads over all GPUs), and a replacement starts at once in the background,
never on a candidate's path. A worker serves one candidate and is killed when it is given
back: nothing of one candidate (modules, patches, modes, threads, files, CUDA state) can reach
the next. Each GPU also has its clean reference process (`eval.process._reference_process`), where the
references are timed.

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

from eval.process import _affinity as affinity
from eval.process._reference_process import CleanClient, ReferenceProcess
from eval.process.sandbox import WorkerProcess
from eval.process._windows import Windows


# Workers started per evaluation in flight: a worker serves one candidate, so while `size` evaluate, their
# replacements start, and the next candidates still find a warm one. A start takes seconds (on the H200, 2.4 s from
# spawn to `Hello` alone, more beside a busy pool; 4.3 s where it compiles its imports from source: `eval.process._bytecode`),
# so at R evaluations a second about S x R start at once: past (WARM_PER_SLOT - 1) x size of them, the next evaluation
# waits for a start. Three per slot measured no faster than two on the 24-candidate batch (H200, 2026-11-29).
WARM_PER_SLOT = 2


class GpuGate:
    """Shared/exclusive access to one GPU. The exclusive holder's own nested requests pass straight through.

    An exclusive request waits for the shared holders in flight, and from then on new shared holds wait for it
    (so it is never starved). One kind of shared hold is told apart: "warm_up", a fresh worker's first call of its
    candidate, where Triton JIT-compiles and autotunes (0.75 s on the H200 for one honest kernel, against 40 ms for
    each later trial of 268 MB). While an exclusive request waits for a warm-up in flight, plain shared holds still
    start: the request waits for that warm-up anyway, and the other workers' trials use the GPU meanwhile instead
    of standing idle behind it. A new warm-up never starts while an exclusive request waits, so the wait stays
    bounded: the warm-ups in flight, then the trials begun beside them. No shared hold of any kind ever overlaps an
    exclusive one.

    It also keeps account of itself (`usage`): how long it was held exclusively, how long by at
    least one shared holder, and how long exclusive requests waited, which tells whether the
    exclusive steps bound a GPU's throughput.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0  # shared holders, warm-ups included
        self._warming = 0  # the warm-ups among them
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
        """`access` is "shared", "warm_up" (shared: a fresh worker's first call of its candidate), "exclusive" or
        "none"."""
        if access not in ("shared", "warm_up", "exclusive", "none"):
            raise ValueError(f"no GPU gate access {access!r}")
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
                self._cond.wait_for(lambda: self._owner is None and (
                    self._writers_waiting == 0 or (access == "shared" and self._warming > 0)))
                if self._shared == 0:
                    self._shared_since = time.perf_counter()
                self._shared += 1
                self._warming += access == "warm_up"
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
                    self._warming -= access == "warm_up"
                    if self._shared == 0:
                        self._shared_s += now - self._shared_since
                self._cond.notify_all()


@dataclass
class Lease:
    """A worker lent to one evaluation, with its GPU's gate, reference process, timing windows and the device the
    parent uses."""

    worker: WorkerProcess
    gate: GpuGate
    reference: ReferenceProcess
    windows: Windows
    device: torch.device
    gpu_index: int | None
    client: CleanClient | None = None  # observed: the clean process the handover of observed timing is measured with


class _SpawnFailure:
    def __init__(self, gpu_index: int | None, error: str):
        self.gpu_index, self.error = gpu_index, error


class WorkerPool:
    """Workers for a list of GPUs (or for the CPU when `gpu_indices` is [None])."""

    def __init__(self, gpu_indices: list[int | None], per_device: int, make_worker: Callable[..., WorkerProcess]):
        self._make_worker = make_worker
        if gpu_indices != [None]:  # before any thread or process starts: they inherit this thread's cores
            affinity.reserve(gpu_indices)
        self._idle: queue.Queue[WorkerProcess | _SpawnFailure] = queue.Queue()
        self._gates = {g: GpuGate() for g in gpu_indices}
        # observed: the reference process exports observed timing's buffer, so it keeps the host's PID namespace
        self._references = {g: ReferenceProcess(lambda g=g: make_worker(g, host_pids=g is not None))
                            for g in gpu_indices}
        self._clients = {g: CleanClient(lambda g=g: make_worker(g)) for g in gpu_indices if g is not None}
        self._windows = {g: Windows() for g in gpu_indices}
        self._live: set[WorkerProcess] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._started = 0
        self._warm = threading.Event()
        self.size = len(gpu_indices) * per_device
        self._warm_target = WARM_PER_SLOT * self.size
        self._background = ThreadPoolExecutor(max_workers=WARM_PER_SLOT * self.size + len(gpu_indices) + 1,
                                              thread_name_prefix="kh-pool")
        for g in gpu_indices:
            for _ in range(WARM_PER_SLOT * per_device):
                self._replace(g)
            self._background.submit(self._references[g].start)

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
        self._replace(g)  # a fresh spare, started now, off this candidate's path
        device = torch.device(f"cuda:{g}") if g is not None else torch.device("cpu")
        return Lease(item, self._gates[g], self._references[g], self._windows[g], device, g, self._clients.get(g))

    def release(self, lease: Lease) -> None:
        """Give a worker back: it is killed (in the background); its replacement started when it was leased."""
        try:
            self._background.submit(self._discard, lease.worker, False)
        except RuntimeError:  # shutting down
            self._discard(lease.worker, respawn=False)

    def close(self) -> None:
        """Stop every worker, idle, leased or starting."""
        self._closed = True
        self._background.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            live = list(self._live)
        for worker in live:
            worker.close()
        for reference in self._references.values():
            reference.close()
        for client in self._clients.values():  # observed
            client.close()

    def _count_start(self) -> None:
        with self._lock:
            self._started += 1
            if self._started >= self._warm_target:
                self._warm.set()

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
