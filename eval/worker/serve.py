"""The worker's command loop: imports a candidate and runs it when the parent asks.

Runs in a spawned, sandboxed process (see `eval.process.sandbox`). It never sees the input seed or
the reference outputs: the parent sends inputs and receives outputs, and decides every
verdict itself. The worker reports facts (outputs, launched kernels, timings, tamper
evidence); it never reports a verdict. Every command ends with a device-wide
synchronisation, so no work a candidate left queued can overlap another worker's timing.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils import cpp_extension

from eval.crossing import protocol as p
from eval.crossing._capture import self_overlap
from eval.crossing.wire import Channel, ChannelClosed, ProtocolError
from eval.worker import (call_inputs, graphs, idle_probe, integrity, isolation, lazy_builds, light_build, prebuilt,
                         timing, trial_tools, tracing)
from eval.worker.observed_commands import ObservedTiming
from eval.worker.compile_only import CompileOnlyDone, compile_only
from problems import (
    build_model,
    draw_inputs,
    flatten_outputs,
    input_fingerprint,
    load_source,
    output_structure,
    set_precision,
)

_TRACEBACK_CHARS = 4000
_load_inline = cpp_extension.load_inline
CANDIDATE_MODULE = "kh_candidate"  # the candidate's module name: its Triton kernels' launches are its own
# Requests that no timing observes: after them a process hands back what it keeps cached beyond KEEP_CACHED_BYTES
# (never after a timed block, where the release would add to the block's wall time; nor mid-block)
_UNTIMED = frozenset({"load", "prepare", "run", "stage", "kernels", "integrity"})
# Requests whose GPU work outlives the reply: the reference process's observed window waits, queued, for the
# candidate's block (`eval.worker.observed`)
_LEFT_QUEUED = frozenset({"window_open"})
KEEP_CACHED_BYTES = 1 << 30
Handled = tuple[p.Reply, list[torch.Tensor]]


def _caused_by(exc: BaseException | None, cause: BaseException) -> bool:
    """True when `cause` is `exc` or in its chain of causes and contexts (a candidate that re-raises its own error
    after a failed build still failed because of the build)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if exc is cause:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _tail(text: str, n: int = _TRACEBACK_CHARS) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def _error_text(exc: BaseException | None) -> str:
    """A build failure as reply text ("" for none)."""
    return "" if exc is None else _tail(str(exc) or repr(exc))


def _is_cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("CUDA error", "cudaError", "illegal memory access", "CUBLAS_STATUS", "device-side assert"))


def _failure(stage: p.FailureStage, exc: BaseException, reply: type[p.Reply] = p.Reply, during: str = "") -> p.Reply:
    """A failed reply describing `exc` (the traceback tail, and whether CUDA or memory gave out); `during` names
    the command where the stage does not."""
    if isinstance(exc, SystemExit):
        return reply(ok=False, stage=stage, error=f"candidate called sys.exit({exc.code}) during {during or stage}")
    return reply(ok=False, stage=stage, error=_tail(traceback.format_exc()), cuda_error=_is_cuda_error(exc),
                 oom=isinstance(exc, torch.OutOfMemoryError))


def _import_file(path: Path, module_name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _no_tqdm_monitor() -> None:  # issue 56
    """Keep tqdm from starting its monitor thread: torch.fx's interpreter, which Helion's compiler runs, makes a
    (disabled) progress bar, and the thread it starts would read as one the candidate left running."""
    try:
        from tqdm import std
    except ImportError:
        return
    std.tqdm.monitor_interval = 0


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


@dataclass
class Subject:
    """A model this process calls for the parent: the candidate's ModelNew, or (in the reference process) a reference.

    `buffers` hold the inputs of the repetition being timed, refilled before each call; `args` is forward's
    argument list built on them; `sets` are the staged timing input sets; `graph` holds a captured CUDA graph
    and its outputs once a block asked for replays.
    """

    problem: Any
    model: Any
    spec: p.ArgSpec = field(default_factory=list)
    sets: list[list[torch.Tensor]] = field(default_factory=list)
    buffers: list[torch.Tensor] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)
    graph: Any = None


