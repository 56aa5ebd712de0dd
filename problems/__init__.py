"""Reference problems: our suite, KernelBench (checkout or dataset), single files, and lint.

Configs and other packages select problems with `select_problems("level1,LLM/*")` (see
`problems.select` for the spec grammar); `solution_path(problem)` finds a hand-written Triton
solution of a suite problem.
"""

from problems.problem import Problem, ProblemError, load_problem_file, problem_from_source
from problems.select import select_entries, select_problems
from problems.suite import solution_path

__all__ = [
    "Problem",
    "ProblemError",
    "load_problem_file",
    "problem_from_source",
    "select_entries",
    "select_problems",
    "solution_path",
]
