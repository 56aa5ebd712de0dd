"""`harness bench eval --part PART`: the evaluator's own figures, one part per question, in a table.

throughput, latency, scaling, ray-scaling, repeatability: how fast and how repeatably the warm
pool judges (`harness/bench/rates.py`); own-share: the own-kernel share of every reference
solution, the honest hybrids and the decoy (`own_share.py`); flips: whether verdicts of honest
microsecond-scale candidates flip between runs (`flips.py`); launch-bound: whether launch-bound
references time the same across processes, also on a CPU (`launch_bound.py`); parents: whether
the parent process is what two GPUs lose throughput to (`parents.py`); channel: a 256 MB output
across the trust boundary, pageable against pinned regions (`channel.py`); build: one
`load_inline` candidate's build time, as written and against the light `.cu` (`builds.py`);
steps: the scaling batch with exclusive steps left out, a diagnostic of what bounds the rate
(`steps.py`); ref-share: 6 x copies honest Triton candidates of one 67M-element problem, with one reference
timing shared per window, then with one per candidate (`ref_share.py`; 4 copies make the 24-candidate batch);
observed-cost: the same batch with observed timing off, then on (`ref_share.py`);
confinement: a worker's start, confined against plain (`confinement.py`); bytecode: a worker's start with the
bytecode the evaluator primes for its workers and as installed, and on throughput (`bytecode.py`); requests: one request to a candidate's
worker, empty against one that reads the tamper snapshot (`requests.py`); stopwatch: a timed block's wall time
with the parent quiet and beside busy threads (`stopwatch.py`); bound-survey: 16 x copies honest candidates, 8 at
once, and how often the wall bound doubted them (`bound_survey.py`); draws: the host time of the harness's
seeding against `torch.manual_seed`'s, from two stack depths, and of one repetition's input draw (`draws.py`).
`all` runs throughput, latency, scaling and repeatability; on a CPU, throughput alone.

Each part imports its module when it runs, so `harness bench` parses its arguments without
loading torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Options:
    """The command's options; each part reads the ones it takes."""

    part: str = "all"
    sessions: int = 5
    copies: int = 4
    problems: str | None = None
    evaluators: tuple[str, ...] | None = None  # None: every evaluator of the throughput part
    graph_modes: tuple[str, ...] | None = None  # None: every mode of the launch-bound part
    rounds: int = 20
    workers: tuple[int, ...] = (0,)  # ref-share: workers per GPU, each count both ways (0: the default)


@dataclass(frozen=True)
class Part:
    """One part: its section of the JSON report, what measures it (and prints its table), and whether it needs a
    CUDA GPU (why, or None where it runs on a CPU too) and is part of `all`."""

    key: str
    run: Callable[[Options], dict[str, Any]]
    needs_gpu: str | None
    in_all: bool = False


def _throughput(o: Options) -> dict[str, Any]:
    from harness.bench import rates

    # alone, the pool takes `copies` distinct copies of the batch; under `all`, one
    report = rates.throughput(o.copies if o.part == "throughput" else 1, o.evaluators or rates.EVALUATORS)
    rates.print_throughput(report)
    return report


def _latency(o: Options) -> dict[str, Any]:
    from harness.bench import rates

    report = rates.latency()
    rates.print_latency(report)
    return report


def _scaling(o: Options) -> dict[str, Any]:
    from harness.bench import rates

    report = rates.scaling(o.copies)
    rates.print_scaling(report)
    return report


def _ray_scaling(o: Options) -> dict[str, Any]:
    from harness.bench import rates

    report = rates.ray_scaling(o.copies)
    rates.print_ray_scaling(report)
    return report


def _repeatability(o: Options) -> dict[str, Any]:
    from harness.bench import rates

    report = rates.repeatability(o.sessions)
    rates.print_repeatability(report)
    return report


def _own_share(o: Options) -> dict[str, Any]:
    from harness.bench import own_share

    report = own_share.run()
    own_share.print_table(report)
    return report


def _flips(o: Options) -> dict[str, Any]:
    from harness.bench import flips

    report = flips.run(o.rounds)
    flips.print_table(report)
    return report


def _launch_bound(o: Options) -> dict[str, Any]:
    from harness.bench import launch_bound

    return launch_bound.main(o.sessions, o.problems or launch_bound.DEFAULT_SELECTION,
                             o.graph_modes or launch_bound.MODES)


def _parents(o: Options) -> dict[str, Any]:
    from harness.bench import parents

    return parents.main(o.copies)


def _channel(o: Options) -> dict[str, Any]:
    from harness.bench import channel

    report = channel.run()
    channel.print_table(report)
    return report


