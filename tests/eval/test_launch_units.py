"""Launch-bound timings on a CPU: the setting, the result fields, the host-bound step and flag, the graph
fallback logic, the feedback and report texts, and the bench part (`harness bench eval --part launch-bound`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from eval.timing import host_share, measure
from eval.steps import timing_steps
from eval.crossing import protocol as p
from eval.config import EvalConfig
from eval.feedback import render_feedback
from eval.result import EvalResult, Status, Timing
from eval.crossing.wire import ProtocolError
from eval.worker import graphs


# ------------------------------------------------------------------------------ config
def test_cuda_graphs_setting_is_validated_and_keys_the_cache_only_when_on() -> None:
    assert EvalConfig().cuda_graphs == "off"
    assert "cuda_graphs" not in EvalConfig().cache_fields()  # old cache keys stay valid
    assert EvalConfig(cuda_graphs="auto").cache_fields()["cuda_graphs"] == "auto"
    with pytest.raises(ValueError, match="eval.cuda_graphs must be one of off, auto"):
        EvalConfig(cuda_graphs="on")


def test_cuda_graphs_goes_through_the_hydra_schema() -> None:
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="harness.conf", version_base=None):
        cfg = compose(config_name="config", overrides=["eval.cuda_graphs=auto"])
    assert EvalConfig(**cfg.eval).cuda_graphs == "auto"


# ------------------------------------------------------------------------------ result
def test_result_fields_round_trip_and_old_results_load() -> None:
    r = EvalResult(status=Status.CORRECT, gpu_busy={"reference": 0.31, "candidate": 0.97}, host_bound=["reference"],
                   timing_mode="cuda_graph")
    back = EvalResult.from_dict(r.to_dict())
    assert (back.gpu_busy, back.host_bound, back.timing_mode) == (r.gpu_busy, r.host_bound, r.timing_mode)
    old = r.to_dict()
    for key in ("gpu_busy", "host_bound", "timing_mode"):
        del old[key]
    legacy = EvalResult.from_dict(old)
    assert legacy.gpu_busy == {} and legacy.host_bound == [] and legacy.timing_mode == "eager"


# ------------------------------------------------------------------------------ protocol
def test_busy_and_graph_fields_cross_the_boundary_typed() -> None:
    req = p.decode_request(p.encode(p.Busy(subject="ref3", calls=3, flush=False)))
    assert isinstance(req, p.Busy) and req.calls == 3 and req.flush is False and req.subject == "ref3"
    reply = p.decode_reply(req, p.encode(p.BusyReply(side={"busy": 0.2}), "busy"))
    assert reply.side["busy"] == 0.2
    with pytest.raises(ProtocolError):
        p.decode_reply(req, {"cmd": "busy", "ok": True, "side": {"busy": "high"}})
    t = p.decode_request(p.encode(p.TimeBlock(graphs=True, reps=7)))
    assert t.graphs is True and t.reps == 7
    tr = p.decode_reply(t, p.encode(p.TimeBlockReply(timing_mode="cuda_graph", graph_note=""), "time_block"))
    assert tr.timing_mode == "cuda_graph"


# ------------------------------------------------------------------------------ the host-bound step
class _Ctx:
    """What `timing_steps.host_bound` and `record_mode` touch: each side's Busy goes to its own process."""

    def __init__(self, sides: dict, cuda_graphs: str = "off"):
        self.config = EvalConfig(cuda_graphs=cuda_graphs)
        self.graphs = cuda_graphs == "auto"
        self.result = EvalResult()
        self.sent: list = []
        self._sides = sides

    def sides(self):
        return measure.Side("reference", "reference process", "ref0"), measure.Side("candidate", "worker", "candidate")

    def request(self, message, tensors=None, timeout=None, worker=None):
        self.sent.append((worker, message))
        name = {"reference process": "reference", "worker": "candidate"}[worker]
        return p.BusyReply(side=self._sides.get(name, {})), []


