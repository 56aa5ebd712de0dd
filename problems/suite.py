"""Our own problem suite (`problems/suite/<level>/NN_name.py`) and its reference solutions.

Ids are `<PREFIX>/<file stem>`, e.g. `L1/01_square_matmul`, `LLM/04_causal_attention_gqa`;
they depend only on the level folder and the file name, so they stay stable across machines.
"""

from __future__ import annotations

from pathlib import Path

from problems.problem import Problem, ProblemError, load_problem_file

SUITE_DIR = Path(__file__).resolve().parent / "suite"
SOLUTIONS_DIR = Path(__file__).resolve().parent / "solutions"

# level folder -> id prefix, in listing order
LEVELS: dict[str, str] = {"level1": "L1", "level2": "L2", "level3": "L3", "llm": "LLM"}
_PREFIX_TO_LEVEL = {prefix: level for level, prefix in LEVELS.items()}


def suite_problem_id(level: str, stem: str) -> str:
    """The stable id of suite file `<level>/<stem>.py`."""
    if level not in LEVELS:
        raise ProblemError(f"unknown suite level {level!r}; expected one of {', '.join(LEVELS)}")
    return f"{LEVELS[level]}/{stem}"


def suite_files(levels: list[str] | None = None) -> list[tuple[str, Path]]:
    """(level, path) of every suite problem file, in level then file order."""
    chosen = list(LEVELS) if levels is None else levels
    out: list[tuple[str, Path]] = []
    for level in chosen:
        if level not in LEVELS:
            raise ProblemError(f"unknown suite level {level!r}; expected one of {', '.join(LEVELS)}")
        out.extend((level, p) for p in sorted((SUITE_DIR / level).glob("[0-9]*.py")))
    return out


def load_suite_file(level: str, path: Path) -> Problem:
    """Load one suite file; its META level must agree with its folder."""
    problem = load_problem_file(path, problem_id=suite_problem_id(level, path.stem), level=level)
    if problem.level != level:
        raise ProblemError(f"{path}: META level {problem.level!r} does not match its folder {level!r}")
    return problem


def load_suite(levels: list[str] | None = None) -> list[Problem]:
    """All suite problems of the given levels (default: all levels)."""
    return [load_suite_file(level, path) for level, path in suite_files(levels)]


def suite_problem(problem_id: str) -> Problem:
    """One suite problem by id, e.g. `L2/16_add_rmsnorm`."""
    prefix, _, stem = problem_id.partition("/")
    level = _PREFIX_TO_LEVEL.get(prefix)
    path = SUITE_DIR / level / f"{stem}.py" if level else None
    if path is None or not stem or not path.is_file():
        raise ProblemError(f"no suite problem with id {problem_id!r} (ids look like L1/01_square_matmul)")
    return load_suite_file(level, path)


def solution_path(problem: Problem, backend: str = "triton") -> Path | None:  # issue 56: backend
    """The hand-written reference solution of a suite problem in `backend`'s language, if there is one.

    Solutions mirror the suite layout: `problems/solutions/level1/01_square_matmul.py` solves
    `problems/suite/level1/01_square_matmul.py` in Triton, `problems/solutions/helion/level1/...` in Helion (any
    backend but Triton has a folder of its name). Problems from other sources have none.
    """
    prefix, _, stem = problem.id.partition("/")
    level = _PREFIX_TO_LEVEL.get(prefix)
    if level is None or not stem:
        return None
    path = (SOLUTIONS_DIR if backend == "triton" else SOLUTIONS_DIR / backend) / level / f"{stem}.py"  # issue 56
    return path if path.is_file() else None