class Worker(ObservedTiming):
    """State of one worker process: its subjects, the candidate's module and the timing tools."""

    def __init__(self, channel: Channel, started: float | None = None):
        super().__init__()
        self.channel = channel
        self.imports_s = None if started is None else round(time.monotonic() - started, 3)
        self.device = torch.device("cpu")
        self.tracer = tracing.TritonLaunchTracer()
        self.tracer.install()
        self.subjects: dict[str, Subject] = {}
        self.snapshot: integrity.Snapshot | None = None
        self.flusher: timing.L2Flusher | None = None
        self.loop: Any = None
        self.probe: idle_probe.IdleProbe | None = None  # made at the first `Probe` (the reference process's)
        self.trial_buffers: dict[tuple[Any, ...], torch.Tensor] = {}

    @property
    def candidate(self) -> Any:
        return self.subjects["candidate"].model

    # -- commands ---------------------------------------------------------------------------
    def cmd_hello(self, msg: p.Hello, tensors: list[torch.Tensor]) -> Handled:
        self.device = torch.device(msg.device)
        info: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0], "uid": os.getuid(),
                                "network_isolated": isolation.network_isolated(),
                                "filesystem_isolated": isolation.filesystem_isolated()}
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            info["triton"] = "absent"
        t0 = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            props = torch.cuda.get_device_properties(self.device)
            info.update(device_name=props.name, device_uuid=str(getattr(props, "uuid", "")),
                        sm_count=props.multi_processor_count,
                        l2_bytes=int(getattr(props, "L2_cache_size", 0)), capability=f"{props.major}.{props.minor}",
                        cuda=torch.version.cuda)
            self.flusher = timing.L2Flusher(self.device)
        else:
            info["device_name"] = "cpu (Triton interpreter)"
        t1 = time.perf_counter()
        self.loop = timing_loop(self.device, msg.capture_key)  # the key lives in the loop alone from here
        msg.capture_key = 0
        t2 = time.perf_counter()
        # where a start's seconds went, from the interpreter's start: what a fresh worker per candidate costs
        info["start_parts_s"] = {"imports": self.imports_s, "device": round(t1 - t0, 3), "loop": round(t2 - t1, 3),
                                 "warm_up": _warm_up(self.device)}
        self.tracer.reset()
        return p.HelloReply(info=info), []

    def cmd_load(self, msg: p.Load, tensors: list[torch.Tensor]) -> Handled:
        set_precision(msg.precision)  # before the snapshot, which then guards these switches
        torch.use_deterministic_algorithms(False)
        try:
            problem = load_source(msg.problem_source, msg.problem_label or "<problem>", msg.size_overrides)
            reference = build_model(problem, msg.weight_seed, self.device)
        except BaseException as exc:  # noqa: BLE001  trusted code, but report rather than die
            return _failure(p.FailureStage.PROBLEM, exc, p.LoadReply), []
        if msg.candidate_source is None:  # the reference process (or a baseline): the reference itself
            self.subjects[msg.subject] = Subject(problem, torch.compile(reference) if msg.compiled else reference)
            return p.LoadReply(), []
        # built ahead: the build worker's calls, answered from its record in the (read-only) build folder
        loader = prebuilt.loading(_load_inline, Path(msg.extensions_dir)) if msg.extensions_dir else _load_inline
        cpp_extension.load_inline = light_build.wrap(loader)
        self.tracer.reset()
        if "helion" in msg.candidate_source:  # issue 56: Helion's compiles are watched from before its import
            self.tracer.arm_helion()
            _no_tqdm_monitor()
        self.snapshot = integrity.Snapshot()
        candidate_path = Path.cwd() / "candidate.py"
        candidate_path.write_text(msg.candidate_source)
        t0 = time.perf_counter()
        try:
            module = _import_file(candidate_path, CANDIDATE_MODULE)
        except BaseException as exc:  # noqa: BLE001  candidate code: anything can come out
            return _failure(p.FailureStage.IMPORT, exc, p.LoadReply), []
        import_s = time.perf_counter() - t0
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            return p.LoadReply(ok=False, stage=p.FailureStage.FORMAT,
                               error="the candidate module defines no ModelNew"), []
        try:
            candidate = build_model(_Constructor(model_new, problem), msg.weight_seed)
            if not isinstance(candidate, torch.nn.Module):
                return p.LoadReply(ok=False, stage=p.FailureStage.FORMAT,
                                   error="ModelNew(...) is not a torch.nn.Module"), []
        except BaseException as exc:  # noqa: BLE001
            return _failure(p.FailureStage.CONSTRUCT, exc, p.LoadReply), []
        copied, note = 0, ""
        try:
            copied = trial_tools.copy_matching_state(reference, candidate) if msg.copy_state else 0
        except Exception as exc:  # noqa: BLE001  how ModelNew built its own tensors refuses the copy
            note = (f"the reference's parameters could not be copied into ModelNew ({_tail(str(exc), 200)}); it keeps "
                    "its own, built after the same seed as the reference (KernelBench's way)")
        try:
            self.subjects[msg.subject] = Subject(problem, candidate.to(self.device))
        except BaseException as exc:  # noqa: BLE001
            return _failure(p.FailureStage.CONSTRUCT, exc, p.LoadReply), []
        del reference  # never timed here: the reference is timed in a process that has no candidate code
        violations = self.snapshot.violations()
        if violations:
            return p.LoadReply(ok=False, stage=p.FailureStage.INTEGRITY, error="; ".join(violations)), []
        return p.LoadReply(import_s=import_s, state_copied=copied, state_note=note), []

    def cmd_prepare(self, msg: p.Prepare, tensors: list[torch.Tensor]) -> Handled:
        """Import a candidate only to build its extensions (no GPU needed), each call recorded for the evaluating
        worker (`eval.worker.prebuilt`). A failed build fails the candidate only when its error ends the import,
        as with torch's own `load_inline`: a candidate that catches it and falls back builds fine."""
        failures: list[BaseException] = []
        build = compile_only(_load_inline) if msg.compile_only else _load_inline
        light_first = light_build.wrap(prebuilt.recording(build, Path(os.environ["TORCH_EXTENSIONS_DIR"])))

        lazy_failures: list[BaseException] = []

        def noting_failures(into: list[BaseException]) -> Callable[..., Any]:
            def recording_load_inline(*args: Any, **kwargs: Any) -> Any:
                try:
                    return light_first(*args, **kwargs)
                except CompileOnlyDone:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    into.append(exc)
                    raise
            return recording_load_inline

        cpp_extension.load_inline = noting_failures(failures)
        path = Path.cwd() / "candidate_prepare.py"
        path.write_text(msg.candidate_source)
        ended_by: BaseException | None = None
        try:
            module = _import_file(path, "kh_candidate_prepare")
            if msg.lazy_build_until > 0 and not msg.compile_only:  # calls made later, in forward (`lazy_builds`)
                lazy_builds.build_lazy(msg.candidate_source, vars(module), noting_failures(lazy_failures),
                                       msg.lazy_build_until)
        except BaseException as exc:  # noqa: BLE001  non-build failures are judged later, on the GPU
            ended_by = exc
        finally:
            cpp_extension.load_inline = _load_inline
        fatal = next((f for f in failures if _caused_by(ended_by, f)), None)
        if fatal is not None:
            return p.PrepareReply(ok=False, stage=p.FailureStage.BUILD, error=_error_text(fatal)), []
        return p.PrepareReply(handled=_error_text(next(iter(failures), None)),
                              lazy_failed=_error_text(next(iter(lazy_failures), None))), []

    def cmd_run(self, msg: p.Run, tensors: list[torch.Tensor]) -> Handled:
        """One correctness trial on the inputs carried (or, with a seed, drawn here), memory poisoned while it runs."""
        assert self.candidate is not None and self.snapshot is not None
        fingerprint: list[str] = []
        if msg.seed:
            inputs = call_inputs.at_stable_addresses(self._draw(msg.seed, False, self.subjects["candidate"]), self.trial_buffers)
            fingerprint = input_fingerprint(inputs)
        else:
            carried = call_inputs.at_stable_addresses([t.to(self.device) for t in tensors], self.trial_buffers)
            inputs = call_inputs.rebuild_args(msg.args, carried)
        pristine = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        self._sync()
        try:
            with trial_tools.poisoned_memory(msg.poison) as turned_off, torch.no_grad():
                out = self.candidate(*inputs)
            self._sync()
        except BaseException as exc:  # noqa: BLE001
            return _failure(p.FailureStage.RUN, exc, p.RunReply), []
        # walking the output can run the candidate's code (container subclasses): before the tamper check
        outputs, problem = self._check_outputs(out, inputs)
        structure = output_structure(out)
        violations = self.snapshot.violations()
        if turned_off:
            violations.append("turned off the poisoning of new allocations during the call (" + ", ".join(turned_off) + ")")
        if violations:
            return p.RunReply(ok=False, stage=p.FailureStage.INTEGRITY, error="; ".join(violations)), []
        if problem:
            return p.RunReply(ok=False, stage=p.FailureStage.OUTPUT, error=problem), []
        mutated = [i for i, (a, b) in enumerate(zip(inputs, pristine)) if isinstance(a, torch.Tensor) and not trial_tools.same(a, b)]
        return p.RunReply(mutated_inputs=mutated, output_structure=structure, fingerprint=fingerprint), outputs

    def cmd_stage(self, msg: p.Stage, tensors: list[torch.Tensor]) -> Handled:
        """Keep a subject's timing input sets on the device (carried or drawn outside the exclusive timing window)."""
        subject = self.subjects[msg.subject]
        n, count = msg.n_inputs, msg.sets
        reply = p.StageReply()
        if msg.seeds:
            drawn = [self._draw(seed, msg.on_cpu, subject) for seed in msg.seeds]
            reply.fingerprints = [input_fingerprint(d) for d in drawn]
            groups = [[x for x in d if isinstance(x, torch.Tensor)] for d in drawn]
        else:
            sets = [t.to(self.device) for t in tensors]
            groups = [sets[k * n:(k + 1) * n] for k in range(count)] if n * count == len(sets) else []
        if not groups or len(groups) != count or any(len(g) != n for g in groups):
            return p.StageReply(ok=False, stage=p.FailureStage.STAGE,
                                error="staged tensor count does not match the set counts"), []
        self.trial_buffers.clear()  # the trials are over: their buffers' memory goes to timing
        subject.spec, subject.sets = msg.args, groups
        subject.buffers = [timing.same_layout_buffer(t) for t in groups[0]]
        subject.args = call_inputs.rebuild_args(subject.spec, subject.buffers)
        subject.graph = None
        return reply, []

    def _draw(self, seed: int, on_cpu: bool, subject: Subject) -> list[Any]:
        """Timing inputs drawn here from a seed the parent chose (it draws the same ones for the reference)."""
        return draw_inputs(subject.problem, seed, self.device, None, on_cpu)

    def cmd_kernels(self, msg: p.Kernels, tensors: list[torch.Tensor]) -> Handled:
        """Own Triton launches so far and, on a GPU, a profile of calls on the subject's staged set (the reference
        process profiles its reference this way: the library kernels the problem's own code launches)."""
        subject = self.subjects[msg.subject]
        try:
            reply = p.KernelsReply(triton_own=self.tracer.own_launches(CANDIDATE_MODULE),
                                   languages=self.tracer.own_languages(CANDIDATE_MODULE))  # issue 56
            if self.device.type == "cuda" and subject.sets:
                with torch.no_grad():
                    reply.profile = [[name, ms] for name, ms in
                                     tracing.profile_kernels(lambda: subject.model(*subject.args))]
                reply.triton_own = self.tracer.own_launches(CANDIDATE_MODULE)
                reply.languages = self.tracer.own_languages(CANDIDATE_MODULE)  # issue 56
        except tracing.TracerTampered as exc:
            return p.KernelsReply(ok=False, stage=p.FailureStage.INTEGRITY,
                                  error=f"forged the record of Triton launches: {exc}"), []
        return reply, []

    def cmd_back_to_back(self, msg: p.BackToBack, tensors: list[torch.Tensor]) -> Handled:
        """Batches of back-to-back calls of one subject, wall time against events (the parent interleaves the two
        processes' batches); first, with `check_stream`, output right after return vs after a full sync."""
        subject = self.subjects[msg.subject]
        differs = 0
        batches = []
        collecting = gc.isenabled()
        with torch.no_grad():
            for _ in range(3 if msg.check_stream else 0):
                out = flatten_outputs(subject.model(*subject.args))
                snap = [o.clone() if isinstance(o, torch.Tensor) else o for o in out]  # same stream, right after return
                torch.cuda.synchronize()
                differs += any(isinstance(o, torch.Tensor) and not trial_tools.same(o, s) for o, s in zip(out, snap))
            gc.disable()  # a collection inside a batch is host noise
            try:
                for _ in range(max(1, msg.batches)):
                    batches.append({**timing.back_to_back_excess(lambda: subject.model(*subject.args), msg.calls),
                                    "calls": msg.calls})
            finally:
                if collecting:
                    gc.enable()
        return p.BackToBackReply(batches=batches, stream_mismatches=differs, violations=self._violations()), []

    def cmd_time_block(self, msg: p.TimeBlock, tensors: list[torch.Tensor]) -> Handled:
        """Time one block of repetitions of a subject in the timing loop; raw times and captures go to the parent."""
        subject = self.subjects[msg.subject]
        if msg.key:
            self.loop.rekey(msg.key)
            msg.key = 0
        reps = range(msg.first_rep, msg.first_rep + msg.reps)
        fresh: dict[int, list[torch.Tensor]] | None = None
        if msg.seeds:
            fresh, problem = self._draw_fresh(subject, reps, msg.seeds)
            if problem:
                return p.TimeBlockReply(ok=False, stage=p.FailureStage.STAGE, error=problem), []
        refill = call_inputs.refiller(subject, fresh)
        copies = [list(zip(subject.buffers, call_inputs.inputs_of(subject, fresh, rep))) for rep in reps]
        forward: Callable[..., Any] = subject.model
        reply = p.TimeBlockReply(fresh_inputs=fresh is not None)
        with torch.set_grad_enabled(bool(msg.grad)):
            if msg.graphs and self.device.type == "cuda":
                if subject.graph is None:
                    try:
                        subject.graph = graphs.capture(timing.TimedSide(refill, lambda: subject.model(*subject.args)))
                    except Exception as exc:  # noqa: BLE001  this process's CUDA state is suspect now
                        return p.TimeBlockReply(timing_mode="capture_failed", graph_note=graphs.failure_note(exc)), []
                forward = graphs.replayer(*subject.graph)
                reply.timing_mode = "cuda_graph"
            result = self.loop.block(forward, [] if subject.graph is not None and msg.graphs else subject.args,
                                     msg.reps, first_rep=msg.first_rep, flush=msg.flush,
                                     flush_bytes=max(0, int(msg.flush_bytes)), lead=msg.lead,
                                     sync_each=msg.sync_each, capture=msg.capture, copies=copies)
        reply.times_ms = [float(t) for t in result.times_ms]
        reply.leaves = [[dtype, list(shape)] for dtype, shape in result.leaves]
        reply.violations = list(result.violations)  # the loop's; the snapshot is compared apart (`Integrity`)
        reply.outside_ms = [float(t) for t in result.outside_ms]
        return reply, ([result.captures] if msg.capture and result.captures.numel() else [])

    def cmd_integrity(self, msg: p.Integrity, tensors: list[torch.Tensor]) -> Handled:
        return p.IntegrityReply(violations=self._violations()), []

    def _violations(self) -> list[str]:
        """Tamper evidence in a candidate's process (none in the reference process, which has no candidate code)."""
        return self.snapshot.violations() if self.snapshot is not None else []

    def _draw_fresh(self, subject: Subject, reps: range, seeds: list[int]
                    ) -> tuple[dict[int, list[torch.Tensor]], str]:
        """Repetition r's fresh inputs, drawn from the parent's seed for it; or why they cannot refill the buffers
        (`get_inputs()` draws other shapes each time). Drawn inside the block's request, so inside its wall time."""
        if len(seeds) != len(reps):
            return {}, f"{len(seeds)} seeds for {len(reps)} repetitions"
        fresh: dict[int, list[torch.Tensor]] = {}
        for rep, seed in zip(reps, seeds):
            drawn = [x for x in self._draw(seed, False, subject) if isinstance(x, torch.Tensor)]
            if len(drawn) != len(subject.buffers) or any(
                    (a.shape, a.dtype) != (b.shape, b.dtype) for a, b in zip(drawn, subject.buffers)):
                return {}, "get_inputs() draws other shapes each time"
            fresh[rep] = drawn
        return fresh, ""

    def cmd_busy(self, msg: p.Busy, tensors: list[torch.Tensor]) -> Handled:
        """Host and GPU time of an eager call of a subject on its staged sets (see `graphs.busy_share`)."""
        subject = self.subjects[msg.subject]
        side = timing.TimedSide(call_inputs.refiller(subject, None), lambda: subject.model(*subject.args))
        with torch.no_grad():
            share = graphs.busy_share(side, self.flusher if msg.flush and self.flusher else _no_flush, msg.calls,
                                      msg.profile_above_ms)
        violations = self._violations()
        if violations:
            return p.BusyReply(ok=False, stage=p.FailureStage.INTEGRITY, error="; ".join(violations)), []
        return p.BusyReply(side=share), []

    def cmd_probe(self, msg: p.Probe, tensors: list[torch.Tensor]) -> Handled:
        """Rounds of the GPU-idle probe, for the parent to judge (the CPU has no probe: an empty answer)."""
        if self.probe is None:
            self.probe = idle_probe.IdleProbe(self.device)
        if msg.calibrate:
            self.probe.calibrate()
        times = self.probe.rounds(max(1, min(msg.rounds, 100)))
        return p.ProbeReply(latencies_us=times, idle_us=self.probe.idle_us), []

    def cmd_sync(self, msg: p.Sync, tensors: list[torch.Tensor]) -> Handled:
        return p.Reply(), []

    def cmd_unload(self, msg: p.Unload, tensors: list[torch.Tensor]) -> Handled:
        """Drop one subject (the reference process serves many evaluations; a candidate's process serves one)."""
        self.subjects.pop(msg.subject, None)
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return p.Reply(), []

    # -- helpers ----------------------------------------------------------------------------
    def _release_cached(self) -> None:
        """Hand the device memory this process keeps cached past `KEEP_CACHED_BYTES` back to the device. Each process
        keeps what it once held: on a problem with 6 GiB tensors the reference process's trials and staging left
        39 GiB cached, and the candidate's staging then ran the H100 out of memory."""
        if self.device.type == "cuda":
            cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
            if cached > KEEP_CACHED_BYTES:
                torch.cuda.empty_cache()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _check_outputs(self, out: Any, inputs: list[Any]) -> tuple[list[torch.Tensor], str]:
        outputs = flatten_outputs(out)
        spans = [_storage_span(t) for t in inputs if isinstance(t, torch.Tensor)]
        for i, o in enumerate(outputs):
            if type(o) is not torch.Tensor:  # noqa: E721  subclasses (lazy or fake tensors) are refused
                return [], f"output {i} is a {type(o).__module__}.{type(o).__qualname__}, not a torch.Tensor"
            if o.layout != torch.strided:
                return [], f"output {i} has layout {o.layout}; a dense tensor is required"
            if self_overlap(list(o.shape), list(o.stride())):
                return [], (f"output {i} overlaps itself (sizes {list(o.shape)}, strides {list(o.stride())}: a "
                            "stride-0 or overlapping view); a dense tensor is required")
            if o.device.type != self.device.type:
                return [], f"output {i} is on {o.device}, expected {self.device.type}"
            lo, hi = _storage_span(o)
            for j, (a, b) in enumerate(spans):
                if o.numel() and lo < b and a < hi:
                    return [], f"output {i} shares memory with input {j} (returns a view or the input itself)"
        return [o.detach() for o in outputs], ""

    # -- loop -------------------------------------------------------------------------------
    def serve(self) -> None:
        handlers: dict[str, Callable[[Any, list[torch.Tensor]], Handled]] = {
            cmd: getattr(self, f"cmd_{cmd}") for cmd in p.REQUESTS if cmd != "exit"
        }
        while True:
            try:
                header, tensors = self.channel.recv()
                msg = p.decode_request(header)
            except (ChannelClosed, ProtocolError):
                return
            if isinstance(msg, p.Exit):
                return
            try:
                reply, out = handlers[msg.cmd](msg, tensors)
                if msg.cmd not in _LEFT_QUEUED:  # observed
                    self._sync()  # nothing the candidate queued outlives the command
                if msg.cmd in _UNTIMED:
                    self._release_cached()
            except BaseException as exc:  # noqa: BLE001  report, never die silently
                reply, out = _failure(p.FailureStage.RUN, exc, msg.reply, during=msg.cmd), []
            try:
                self.channel.send(p.encode(reply, msg.cmd), out, in_frame=msg.timed)
            except Exception:  # noqa: BLE001  e.g. an output dtype the wire cannot carry
                failed = p.Reply(ok=False, stage=p.FailureStage.OUTPUT, error=_tail(traceback.format_exc()))
                self.channel.send(p.encode(failed, msg.cmd))


