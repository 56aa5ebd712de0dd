"""The `Problem` record and loading of KernelBench-format problem sources.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`.
It may also define a literal `META = {...}` dict (tolerances, FLOPs, tags, ...) and a
`get_extra_inputs()` function returning a list of extra input lists that the evaluator
checks for correctness but never shows to the agent.

META keys: level, dtype, tags, atol/rtol (or tolerance), flops, bytes (minimum bytes moved),
flops_method ("hand" where FLOPs were counted by hand, see `problems.cost`), small
(shape-constant overrides for reduced-size runs, see `problems.runtime`), and unread_inputs
(indices into get_inputs() of inputs a correct kernel need not read whole: the byte floor leaves them
out, and `harness problems lint` checks the declaration).

Loading only parses the source (no import): the trusted evaluator parent must be able to
describe a problem without running it, and a broken file must fail with a clear message.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from problems.syntax import literal_value, parse_python

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


class ProblemError(ValueError):
    """A problem source that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Problem:
    """One reference problem. `source` is the full Python source of the reference module."""

    id: str
    name: str
    source: str
    level: str = "custom"
    path: str | None = None
    dtype: str = "float32"
    atol: float | None = None
    rtol: float | None = None
    flops: float | None = None
    bytes_moved: float | None = None
    unread_inputs: tuple[int, ...] = ()  # inputs a correct kernel need not read whole (META["unread_inputs"])
    tags: tuple[str, ...] = ()
    has_extra_inputs: bool = False
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def source_hash(self) -> str:
        """Content hash of the reference source, used in cache keys."""
        return hashlib.sha256(self.source.encode()).hexdigest()


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _literal_meta(tree: ast.Module, origin: str) -> dict[str, Any]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "META" for t in node.targets):
            try:
                meta = literal_value(node.value)
            except ValueError as exc:
                raise ProblemError(f"{origin}: META must be a literal dict ({exc})") from None
            if not isinstance(meta, dict):
                raise ProblemError(f"{origin}: META must be a dict, got {type(meta).__name__}")
            return meta
    return {}


def problem_from_source(
    source: str,
    *,
    name: str = "problem",
    problem_id: str | None = None,
    level: str = "custom",
    path: str | None = None,
) -> Problem:
    """Parse and validate a KernelBench-format source; raise `ProblemError` naming what is missing."""
    origin = path or f"<problem {name}>"
    try:
        tree = parse_python(source, origin)
    except SyntaxError as exc:
        where = f"syntax error at line {exc.lineno}" if exc.lineno else "not Python source"  # no line: NUL bytes
        raise ProblemError(f"{origin}: {where}: {exc.msg}") from None
    except ValueError as exc:  # some Python versions refuse NUL bytes with a ValueError
        raise ProblemError(f"{origin}: not Python source: {exc}") from None
    names = _top_level_names(tree)
    missing = [n for n in REQUIRED_NAMES if n not in names]
    if missing:
        raise ProblemError(f"{origin}: missing {', '.join(missing)} (a problem defines {', '.join(REQUIRED_NAMES)})")
    meta = _literal_meta(tree, origin)
    unread = meta.get("unread_inputs", [])
    if not isinstance(unread, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in unread):
        raise ProblemError(f"{origin}: META['unread_inputs'] must be a list of input indices, got {unread!r}")
    tol = meta.get("tolerance")
    atol = meta.get("atol", tol)
    rtol = meta.get("rtol", tol)
    return Problem(
        id=str(meta.get("id", problem_id or name)),
        name=str(meta.get("name", name)),
        source=source,
        level=str(meta.get("level", level)),
        path=path,
        dtype=str(meta.get("dtype", "float32")),
        atol=None if atol is None else float(atol),
        rtol=None if rtol is None else float(rtol),
        flops=None if meta.get("flops") is None else float(meta["flops"]),
        bytes_moved=None if meta.get("bytes") is None else float(meta["bytes"]),
        tags=tuple(meta.get("tags", ())),
        unread_inputs=tuple(unread),
        has_extra_inputs="get_extra_inputs" in names,
        meta=meta,
    )


def load_problem_file(path: str | Path, *, problem_id: str | None = None, level: str = "custom") -> Problem:
    """Load one problem file by path (KernelBench `N_Name.py` files keep their stem as name)."""
    p = Path(path)
    try:
        source = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ProblemError(f"{p}: cannot read problem file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise ProblemError(f"{p}: not a text file (not UTF-8: byte {byte:#04x} at offset {exc.start})") from None
    return problem_from_source(source, name=p.stem, problem_id=problem_id or p.stem, level=level, path=str(p))


_HIDDEN_NAMES = ("META", "get_extra_inputs")  # harness metadata and hidden shapes: checked, never shown


def public_source(source: str) -> str:
    """The problem source as those judged on it see it: without `META` and `get_extra_inputs` (and the comment lines
    right above them). Agents are shown this, and a candidate's worker is sent it (`eval.pipeline.checks.load`): hidden
    shapes are checked but never revealed, not even to code that reads its own process."""
    try:
        tree = parse_python(source)
    except SyntaxError as exc:
        raise ProblemError(f"problem source does not parse (line {exc.lineno}: {exc.msg})") from None
    lines = source.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        if not any(n in _HIDDEN_NAMES for n in names):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        drop.update(range(first, node.end_lineno or node.lineno))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    return re.sub(r"\n{3,}", "\n\n\n", "\n".join(kept)).strip() + "\n"