def test_a_side_whose_host_time_is_half_its_gpu_time_is_flagged_even_when_the_gpu_looks_busy() -> None:
    # the GPU is 90 % busy, yet the host needs 1.2 ms to enqueue 2 ms of GPU work: a host half as fast starves it
    ctx = _Ctx({"reference": {"kernel_ms": 2.0, "event_ms": 2.2, "busy": 0.9, "host_ms": 1.2},
                "candidate": {"kernel_ms": 0.9, "event_ms": 1.0, "busy": 0.9, "host_ms": 0.05}})
    timing_steps.host_bound(ctx)
    (where, first), (_, second) = ctx.sent
    assert isinstance(first, p.Busy) and first.flush is True and where == "reference process"
    assert first.subject == "ref0" and second.subject == "candidate"
    assert ctx.result.gpu_busy == {"reference": 0.9, "candidate": 0.9}
    assert ctx.result.host_share == {"reference": 0.6, "candidate": 0.0556}
    assert ctx.result.host_bound == ["reference"]
    assert ctx.result.flags == []  # it runs before timing: flagged once timing tells how the calls ran
    timing_steps.record_mode(ctx, measure.Measurement(timing_mode="eager"))
    (flag,) = ctx.result.flags
    assert flag.startswith("host-bound:") and "reference 0.60" in flag and "eval.cuda_graphs=auto" in flag
    graphed = _Ctx({"reference": {"kernel_ms": 2.0, "event_ms": 2.2, "busy": 0.9, "host_ms": 1.2}}, cuda_graphs="auto")
    timing_steps.host_bound(graphed)
    timing_steps.record_mode(graphed, measure.Measurement(timing_mode="cuda_graph"))
    (flag,) = graphed.result.flags
    assert flag.startswith("host-bound:") and "CUDA-graph replays, which take most of that host time out" in flag


def test_a_side_under_the_floor_is_not_profiled_and_never_flagged() -> None:
    # the worker profiles only the sides whose host time is over the floor; the others come back without kernel_ms
    ctx = _Ctx({"reference": {"event_ms": 0.3, "host_ms": 0.12},
                "candidate": {"kernel_ms": 0.4, "event_ms": 0.5, "busy": 0.8, "host_ms": 0.35}})
    timing_steps.host_bound(ctx)
    assert ctx.sent[0][1].profile_above_ms == host_share.HOST_FLOOR_MS
    assert ctx.result.host_ms == {"reference": 0.12, "candidate": 0.35}
    assert ctx.result.gpu_busy == {"candidate": 0.8} and ctx.result.host_share == {"candidate": 0.875}
    assert ctx.result.host_bound == ["candidate"]


@pytest.mark.parametrize("host_ms, kernel_ms, bound", [
    (0.49, 1.0, False),  # under half the GPU time
    (0.5, 1.0, True),
    (0.15, 0.01, False),  # a large share, but under the GPU lead (HOST_FLOOR_MS): enqueued while the GPU spins
    (0.3, 0.0, True),  # no kernel time at all
])
def test_host_bound_threshold_and_floor(host_ms: float, kernel_ms: float, bound: bool) -> None:
    ctx = _Ctx({"reference": {"kernel_ms": kernel_ms, "event_ms": 1.0, "busy": 0.5, "host_ms": host_ms}})
    timing_steps.host_bound(ctx)
    assert (ctx.result.host_bound == ["reference"]) is bound


def test_missing_or_forged_values_are_clamped_and_never_flag() -> None:
    ctx = _Ctx({"reference": {"busy": 0.95}, "candidate": {"busy": 7.0, "host_ms": -3.0, "kernel_ms": 1.0}})
    timing_steps.host_bound(ctx)
    assert ctx.result.gpu_busy == {"reference": 0.95, "candidate": 1.0}
    assert ctx.result.host_share == {"candidate": 0.0}
    assert ctx.result.host_bound == [] and ctx.result.flags == []
    nan = _Ctx({"reference": {"busy": float("nan"), "host_ms": float("inf"), "kernel_ms": 1.0},
                "candidate": {"busy": 0.6, "host_ms": "slow", "kernel_ms": 1.0}})
    timing_steps.host_bound(nan)
    assert nan.result.gpu_busy == {"candidate": 0.6} and nan.result.host_share == {} and nan.result.host_bound == []


def test_graph_mode_is_recorded_and_a_fallback_is_flagged() -> None:
    ctx = _Ctx({}, cuda_graphs="auto")
    timing_steps.record_mode(ctx, measure.Measurement(timing_mode="cuda_graph"))
    assert ctx.result.timing_mode == "cuda_graph" and ctx.result.flags == []
    ctx = _Ctx({}, cuda_graphs="auto")
    timing_steps.record_mode(ctx, measure.Measurement(graph_note="graphs were asked for and not used"))
    assert ctx.result.timing_mode == "eager"
    assert ctx.result.flags == ["cuda_graphs: graphs were asked for and not used"]
    off = _Ctx({})
    timing_steps.record_mode(off, measure.Measurement())
    assert off.result.timing_mode == "eager" and off.result.flags == []
    assert "replays" in host_share.host_bound_flag({"reference": 2.0}, ["reference"], "cuda_graph")