class _Constructor:
    """Looks like a problem module to `runtime.build_model`, but builds ModelNew (same seed, same init inputs)."""

    def __init__(self, model_new: type, problem: Any):
        self.Model = model_new
        self.get_init_inputs = problem.get_init_inputs


def timing_loop(device: torch.device, key: int) -> Any:
    """The timing loop for `device`: native on a GPU, `timing.PythonLoop` on the CPU (which never loads the native
    one)."""
    if device.type != "cuda":
        return timing.PythonLoop(key)
    from eval.worker.native_loop import NativeLoop

    return NativeLoop(device, key, samples=timing.CAPTURE_SAMPLES)


def _warm_up(device: torch.device) -> float:
    """Pay once, at spawn, what the first candidate would pay: Triton's compiler and CUDA's profiler."""
    t0 = time.perf_counter()
    try:
        import triton.language  # noqa: F401
    except ImportError:
        return 0.0
    if device.type == "cuda":
        from eval.worker import warmup

        x = torch.ones(1024, device=device)
        warmup.launch(x)
        tracing.profile_kernels(lambda: x.add_(1), repeats=1)
        torch.cuda.synchronize()
    return round(time.perf_counter() - t0, 3)


def _no_flush() -> None:
    """The L2 is left as the previous call left it (`eval.l2_flush=false`)."""


def prime(device: str) -> None:
    """What a worker's start imports and warms up, run by the parent's trusted child that writes the workers'
    bytecode (`eval.process._bytecode`): this module's imports, and `_warm_up`'s (Triton's compiler, the profiler's)."""
    _warm_up(torch.device(device))


def main(started: float | None = None) -> None:
    """Serve the parent; `started`: when the interpreter began (monotonic), before the worker's imports."""
    fds = [int(a) for a in sys.argv[1:]]
    read_fd, write_fd = fds[0], fds[1]
    send_fd, recv_fd = (fds[2], fds[3]) if len(fds) >= 4 else (None, None)
    Worker(Channel(read_fd, write_fd, send_fd=send_fd, recv_fd=recv_fd), started).serve()
    # the parent is gone or asked us to exit: leave no directory behind even if it was killed
    shutil.rmtree(Path.cwd(), ignore_errors=True)
    # then exit at once: tearing down the interpreter with torch loaded takes half a second, and nothing of it is
    # needed (what the worker printed is flushed first)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