def _build(o: Options) -> dict[str, Any]:
    from harness.bench import builds

    report = builds.run(repeats=o.sessions)
    builds.print_table(report)
    return report


def _confinement(o: Options) -> dict[str, Any]:
    from harness.bench import confinement

    report = confinement.run(starts=o.sessions)
    report["throughput"] = confinement.throughput(o.copies)
    confinement.print_table(report)
    return report


def _bytecode(o: Options) -> dict[str, Any]:
    from harness.bench import bytecode

    report = bytecode.run(starts=o.sessions, copies=o.copies)
    bytecode.print_table(report)
    return report


def _requests(o: Options) -> dict[str, Any]:
    from harness.bench import requests

    report = requests.run(rounds=o.rounds)
    requests.print_table(report)
    return report


def _stopwatch(o: Options) -> dict[str, Any]:
    from harness.bench import stopwatch

    report = stopwatch.run(rounds=o.rounds)
    stopwatch.print_table(report)
    return report


def _steps(o: Options) -> dict[str, Any]:
    from harness.bench import steps

    return steps.run(o.copies)


def _ref_share(o: Options) -> dict[str, Any]:
    from harness.bench import ref_share

    return ref_share.run(6 * o.copies, o.workers)


def _observed_cost(o: Options) -> dict[str, Any]:
    from harness.bench import ref_share

    return ref_share.run_observed(6 * o.copies)


def _loop_overhead(o: Options) -> dict[str, Any]:
    from harness.bench import loop_overhead

    report = loop_overhead.run(rounds=o.rounds)
    loop_overhead.print_table(report)
    return report


def _draws(o: Options) -> dict[str, Any]:
    from harness.bench import draws

    report = draws.run(rounds=o.rounds)
    draws.print_table(report)
    return report


def _bound_survey(o: Options) -> dict[str, Any]:
    from harness.bench import bound_survey

    report = bound_survey.run(n=16 * o.copies, at_once=8)
    bound_survey.print_table(report)
    return report


_TIMED = "timings are the point of it"
PARTS: dict[str, Part] = {
    "throughput": Part("throughput", _throughput, None, in_all=True),
    "latency": Part("latency", _latency, _TIMED, in_all=True),
    "scaling": Part("scaling", _scaling, _TIMED, in_all=True),
    "ray-scaling": Part("ray_scaling", _ray_scaling, _TIMED),
    "repeatability": Part("repeatability", _repeatability, _TIMED, in_all=True),
    "own-share": Part("own_share", _own_share, None),
    "flips": Part("flips", _flips, "the hidden-work check runs only there"),
    "launch-bound": Part("launch_bound", _launch_bound, None),
    "parents": Part("parents", _parents, _TIMED),
    "channel": Part("channel", _channel, _TIMED),
    "build": Part("build", _build, _TIMED),
    "steps": Part("steps", _steps, _TIMED),
    "ref-share": Part("ref_share", _ref_share, _TIMED),
    "observed-cost": Part("observed_cost", _observed_cost, "observed timing runs only there"),
    "confinement": Part("confinement", _confinement, None),
    "bytecode": Part("bytecode", _bytecode, None),
    "requests": Part("requests", _requests, None),
    "stopwatch": Part("stopwatch", _stopwatch, None),
    "bound-survey": Part("bound_survey", _bound_survey, None),
    "draws": Part("draws", _draws, None),
    "loop-overhead": Part("loop_overhead", _loop_overhead, "the native timing loop runs only there"),
}


def main(which: str = "all", sessions: int = 5, out: str | None = None, problems: str | None = None,
         copies: int = 4, evaluators: tuple[str, ...] | None = None, graph_modes: tuple[str, ...] | None = None,
         rounds: int = 20, workers: tuple[int, ...] = (0,)) -> int:
    """Run the chosen part (or `all`: its parts this machine can run), print tables, optionally write the JSON to
    `out`. A part that needs a CUDA GPU, chosen alone where none is visible, is refused (exit code 2)."""
    import torch

    gpu = torch.cuda.is_available()
    if which == "all":
        chosen = [name for name, part in PARTS.items() if part.in_all and (gpu or part.needs_gpu is None)]
    else:
        chosen = [which]
        if PARTS[which].needs_gpu and not gpu:
            print(f"harness bench eval --part {which} needs a CUDA GPU ({PARTS[which].needs_gpu})")
            return 2
    from harness.bench.pools import environment

    report: dict[str, Any] = {"environment": environment()}
    print(json.dumps(report["environment"]), flush=True)
    options = Options(which, sessions, copies, problems, evaluators, graph_modes, rounds, workers)
    for name in chosen:
        report[PARTS[name].key] = PARTS[name].run(options)
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
    return 0
