"""What crosses the trust boundary: one typed request and one typed reply per worker command.

The parent and the worker both import this module, so every command name and field is
written once. `encode` turns a message into a JSON header; `decode_request` and
`decode_reply` rebuild it and check every field's type, so a malformed or forged reply from
the untrusted side is a `ProtocolError`, never a KeyError deep in the parent. Tensors travel
beside the header (see `eval.wire`); each request says which tensors it carries.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

from eval.wire import ProtocolError

# Timed repetitions whose outputs a Time reply carries back for the parent to check.
SAMPLED_REPS = 3

# An input list travels as a JSON spec plus tensors: {"t": i} stands for tensor i, anything else is a literal.
ArgSpec = list[Any]


@dataclass
class Reply:
    """Fields every reply has. `stage` names what failed when `ok` is false."""

    ok: bool = True
    stage: str = ""
    error: str = ""
    cuda_error: bool = False  # the failure left the CUDA context unusable
    oom: bool = False  # the failure was the device running out of memory


@dataclass
class Request:
    """A command to the worker; subclasses set `cmd` and the `reply` type they get back."""

    cmd: ClassVar[str] = ""
    reply: ClassVar[type[Reply]] = Reply


@dataclass
class HelloReply(Reply):
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Hello(Request):
    """Set the device, initialise CUDA, Triton and the profiler, report facts about the sandbox."""

    cmd: ClassVar[str] = "hello"
    reply: ClassVar[type[Reply]] = HelloReply
    device: str = "cpu"


@dataclass
class LoadReply(Reply):
    import_s: float = 0.0
    state_copied: int = 0


@dataclass
class Load(Request):
    """Build the reference model and, unless `candidate_source` is None, import the candidate and build ModelNew."""

    cmd: ClassVar[str] = "load"
    reply: ClassVar[type[Reply]] = LoadReply
    problem_source: str = ""
    problem_label: str = ""
    candidate_source: Optional[str] = None
    weight_seed: int = 0
    size_overrides: dict[str, Any] = field(default_factory=dict)
    extensions_dir: Optional[str] = None
    precision: str = "strict"  # runtime.set_precision mode for the whole evaluation
    copy_state: bool = True  # copy the reference's parameters into same-named ModelNew entries


@dataclass
class Prepare(Request):
    """Import a candidate only to build its CUDA/C++ extensions (compile-only without a GPU)."""

    cmd: ClassVar[str] = "prepare"
    candidate_source: str = ""
    compile_only: bool = False


@dataclass
class RunReply(Reply):
    mutated_inputs: list[int] = field(default_factory=list)
    fingerprint: list[str] = field(default_factory=list)  # of the inputs the worker drew (`Run.seed`)


@dataclass
class Run(Request):
    """One correctness trial; replies with the outputs.

    The inputs are the tensors carried, or, with a `seed`, drawn by the worker on its device
    (`runtime.draw_inputs(seed, extra or None, on_cpu)`), so large inputs never cross the
    boundary; the reply's fingerprint lets the parent confirm it drew the same values.
    """

    cmd: ClassVar[str] = "run"
    reply: ClassVar[type[Reply]] = RunReply
    args: ArgSpec = field(default_factory=list)
    poison: bool = True
    seed: int = 0  # 0: the inputs are the tensors carried
    extra: int = -1  # hidden shape set to draw; -1: get_inputs()
    on_cpu: bool = False


@dataclass
class KernelsReply(Reply):
    triton_own: list[str] = field(default_factory=list)
    profile: list[list[Any]] = field(default_factory=list)  # [kernel name, GPU ms per call]


@dataclass
class Kernels(Request):
    """Own Triton launches so far and, on a GPU, a profile of calls on the staged candidate inputs."""

    cmd: ClassVar[str] = "kernels"
    reply: ClassVar[type[Reply]] = KernelsReply


@dataclass
class StageReply(Reply):
    fingerprints: list[list[str]] = field(default_factory=list)  # one per set the worker drew


@dataclass
class Stage(Request):
    """Keep input sets on the device for timing: `ref_sets` sets for the reference, then `cand_sets` for the candidate.

    The sets are the tensors carried, or, with `seeds` (one per set), drawn by the worker as in `Run`.
    """

    cmd: ClassVar[str] = "stage"
    reply: ClassVar[type[Reply]] = StageReply
    args: ArgSpec = field(default_factory=list)
    n_inputs: int = 0
    ref_sets: int = 0
    cand_sets: int = 0
    seeds: list[int] = field(default_factory=list)
    on_cpu: bool = False


@dataclass
class HiddenWorkReply(Reply):
    stream_mismatches: int = 0
    # one entry per batch of back-to-back calls, in the order measured (the two sides interleaved):
    # wall_ms, event_ms, excess_ms_per_call (wall minus events, per call) and calls
    candidate: list[dict[str, float]] = field(default_factory=list)
    reference: list[dict[str, float]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


@dataclass
class HiddenWork(Request):
    """Output right after return vs after a full sync; then `batches` batches per side of back-to-back
    calls (at most `reps` each, fewer for long calls so a batch lasts about `batch_ms`), the candidate's
    and the reference's interleaved, each batch's wall time against the sum of its events (staged inputs)."""

    cmd: ClassVar[str] = "hidden_work"
    reply: ClassVar[type[Reply]] = HiddenWorkReply
    reps: int = 50
    batches: int = 7
    batch_ms: float = 20.0


@dataclass
class TimingRule(Request):
    """The timing rule shared by `Time` and `TimeCompiled`.

    method "adaptive": interleaved repetitions until the relative standard error is under the
    target (or the budget is spent). method "fixed" (KernelBench's): `warmup_calls` calls, then
    `reps` calls per side, each between CUDA events and followed by a device synchronisation.
    `flush` clears the L2 before each timed call; `check_outputs` keeps the candidate's timed
    outputs for the drift and correctness checks.
    """

    min_reps: int = 20
    max_reps: int = 1000
    target_rel_stderr: float = 0.01
    budget_s: float = 6.0
    warmup_ms: float = 25.0
    method: str = "adaptive"
    flush: bool = True
    reps: int = 100
    warmup_calls: int = 3
    check_outputs: bool = True


@dataclass
class TimeReply(Reply):
    reference: dict[str, float] = field(default_factory=dict)
    candidate: dict[str, float] = field(default_factory=dict)
    inconsistent_timed_outputs: int = 0
    violations: list[str] = field(default_factory=list)
    fresh_inputs: bool = False  # every repetition drew new candidate inputs (then outputs are of `sampled_reps`)
    sampled_reps: list[int] = field(default_factory=list)
    timing_mode: str = "eager"  # "cuda_graph": both sides as CUDA-graph replays; "capture_failed": nothing timed
    graph_note: str = ""  # why graphs were asked for but not used (a side's capture failed)


@dataclass
class Time(TimingRule):
    """Timing on the staged sets; replies with timed outputs for the parent to check.

    With a `nonce` (adaptive method only), every candidate repetition gets inputs never seen
    before, drawn on the device outside the timed interval from `derive_seed(nonce, "rep<i>")`,
    and the outputs of a few repetitions chosen at random as they run come back with their
    indices, so the parent can redraw those inputs and check them. Without one, the staged
    sets rotate and the first output per set comes back.
    """

    cmd: ClassVar[str] = "time"
    reply: ClassVar[type[Reply]] = TimeReply
    nonce: int = 0
    graphs: bool = False  # capture each side's forward in a CUDA graph and time its replays (`eval.cuda_graphs=auto`)
    host_outputs: bool = False  # keep the timed outputs that come back in host memory, not on the device


@dataclass
class TimeCompiledReply(Reply):
    eager: dict[str, float] = field(default_factory=dict)
    compiled: dict[str, float] = field(default_factory=dict)


@dataclass
class TimeCompiled(TimingRule):
    """torch.compile(reference) against eager on the staged reference sets (baselines only)."""

    cmd: ClassVar[str] = "time_compiled"
    reply: ClassVar[type[Reply]] = TimeCompiledReply


@dataclass
class BusyReply(Reply):
    # per side: host_ms and event_ms; kernel_ms and busy too for the sides that were profiled
    sides: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class Busy(Request):
    """How much of an eager call's time the GPU is busy, per side: kernel time per call (profiler) over the
    call's event-timed median, and the host's time to make the call, all under the timing's conditions
    (staged inputs, L2 flush and GPU lead). Only a side whose host time exceeds `profile_above_ms` is
    profiled: a profile costs tens of ms of exclusive GPU time, and a side under that host time is never
    host-bound."""

    cmd: ClassVar[str] = "busy"
    reply: ClassVar[type[Reply]] = BusyReply
    calls: int = 5
    flush: bool = True
    profile_above_ms: float = 0.0


@dataclass
class Unload(Request):
    """Drop the problem and candidate; free device memory (the worker is then reused)."""

    cmd: ClassVar[str] = "unload"


@dataclass
class Sync(Request):
    """Answer at once. Sent after the last check: a reply still queued from earlier (a candidate forged one
    in its place) arrives here instead, out of order, and ends the evaluation as a crash."""

    cmd: ClassVar[str] = "sync"


@dataclass
class Exit(Request):
    """Leave the serve loop (no reply)."""

    cmd: ClassVar[str] = "exit"


REQUESTS: dict[str, type[Request]] = {
    cls.cmd: cls for cls in (Hello, Load, Prepare, Run, Kernels, Stage, HiddenWork, Time, TimeCompiled, Busy, Unload, Sync,
                          Exit)
}


def encode(message: Request | Reply, cmd: str | None = None) -> dict[str, Any]:
    """The JSON header of a request (its own cmd) or a reply (the cmd it answers)."""
    header = dataclasses.asdict(message)
    header["cmd"] = cmd if cmd is not None else getattr(message, "cmd")
    return header


def decode_request(header: dict[str, Any]) -> Request:
    """Rebuild a request from its header; unknown commands or fields are a ProtocolError."""
    cls = REQUESTS.get(header.get("cmd", ""))
    if cls is None:
        raise ProtocolError(f"unknown command {str(header.get('cmd'))[:80]!r}")
    return _build(cls, header)


def decode_reply(request: Request, header: dict[str, Any]) -> Reply:
    """Rebuild the reply to `request`; a reply to another command, or with ill-typed fields, is a ProtocolError."""
    if header.get("cmd") != request.cmd:
        raise ProtocolError(f"worker answered {str(header.get('cmd'))[:80]!r} to {request.cmd!r} (forged or out of order)")
    return _build(request.reply, header)


def _build(cls: type, header: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in header:
            continue
        value = header[f.name]
        if not _conforms(value, hints[f.name]):
            raise ProtocolError(f"{cls.__name__}.{f.name}: {type(value).__name__} does not fit {hints[f.name]}")
        values[f.name] = value
    unknown = set(header) - {f.name for f in dataclasses.fields(cls)} - {"cmd"}
    if unknown:
        raise ProtocolError(f"{cls.__name__}: unknown field(s) {sorted(unknown)[:5]}")
    return cls(**values)


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a type hint (the subset of hints used above)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin is Union:
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(_conforms(k, key) and _conforms(v, item) for k, v in value.items())
    return False
