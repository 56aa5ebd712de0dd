"""The worker's commands of observed timing (`eval.worker.observed`): the reference process's windows and own
blocks, the candidate's worker's runs behind `go`. A part of `eval.worker.serve.Worker`, apart for its size."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from eval.crossing import protocol as p
from eval.worker import observed
from eval.worker.call_inputs import rebuild_args
from problems import flatten_outputs, float64_miss

Handled = tuple[p.Reply, list[torch.Tensor]]


class ObservedTiming:
    """The observed-timing state and commands of a worker (`Worker` supplies `subjects`, `device`, `_draw_fresh`)."""

    subjects: dict[str, Any]
    device: torch.device
    _draw_fresh: Callable[[Any, range, list[int]], tuple[dict[int, list[torch.Tensor]], str]]

    def __init__(self) -> None:
        self.timekeepers: dict[str, observed.Timekeeper] = {}  # the reference process's, per subject
        self.attached: observed.Attached | None = None  # a candidate's worker's view of one

    def _forward_leaves(self, subject: Any, grad: bool) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
        def forward(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
            with torch.set_grad_enabled(grad):
                return flatten_outputs(subject.model(*rebuild_args(subject.spec, tensors)))
        return forward

    def _drawn(self, subject: Any, seeds: list[int]) -> list[list[torch.Tensor]]:
        """Observed timing's repetitions, drawn as a timed block's fresh inputs are (`_draw_fresh`)."""
        fresh, problem = self._draw_fresh(subject, range(len(seeds)), seeds)
        if problem:
            raise ValueError(problem)
        return [fresh[rep] for rep in range(len(seeds))]

    def cmd_window_setup(self, msg: p.WindowSetup, tensors: list[torch.Tensor]) -> Handled:
        subject = self.subjects[msg.subject]
        with torch.no_grad():
            outputs = [t for t in flatten_outputs(subject.model(*subject.args)) if isinstance(t, torch.Tensor)]
        flush = msg.flush_bytes or 2 * torch.cuda.get_device_properties(self.device).L2_cache_size
        old = self.timekeepers.pop(msg.subject, None)
        if old is not None:
            old.close_buffer()
        keeper = observed.Timekeeper(max(1, msg.reps), subject.buffers, outputs, flush)
        self.timekeepers[msg.subject] = keeper
        return p.WindowSetupReply(handle=keeper.buffer.handle, layout=dataclasses.asdict(keeper.layout)), []

    def cmd_window_attach(self, msg: p.WindowAttach, tensors: list[torch.Tensor]) -> Handled:
        if self.attached is not None:
            self.attached.close()
        self.attached = observed.Attached(msg.handle, observed.Layout(**msg.layout))
        return p.Reply(), []

    def cmd_window_open(self, msg: p.WindowOpen, tensors: list[torch.Tensor]) -> Handled:
        keeper = self.timekeepers[msg.subject]
        drawn = self._drawn(self.subjects[msg.subject], msg.seeds) if msg.seeds else []
        keeper.open(msg.seq, drawn, msg.lead_us, flush=bool(drawn))
        return p.Reply(), []

    def cmd_window_run(self, msg: p.WindowRun, tensors: list[torch.Tensor]) -> Handled:
        if self.attached is None:
            return p.WindowRunReply(ok=False, stage=p.FailureStage.STAGE,
                                    error="no observed-timing buffer is attached"), []
        subject = self.subjects.get(msg.subject)
        if msg.reps and subject is None:
            return p.WindowRunReply(ok=False, stage=p.FailureStage.STAGE, error=f"no subject {msg.subject!r}"), []
        forward = self._forward_leaves(subject, msg.grad) if msg.reps else lambda t: []
        own_ms, enqueue_us = self.attached.run(msg.seq, msg.reps, forward)
        return p.WindowRunReply(own_ms=own_ms, enqueue_us=enqueue_us), []

    def cmd_window_close(self, msg: p.WindowClose, tensors: list[torch.Tensor]) -> Handled:
        subject = self.subjects[msg.subject]
        reference = self._forward_leaves(subject, False)

        def within_float64(values: list[torch.Tensor], outputs: list[torch.Tensor]) -> bool:
            try:
                return float64_miss(subject.model, rebuild_args(subject.spec, values), outputs, msg.atol,
                                    msg.rtol) is None
            except Exception:  # noqa: BLE001  no float64 forward here (an operator, memory): the miss stands
                return False

        with torch.no_grad():
            closed = self.timekeepers[msg.subject].close(msg.seq, msg.timeout_s, reference, msg.atol, msg.rtol,
                                                         within_float64)
        return p.WindowCloseReply(window_ms=-1.0 if closed.window_ms is None else closed.window_ms,
                                  mismatched=closed.mismatch.count, detail=closed.mismatch.detail,
                                  switched=closed.switched, snap_ms=closed.snap_ms,
                                  snap_limit_ms=closed.snap_limit_ms), []

    def cmd_own_block(self, msg: p.OwnBlock, tensors: list[torch.Tensor]) -> Handled:
        subject = self.subjects[msg.subject]
        block_ms, copies_ms = self.timekeepers[msg.subject].own_block(self._drawn(subject, msg.seeds),
                                                                      self._forward_leaves(subject, msg.grad))
        return p.OwnBlockReply(block_ms=block_ms, copies_ms=copies_ms), []

    def cmd_window_end(self, msg: p.WindowEnd, tensors: list[torch.Tensor]) -> Handled:
        for keeper in self.timekeepers.values():
            keeper.close_buffer()
        self.timekeepers.clear()
        if self.attached is not None:
            self.attached.close()
            self.attached = None
        return p.Reply(), []
