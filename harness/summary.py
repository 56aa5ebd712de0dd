"""The end-of-run summary: what happened, the first error of each kind, and fast_p by turn (best so far
over samples). The live display leaves the tokens/cost line to this summary, so it is printed once."""

from __future__ import annotations

from typing import Sequence

from rich.console import Console
from rich.table import Table

from eval import DEFAULT_PS, EvalResult, Status, fast_p
from harness.loop import LoopOutcome, best_key
from harness.progress import NOT_TIMED
from harness.report.metrics import timing_available
from harness.store import Outline, RunStore

_MAX_PROBLEM_ROWS = 40
_MAX_ERROR_CHARS = 300
UNAVAILABLE_KIND = "agent unavailable"  # attempts not recorded: the agent could not be reached


def first_errors(store: RunStore, outline: Sequence[Outline], unreachable: Sequence[str] = ()) -> dict[str, tuple[int, str]]:
    """Each kind of failure (attempt status, or `agent unavailable`) -> (how many, the earliest one's message); only
    the earliest attempt of each kind is read with its texts."""
    counts: dict[str, int] = {}
    earliest: dict[str, Outline] = {}
    for o in outline:
        if o.status is Status.CORRECT:
            continue
        counts[o.status] = counts.get(o.status, 0) + 1
        if o.status not in earliest or o.finished_at < earliest[o.status].finished_at:
            earliest[o.status] = o
    texts = store.attempts_by_id(o.id for o in earliest.values())
    out: dict[str, tuple[int, str]] = {}
    for status, o in sorted(earliest.items(), key=lambda kv: kv[1].finished_at):
        a = texts[o.id]
        out[status] = (counts[status], a.error if a.status is Status.AGENT_ERROR or a.result is None else a.result.reason)
    if unreachable:
        out[UNAVAILABLE_KIND] = (len(unreachable), unreachable[0])
    return out


def _one_line(text: str) -> str:
    flat = " ".join(text.split()) or "(no message)"
    return flat if len(flat) <= _MAX_ERROR_CHARS else flat[: _MAX_ERROR_CHARS - 3] + "..."


def best_by_turn(outline: Sequence[Outline], problem_ids: Sequence[str], turns: int) -> dict[int, dict[str, Outline | None]]:
    """For each turn t, each problem's best attempt over all samples and turns <= t (None: no result yet)."""
    by_problem: dict[str, list[Outline]] = {pid: [] for pid in problem_ids}
    for o in outline:
        if o.problem_id in by_problem and o.status is not Status.AGENT_ERROR:  # an agent error has no result
            by_problem[o.problem_id].append(o)
    out: dict[int, dict[str, Outline | None]] = {}
    for t in range(1, turns + 1):
        row: dict[str, Outline | None] = {}
        for pid, items in by_problem.items():
            upto = [o for o in items if o.turn <= t]
            row[pid] = max(upto, key=lambda o: best_key(o.status, o.speedup)) if upto else None
        out[t] = row
    return out


def fast_p_table(by_turn: dict[int, dict[str, EvalResult | None]], ps: Sequence[float] = DEFAULT_PS) -> Table:
    """Rows: turns (best so far); columns: correct share and fast_p for each p."""
    table = Table(title="fast_p by turn (best so far over samples; share of all problems)")
    table.add_column("turn", justify="right")
    table.add_column("correct", justify="right")
    for p in ps:
        table.add_column(f"fast_{p:g}", justify="right")
    timed = _timed(by_turn)
    for t, results in by_turn.items():
        n = len(results) or 1
        passed = [r for r in results.values() if r is not None and r.is_correct]
        fast = [f"{fast_p(results, p):.2f}" if timed else NOT_TIMED for p in ps]
        table.add_row(str(t), f"{len(passed) / n:.2f}", *fast)
    return table


def _timed(by_turn: dict[int, dict[str, EvalResult | None]]) -> bool:
    """Whether the table's fast_p are figures, decided once for every turn as the report decides it."""
    return timing_available([r for row in by_turn.values() for r in row.values() if r is not None])


def print_summary(
    console: Console,
    *,
    run_dir: str,
    outcome: LoopOutcome,
    store: RunStore,
    problem_ids: Sequence[str],
    turns: int,
) -> None:
    """Print the run's outcome, per-problem bests (small runs) and the fast_p table (results read only for the
    best attempts shown)."""
    st = outcome.stats
    outline = store.outline()
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(st.statuses.items(), key=lambda kv: -kv[1])) or "none"
    console.print(f"[bold]run[/bold] {run_dir}")
    console.print(f"stopped: {outcome.stop_reason}", markup=False, soft_wrap=True)  # unwrapped: read and grepped whole
    console.print(
        f"attempts: {st.attempts_done} recorded ({st.attempts_this_session} this session) of {st.attempts_planned} "
        f"planned; problems finished {st.problems_done}/{st.problems}"
    )
    console.print(f"statuses: {statuses}")
    console.print(
        f"{st.info()}  wall {outcome.wall_s:.1f}s (summed over attempts in flight at once: agent "
        f"{outcome.agent_s:.1f}s, evaluator {outcome.eval_s:.1f}s)",
        markup=False,
        soft_wrap=True,
    )
    errors = first_errors(store, outline, outcome.unreachable)
    if errors:
        console.print("first error of each kind:")
        for kind, (n, message) in errors.items():
            console.print(f"  {kind} ({n}): {_one_line(message)}", markup=False, highlight=False, soft_wrap=True)
    best = best_by_turn(outline, problem_ids, turns)
    texts = store.attempts_by_id(o.id for row in best.values() for o in row.values() if o is not None)
    by_turn = {t: {pid: None if o is None else texts[o.id].result for pid, o in row.items()} for t, row in best.items()}
    if len(problem_ids) <= _MAX_PROBLEM_ROWS:
        table = Table(title="best attempt per problem")
        for col in ("problem", "status", "speedup", "turn"):
            table.add_column(col)
        for pid in problem_ids:
            top = max((o for o in outline if o.problem_id == pid), key=lambda o: best_key(o.status, o.speedup),
                      default=None)  # fmt: skip
            if top is None:
                table.add_row(pid, "-", "-", "-")
                continue
            speed = "-" if top.speedup is None else f"{top.speedup:.2f}x"
            table.add_row(pid, top.status, speed, f"{top.turn} (sample {top.sample})")
        console.print(table)
    console.print(fast_p_table(by_turn))
    if not _timed(by_turn):
        console.print(
            "note: no timing was measured on this device (CPU: the Triton interpreter checks correctness only), "
            "so fast_p counts no problem; `correct` is the share that passed.", soft_wrap=True,
        )
