"""The terminal fast_p table says `n/t` where no correct result was timed (CPU), as the reports do, never 0.00."""

from __future__ import annotations

from rich.console import Console

from eval import EvalResult, Status
from harness.summary import fast_p_table


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
