"""The clean reference process: one sandboxed worker per GPU that only ever loads problems' reference models.

No candidate code is ever imported into it, so nothing a candidate does at import or in forward can
change how the reference is timed (new `torch.Tensor` methods, dispatch modes, backend switches,
patched statistics): the reference's blocks of repetitions run here, alternating with the
candidate's blocks in the candidate's own worker (`eval.timing.measure`). It serves every evaluation on
its GPU: each opens a `Session`, a reference model of its own (its problem, weight seed and sizes),
and closes it when done. Requests are serialised by a lock, taken only while the caller already
holds the GPU gate or holds nothing, so it can never deadlock against the gate.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, TypeVar

import torch

from eval.crossing import protocol as p
from eval.process.sandbox import WorkerDied, WorkerProcess, WorkerTimeout

_labels = itertools.count()
T = TypeVar("T")


class ReferenceProcess:
    """The reference worker of one GPU (or of the CPU), started on first use and again after it dies."""

    def __init__(self, spawn: Callable[[], WorkerProcess]):
        self._spawn = spawn
        self._worker: WorkerProcess | None = None
        self._generation = 0
        self._lock = threading.Lock()

    def request(self, message: p.Request, tensors: list[torch.Tensor] | None = None, timeout: float | None = None,
                device: torch.device | None = None, generation: int | None = None) -> tuple[Any, list[torch.Tensor]]:
        """One request, serialised; `generation` names the process a session was opened in (a restarted process has
        lost every session)."""
        return self._serialised(lambda worker: worker.request(message, tensors, timeout=timeout, device=device),
                                generation)

    def timed_request(self, message: p.Request, timeout: float | None = None, device: torch.device | None = None,
                      generation: int | None = None) -> tuple[Any, list[torch.Tensor], float]:
        """`WorkerProcess.timed_request`, serialised like `request`."""
        return self._serialised(lambda worker: worker.timed_request(message, timeout=timeout, device=device),
                                generation)

    def _serialised(self, call: Callable[[WorkerProcess], T], generation: int | None) -> T:
        with self._lock:
            worker = self._current()
            if generation is not None and generation != self._generation:
                raise WorkerDied("the reference process restarted since this evaluation loaded its reference")
            try:
                return call(worker)
            except (WorkerDied, WorkerTimeout):
                worker.kill()
                self._worker = None
                raise

    def open(self, load: p.Load, timeout: float) -> "Session":
        """Load a reference model for one evaluation; the reply says whether it loaded."""
        label = f"ref{next(_labels)}"
        load.subject, load.candidate_source = label, None
        with self._lock:
            self._current()
            generation = self._generation
        reply, _ = self.request(load, timeout=timeout, generation=generation)
        if not reply.ok:
            raise RuntimeError(f"the reference failed to load in the reference process: {reply.error}")
        return Session(self, label, generation, load)

    def start(self) -> None:
        """Start the process ahead of the first evaluation (the pool calls this in the background)."""
        try:
            with self._lock:
                self._current()
        except Exception:  # noqa: BLE001  the first evaluation that needs it tries again and reports why
            pass

    def restart(self, generation: int | None = None) -> None:
        """End the process (its CUDA state is suspect); the next request starts a new one. With a `generation`, only
        if the process is still that one (evaluations timed in one window each ask for the same restart)."""
        with self._lock:
            if self._worker is not None and generation in (None, self._generation):
                self._worker.kill()
                self._worker = None

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    @property
    def pid(self) -> int | None:
        """The host pid of the reference process's launcher (None while none runs)."""
        worker = self._worker
        return worker.pid if worker is not None else None

    def _current(self) -> WorkerProcess:
        if self._worker is None or not self._worker.alive():
            if self._worker is not None:
                self._worker.kill()
            self._worker = self._spawn()
            self._generation += 1
        return self._worker


class Session:
    """One evaluation's reference in the reference process: its subject label, usable like a worker by `measure`, and
    the request that loaded it (observed timing loads the same reference into the clean client)."""

    def __init__(self, process: ReferenceProcess, label: str, generation: int, load: p.Load):
        self.process, self.label, self.generation, self.load = process, label, generation, load

    def request(self, message: p.Request, tensors: list[torch.Tensor] | None = None, timeout: float | None = None,
                device: torch.device | None = None) -> tuple[Any, list[torch.Tensor]]:
        return self.process.request(message, tensors, timeout=timeout, device=device, generation=self.generation)

    def timed_request(self, message: p.Request, timeout: float | None = None, device: torch.device | None = None
                      ) -> tuple[Any, list[torch.Tensor], float]:
        return self.process.timed_request(message, timeout=timeout, device=device, generation=self.generation)

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def close(self) -> None:
        """Drop this evaluation's reference (a process that restarted has dropped it already)."""
        try:
            self.request(p.Unload(subject=self.label), timeout=60)
        except (WorkerDied, WorkerTimeout):
            pass


class CleanClient:
    """A worker of one GPU that never loads any code but the harness's (observed timing): the handover between two
    CUDA contexts is measured with it, alternating with a candidate's windows, so no candidate can lengthen it.
    Started on first use and again after it dies; its requests are serialised like the reference process's."""

    def __init__(self, spawn: Callable[[], WorkerProcess]):
        self._spawn = spawn
        self._worker: WorkerProcess | None = None
        self._lock = threading.Lock()

    def request(self, message: p.Request, tensors: list[torch.Tensor] | None = None, timeout: float | None = None,
                device: torch.device | None = None) -> tuple[Any, list[torch.Tensor]]:
        with self._lock:
            if self._worker is None or not self._worker.alive():
                if self._worker is not None:
                    self._worker.kill()
                self._worker = self._spawn()
            try:
                return self._worker.request(message, tensors, timeout=timeout, device=device)
            except (WorkerDied, WorkerTimeout):
                self._worker.kill()
                self._worker = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None
