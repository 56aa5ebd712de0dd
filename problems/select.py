"""Turning a selection string (from the CLI or a Hydra config) into problems.

Specs, combinable with commas (`level1,LLM/01_*`):
- `smoke`: a handful of fast problems across the levels of our suite
- `all`, `level1`, `level2`, `level3`, `llm` (or `L1`, `L2`, `L3`, `LLM`): our suite
- a glob over our suite's ids: `L1/*matmul*`, `*softmax*`, `LLM/04_causal_attention_gqa`
- `kernelbench:/path/to/KernelBench[:level]`: a local KernelBench checkout (level `1` or `level1`)
- `hf:ScalingIntelligence/KernelBench[:level_1]`: the KernelBench dataset (Hub name or local folder)
- `file:/path/to/problem.py`, or just a path ending in `.py`: one problem file
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from problems.kernelbench import (
    Entry,
    LoadFailure,
    load_kernelbench_dataset,
    load_kernelbench_dir,
    parse_level,
)
from problems.problem import Problem, ProblemError, load_problem_file
from problems.suite import LEVELS, SUITE_DIR, load_suite_file, suite_files, suite_problem_id

# fast problems across all levels of our suite, each with a reference solution
SMOKE: tuple[str, ...] = (
    "L1/13_softmax",
    "L1/16_rms_norm",
    "L2/16_add_rmsnorm",
    "L3/03_causal_self_attention",
    "LLM/01_rmsnorm",
    "LLM/03_silu_and_mul",
)


def _suite_entries(levels: list[str] | None = None) -> list[Entry]:
    entries: list[Entry] = []
    for level, path in suite_files(levels):
        try:
            entries.append(load_suite_file(level, path))
        except ProblemError as exc:
            entries.append(LoadFailure(suite_problem_id(level, path.stem), str(path), str(exc)))
    return entries


def _file_entry(path: Path) -> Problem:
    """A problem file by path; a file of our suite keeps its suite id."""
    resolved = path.expanduser().resolve()
    if resolved.parent.parent == SUITE_DIR and resolved.parent.name in LEVELS:
        return load_suite_file(resolved.parent.name, resolved)
    return load_problem_file(path.expanduser())


def _split_source_level(rest: str) -> tuple[str, list[int] | None]:
    """`/path[:level]` -> (path, [level]); a trailing part that is not a level stays in the path."""
    head, sep, tail = rest.rpartition(":")
    if sep and head:
        try:
            return head, [parse_level(tail)]
        except ProblemError:
            pass
    return rest, None


def _one_spec(spec: str) -> list[Entry]:
    prefix_to_level = {prefix.lower(): level for level, prefix in LEVELS.items()}
    lowered = spec.lower()
    if lowered == "smoke":
        return [e for pid in SMOKE for e in _one_spec(pid)]
    if lowered == "all":
        return _suite_entries()
    if lowered in LEVELS:
        return _suite_entries([lowered])
    if lowered in prefix_to_level:
        return _suite_entries([prefix_to_level[lowered]])
    if lowered.startswith("kernelbench:"):
        path, levels = _split_source_level(spec[len("kernelbench:") :])
        return load_kernelbench_dir(path, levels)
    if lowered.startswith("hf:"):
        source, levels = _split_source_level(spec[len("hf:") :])
        return load_kernelbench_dataset(source, levels)
    if lowered.startswith("file:") or spec.endswith(".py"):
        return [_file_entry(Path(spec[len("file:") :] if lowered.startswith("file:") else spec))]
    matches = [e for e in _suite_entries() if fnmatch.fnmatchcase(e.id, spec)]
    if not matches:
        raise ProblemError(
            f"no problem matches {spec!r}; a selection is smoke, all, level1, level2, level3, llm, a glob over ids "
            f"such as 'L1/*softmax*', kernelbench:DIR, hf:DATASET or file:PATH (see `harness problems list`)"
        )
    return matches


def select_entries(spec: str) -> list[Entry]:
    """Problems (or the reasons they failed to load) for a selection spec, without duplicates."""
    if not spec or not spec.strip():
        raise ProblemError("empty problem selection")
    seen: set[str] = set()
    out: list[Entry] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        for entry in _one_spec(part):
            if entry.id not in seen:
                seen.add(entry.id)
                out.append(entry)
    return out


def select_problems(spec: str) -> list[Problem]:
    """Problems for a selection spec; raises `ProblemError` listing every file that failed to load."""
    entries = select_entries(spec)
    failures = [e for e in entries if isinstance(e, LoadFailure)]
    if failures:
        lines = "\n".join(f"  {f.id}: {f.error}" for f in failures)
        raise ProblemError(f"{len(failures)} problem(s) in {spec!r} failed to load:\n{lines}")
    return [e for e in entries if isinstance(e, Problem)]
