"""The terminal fast_p table says `n/t` where no correct result was timed (CPU), as the reports do, never 0.00."""

from __future__ import annotations

from rich.console import Console

from eval import DEFAULT_PS, EvalResult, Status
from harness.report.load import load_run
from harness.report.metrics import compute_metrics
from harness.report.tables import turn_table
from harness.summary import fast_p_table
from tests.report_fixtures import config, write_run


def _row(by_turn) -> list[str]:
    """The cells of turn 1's row."""
    console = Console(width=200, record=True)
    console.print(fast_p_table(by_turn))
    for line in console.export_text().splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0] == "1":
            return cells[1:]
    raise AssertionError("no row for turn 1")


def test_untimed_correct_results_show_not_timed_and_timed_ones_their_fast_p() -> None:
    cpu = EvalResult(status=Status.CORRECT, problem_id="a", timing_meaningful=False)
    gpu = EvalResult(status=Status.CORRECT, problem_id="a", timing_meaningful=True, speedup=2.0)
    wrong = EvalResult(status=Status.INCORRECT, problem_id="b")
    correct, *fast = _row({1: {"a": cpu, "b": wrong}})
    assert correct == "0.50" and set(fast) == {"n/t"}, fast
    correct, *fast = _row({1: {"a": gpu, "b": wrong}})
    assert correct == "0.50" and fast[-2:] == ["0.50", "0.00"], fast  # 2.0x: above 1.5, not strictly above 2
    correct, *fast = _row({1: {"a": wrong, "b": None}})
    assert correct == "0.00" and set(fast) == {"0.00"}, fast  # nothing passed: 0 is true


def _rows(by_turn) -> list[list[str]]:
    """Every turn's cells (turn, correct, fast_p...)."""
    console = Console(width=200, record=True)
    console.print(fast_p_table(by_turn))
    return [cells for line in console.export_text().splitlines()
            if (cells := [c.strip() for c in line.split("│")[1:-1]]) and cells[0].isdigit()]


def test_a_cpu_run_reads_not_timed_on_every_turn_as_its_report_does(tmp_path) -> None:
    """On a CPU, turn 1 (nothing passed yet) used to read 0.00 and turn 2 n/t, and the report said n/t on both: the
    console table and the report's turn table now give the same cells."""
    run = write_run(tmp_path / "cpu", config("cpu", turns=2), [("L1/13_softmax", 1, 1, "incorrect", None, None),
                                                               ("L1/13_softmax", 1, 2, "correct", None, None)],
                    device="cpu (Triton interpreter)", timed=False)
    data = load_run(run)
    results = {a.turn: a.result for a in data.attempts}  # turn 2's correct result is the best from turn 2 on
    rows = _rows({t: {p.id: results[t] if p.id == "L1/13_softmax" else None for p in data.problems} for t in (1, 2)})
    assert [r[2:] for r in rows] == [["n/t"] * len(DEFAULT_PS)] * 2, rows
    _, report_rows = turn_table([compute_metrics(data, n_boot=1)])
    assert [r[1:] for r in report_rows] == rows