# ------------------------------------------------------------------------------ graphs (worker side)
def test_a_replayer_replays_its_graph_and_returns_the_captured_outputs(monkeypatch) -> None:
    replays: list[object] = []
    monkeypatch.setattr(graphs, "_replay", replays.append)
    call = graphs.replayer("graph", "static output")
    assert call() == "static output" and replays == ["graph"]


def test_a_failed_capture_says_why_in_one_line() -> None:
    note = graphs.failure_note(RuntimeError("first line\nCUDA error: operation not permitted when stream is capturing"))
    assert note == "RuntimeError: first line\nCUDA error: operation not permitted when stream is capturing".splitlines()[-1]


# ------------------------------------------------------------------------------ feedback and report
def _timed_result(**kw) -> EvalResult:
    t = Timing(median_ms=1.0, iqr_ms=0.1, n=20, rel_stderr=0.01, min_ms=0.9)
    return EvalResult(status=Status.CORRECT, reason="correct", candidate_timing=t, reference_timing=t, speedup=1.0,
                      timing_meaningful=True, **kw)


def test_feedback_shows_busy_shares_and_graph_mode() -> None:
    r = _timed_result(gpu_busy={"reference": 0.31, "candidate": 0.97}, host_share={"reference": 1.5, "candidate": 0.02},
                      host_bound=["reference"],
                      flags=[host_share.host_bound_flag({"reference": 1.5, "candidate": 0.02}, ["reference"], "eager")])
    text = render_feedback(r)
    assert ("GPU busy during an eager call: reference 31%, candidate 97%; host time over GPU time per call: "
            "reference 1.50, candidate 0.02 (host-bound: reference)") in text
    assert "Note: host-bound:" in text
    graphed = render_feedback(_timed_result(timing_mode="cuda_graph"))
    assert "Timing (CUDA-graph replays of both forwards)" in graphed and "GPU busy" not in graphed


def test_report_lists_host_bound_best_results(tmp_path: Path, monkeypatch) -> None:
    from harness.report.compare import compare
    from harness.report.load import load_run
    from harness.report.metrics import compute_metrics
    from harness.report.tables import notes
    from tests import report_fixtures as rf

    plain = rf.result

    def result(status, speedup=None, **kw):
        r = plain(status, speedup, **kw)
        if r.problem_id == rf.SMOKE[0] and r.is_correct:
            r.gpu_busy, r.host_bound = {"reference": 0.3, "candidate": 0.95}, ["reference"]
        return r

    monkeypatch.setattr(rf, "result", result)
    run = rf.write_run(tmp_path / "hb", rf.config("hb"), [(rf.SMOKE[0], 1, 1, "correct", 1.2, 0.3),
                                                           (rf.SMOKE[1], 1, 1, "correct", 2.0, 0.5)])
    data = load_run(run)
    m = compute_metrics(data, n_boot=50)
    assert m.host_bound_problems == {rf.SMOKE[0]: ["reference"]}
    assert m.per_problem[rf.SMOKE[0]].host_bound == ["reference"] and m.per_problem[rf.SMOKE[1]].host_bound == []
    assert m.to_dict()["host_bound_problems"] == {rf.SMOKE[0]: ["reference"]}
    text = "\n".join(notes([m], compare([data], [m])))
    assert f"hb: host-bound timings (the host's time to make a call at least 50% of its GPU time) in 1 best result(s): {rf.SMOKE[0]} (reference)" \
        in text


# ------------------------------------------------------------------------------ the bench part
def test_bench_cli_takes_the_part_and_a_selection() -> None:
    from harness.commands import bench_cmd

    parser = argparse.ArgumentParser()
    bench_cmd.add_arguments(parser)
    args = parser.parse_args(["eval", "--part", "launch-bound", "--problems", "L3/06_lstm", "--sessions", "2"])
    assert (args.part, args.problems, args.sessions) == ("launch-bound", "L3/06_lstm", 2)


def test_bench_table_from_rows() -> None:
    from harness.bench.launch_bound import table

    report = {"sessions": 3, "timed": True, "rows": [
        {"problem": "L3/06_lstm", "cuda_graphs": "off", "statuses": ["correct"] * 3, "timing_modes": ["eager"],
         "reference_ms": [41.0, 58.0, 45.0], "candidate_ms": [], "reference_max_over_min": 58 / 41,
         "reference_busy": [0.3, 0.25, 0.28], "host_bound_sessions": 3, "notes": ["host-bound: ..."]},
        {"problem": "L3/06_lstm", "cuda_graphs": "auto", "statuses": ["correct"] * 3, "timing_modes": ["eager"],
         "reference_ms": [], "candidate_ms": [], "reference_max_over_min": None, "reference_busy": [],
         "host_bound_sessions": 0, "notes": []}]}
    text = table(report)
    assert "45.000 (41.000..58.000)" in text and "1.415" in text and "28%" in text and "3/3" in text
    assert "L3/06_lstm cuda_graphs=off: host-bound: ..." in text and "n/t" in text


