"""What one evaluation's check steps share: its `Context`, the `Verdict` that ends it, the retries a step may ask
for, and the one table from a failed reply's stage to its verdict."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch

from eval.crossing import protocol as p
from eval import static_checks
from eval.timing import _gpu_idle as gpu_idle, measure
from eval.builds import Build
from eval.config import EvalConfig
from eval.process.pool import Lease
from eval.problem_check import broken
from eval._reference import Reference
from eval.process._reference_process import Session
from eval.result import EvalResult, Status
from eval.timing.roofline import Ceilings
from eval.process._windows import Seat
from problems import Problem, draw_inputs, precision


ERROR_CHARS = 3000


class Verdict(Exception):
    """Raised inside an evaluation to end it with a status."""

    def __init__(self, status: Status, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


class RetryEager(Exception):
    """A CUDA-graph capture failed in the worker, which may have left its CUDA state unusable: evaluate again in
    a new worker with both sides timed as eager calls."""

    def __init__(self, note: str):
        super().__init__(note)
        self.note = note


OUT_OF_MEMORY_BESIDE_OTHERS = "ran out of device memory beside other evaluations"


class RetryAlone(Exception):
    """Something other evaluations on the GPU may have caused (`why`): run this one again, in a new worker, holding
    the GPU alone throughout, and judge it on that."""

    def __init__(self, why: str = OUT_OF_MEMORY_BESIDE_OTHERS):
        super().__init__(why)
        self.why = why


def trim(text: str, n: int = ERROR_CHARS) -> str:
    """Keep the start (what failed first) and the end (the final error) of a long log."""
    if len(text) <= n:
        return text
    head = n // 3
    return f"{text[:head]}\n... [{len(text) - n} characters trimmed] ...\n{text[-(n - head):]}"


# What a failed reply's stage makes the verdict, and its reason ({error}: the worker's text, {last}: its last line,
# {broken}: the problem named as broken): the one table from stage to verdict. Every stage is here, so a reply
# decoded (`protocol.FailureStage`, strictly) always has one.
VERDICT_OF_STAGE: dict[p.FailureStage, tuple[Status, str]] = {
    p.FailureStage.PROBLEM: (Status.PROBLEM_ERROR, "{broken}"),
    p.FailureStage.IMPORT: (Status.COMPILE_ERROR, "importing the candidate failed"),
    p.FailureStage.BUILD: (Status.COMPILE_ERROR, "building the candidate failed"),
    p.FailureStage.FORMAT: (Status.FORMAT_ERROR, "{error}"),
    p.FailureStage.CONSTRUCT: (Status.RUNTIME_ERROR, "constructing ModelNew failed"),
    p.FailureStage.INTEGRITY: (Status.REJECTED, "integrity: {error}"),
    p.FailureStage.OUTPUT: (Status.INCORRECT, "{error}"),
    p.FailureStage.STAGE: (Status.RUNTIME_ERROR, "forward raised: {last}"),
    p.FailureStage.RUN: (Status.RUNTIME_ERROR, "forward raised: {last}"),
    p.FailureStage.NONE: (Status.RUNTIME_ERROR, "forward raised: {last}"),  # a reply not ok that names no stage
}


@dataclass
class Context:
    """Everything one evaluation's steps share."""

    problem: Problem
    source: str
    report: static_checks.SourceReport
    config: EvalConfig
    lease: Lease
    result: EvalResult
    small: bool
    build: Build | None = None
    ceilings: Ceilings | None = None
    alone: bool = False  # the evaluation holds its GPU exclusively throughout (a retry after running out of memory)
    graphs: bool = False  # time both sides as CUDA-graph replays (eval.cuda_graphs=auto, unless a capture failed)
    secret: int = field(default_factory=lambda: secrets.randbits(62))
    # its place in a timing window shared with candidates of the same problem (`eval.process._windows`)
    seat: Seat | None = None
    reference: Reference | None = None
    session: Session | None = None  # this evaluation's reference in the clean reference process
    worker_draws: bool = True  # the worker draws inputs from seeds (false once its draw did not match ours)
    output_bytes: int = 0  # the largest reference output of this evaluation (bytes per forward), once trials start
    input_bytes: int = 0  # one timing input set's bytes, once staged
    # once staged: the request that stages the reference's first timing set in another process (observed timing's
    # clean client runs the reference's windows on it)
    reference_stage: p.Stage | None = None
    unscored: str = ""  # why no speedup is scored (a degenerate problem); the steps that only score are left out

    @property
    def shared_secret(self) -> int:
        """What the reference's weights and the timing inputs derive from: the timing window's secret, which every
        candidate sharing the window has (their references are then one and the same), else this evaluation's own.
        Trial inputs always derive from `secret`, the evaluation's own."""
        return self.seat.secret if self.seat is not None else self.secret

    @property
    def on_gpu(self) -> bool:
        return self.lease.device.type == "cuda"

    @property
    def timed(self) -> bool:
        """Whether this evaluation times its candidate: on a GPU, or on the CPU when `eval.cpu_timing` asks (the
        whole two-process pipeline then runs; its times mean nothing)."""
        return self.on_gpu or self.config.cpu_timing

    def sides(self) -> tuple[measure.Side, measure.Side]:
        """The two processes of a timing: the clean reference process (re-keyed to the candidate worker's capture
        key; the candidate's worker is held stopped while it is timed, and on a GPU its kept blocks run on an idle
        GPU) and the candidate's own worker."""
        assert self.session is not None
        watch = gpu_idle.Watch(gpu_idle.probing(self.session, self.config.call_timeout_s)) if self.on_gpu else None
        return (measure.Side("reference", self.session, self.session.label, key=self.lease.worker.capture_key,
                             hold=self.lease.worker, watch=watch),
                measure.Side("candidate", self.lease.worker, "candidate"))

    def request(self, message: p.Request, tensors: list[torch.Tensor] | None = None,
                timeout: float | None = None, worker: Any = None) -> tuple[Any, list[torch.Tensor]]:
        """Ask the candidate's worker (or `worker`: the reference session); a failed reply becomes the verdict it
        implies. Reply tensors land on the evaluation's device."""
        reply, out = (worker or self.lease.worker).request(message, tensors, timeout=timeout, device=self.lease.device)
        if not reply.ok:
            self.fail_from_reply(reply, message.cmd)
        return reply, out

    def fail_from_reply(self, reply: p.Reply, cmd: str = "") -> NoReturn:
        """The verdict of a failed reply to `cmd`: by its stage (`VERDICT_OF_STAGE`), a device out of memory
        first (evaluated again alone, or named when it was alone), a sticky CUDA error ending the worker."""
        if reply.oom and not self.alone:
            raise RetryAlone()
        if reply.cuda_error:
            self.lease.worker.kill()  # a sticky CUDA error: this worker is done
        last = reply.error.strip().splitlines()[-1] if reply.error.strip() else "forward failed"
        if reply.oom:  # alone on the GPU, so not another evaluation's doing
            raise Verdict(Status.RUNTIME_ERROR, f"the device ran out of memory in the '{cmd or reply.stage}' step "
                                                f"with this evaluation alone on it: {trim(last, 400)}", reply.error)
        status, form = VERDICT_OF_STAGE[reply.stage]
        reason = form.format(error=trim(reply.error or "failed", 600), last=trim(last, 400),
                             broken=broken(self.problem.id, "it failed to load in the worker"))
        raise Verdict(status, _with_limit(self, reason, reply.error), reply.error)

    def tolerance(self) -> tuple[float, float]:
        return self.config.tolerance(self.problem.dtype, self.problem.atol, self.problem.rtol)

    @property
    def kernelbench_seeding(self) -> bool:
        return self.config.seeding == "kernelbench"

    def allow_outputs(self, expected: list[torch.Tensor]) -> None:
        """Let replies carry the reference's own output size per forward, however large: an honest candidate returns
        exactly those bytes, so `eval.max_output_bytes` bounds only what the reference does not justify."""
        self.output_bytes = max(self.output_bytes, tensor_bytes(expected))
        self.lease.worker.cap_replies(reply_cap(self.config, self.output_bytes))

    def draw_timing_inputs(self, seed: int) -> list[Any]:
        """A timing input set as the worker draws it from `seed` (on the CPU and moved, under KernelBench's seeding)."""
        assert self.reference is not None
        return draw_inputs(self.reference.module, seed, self.lease.device, None, on_cpu=self.kernelbench_seeding)

    def expected(self, inputs: list[Any]) -> list[torch.Tensor]:
        """Reference outputs under the preset's precision (the parent is strict unless told otherwise)."""
        assert self.reference is not None
        if self.config.precision == "strict":
            return self.reference.outputs(inputs)
        with precision(self.config.precision):
            return self.reference.outputs(inputs)


def _with_limit(ctx: Context, reason: str, error: str) -> str:
    """`reason`, naming the sandbox limit that the worker hit, if any."""
    hit = ctx.lease.worker.limit_note(error)
    return f"{reason} ({hit})" if hit else reason


def reply_cap(config: EvalConfig, reference_output_bytes: int = 0) -> int:
    """The most tensor bytes one worker reply may carry: one forward's outputs, at most `eval.max_output_bytes` or,
    when larger, the reference's own output size (a block's captures are far smaller than the default)."""
    return max(config.max_output_bytes, reference_output_bytes)


def tensor_bytes(values: list[Any]) -> int:
    """Bytes held by the tensors among `values` (inputs or outputs of one forward)."""
    return sum(t.nbytes for t in values if isinstance(t, torch.Tensor))