@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
@pytest.mark.timeout(300)
def test_bench_part_runs_on_a_cpu(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the CPU path of the bench part")
    from harness.bench import eval_bench

    assert eval_bench.main("launch-bound", sessions=3, problems="L1/01_square_matmul") == 0
    out = capsys.readouterr().out
    assert "CPU: nothing timed (n/t)" in out and "L1/01_square_matmul" in out
    assert out.count("session 1/1") == 2  # one session per mode on a CPU


@pytest.mark.timeout(300)
def test_bench_part_takes_one_graph_mode_and_lists_flagged_problems(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the CPU path of the bench part")
    from harness.bench import eval_bench, launch_bound

    assert eval_bench.main("launch-bound", sessions=1, problems="L1/01_square_matmul", graph_modes=("off",)) == 0
    out = capsys.readouterr().out
    assert out.count("session 1/1") == 1 and "cuda_graphs=off" in out and "cuda_graphs=auto" not in out
    assert "flagged host-bound in any session: 0 of 1 problems []" in out  # nothing is timed on a CPU
    with pytest.raises(ValueError, match="choose from off, auto"):
        launch_bound.measure("L1/01_square_matmul", 1, ("eager",))


def test_bench_cli_refuses_an_unknown_graph_mode(capsys) -> None:
    from harness.commands import bench_cmd

    parser = argparse.ArgumentParser()
    bench_cmd.add_arguments(parser)
    args = parser.parse_args(["eval", "--part", "launch-bound", "--graph-modes", "off,sometimes"])
    assert bench_cmd.run(args) == 2
    assert "--graph-modes: choose from off, auto (got 'off,sometimes')" in capsys.readouterr().out


def test_reference_as_candidate_defines_model_new() -> None:
    from eval.static_checks import analyze
    from harness.bench.launch_bound import reference_as_candidate
    from problems.select import select_problems

    (lstm,) = select_problems("L3/06_lstm")
    report = analyze(reference_as_candidate(lstm))
    assert report.status is None, report.reason


def test_no_compile_speedup_against_graph_replays() -> None:
    from eval.evaluator import Evaluator

    r = _timed_result(timing_mode="cuda_graph")
    Evaluator.compile_speedup(None, None, r)  # returns before it needs the evaluator or the problem
    assert r.speedup_compile is None and r.flags[0].startswith("no speedup over torch.compile")


def test_a_failed_capture_ends_both_processes_and_asks_for_an_eager_retry() -> None:
    """A process's CUDA state after a failed capture is suspect (on the H100 the next random draw raised)."""
    from types import SimpleNamespace

    from eval.steps import context
    from eval.steps import timing_steps
    from eval.process.pool import GpuGate

    killed, sent = [], []

    class Process:
        def __init__(self, fails: bool):
            self.fails = fails

        def timed_request(self, message, timeout=None, device=None):
            sent.append(message)
            if self.fails:
                return p.TimeBlockReply(timing_mode="capture_failed", graph_note="RuntimeError: capturing"), [], 1.0
            return p.TimeBlockReply(times_ms=[0.1] * message.reps, timing_mode="cuda_graph"), [], 1.0

    for failing in ("candidate", "reference"):
        killed.clear()
        sides = (measure.Side("reference", Process(failing == "reference"), "ref0", key=3),
                 measure.Side("candidate", Process(failing == "candidate"), "candidate"))
        ctx = SimpleNamespace(config=EvalConfig(cuda_graphs="auto"), graphs=True, result=EvalResult(), worker_draws=True,
                              on_gpu=False, sides=lambda sides=sides: sides, seat=None,
                              session=SimpleNamespace(generation=1),
                              lease=SimpleNamespace(device=torch.device("cpu"), gate=GpuGate(),
                                                    worker=SimpleNamespace(kill=lambda: killed.append("worker")),
                                                    reference=SimpleNamespace(
                                                        restart=lambda generation: killed.append(("reference",
                                                                                                  generation)))))
        with pytest.raises(context.RetryEager) as caught:
            timing_steps.time_candidate(ctx)
        assert sent[-1].graphs is True
        assert killed == (["worker"] if failing == "candidate" else ["worker", ("reference", 1)])
        assert caught.value.note == (f"the {failing}'s forward could not be captured in a CUDA graph "
                                     "(RuntimeError: capturing)")
