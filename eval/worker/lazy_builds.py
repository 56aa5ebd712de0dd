"""`load_inline` calls a candidate makes only later (in `forward` or a helper), built ahead by the build worker.

Published kernels often build on their first call: `if self.ext is None: self.ext = load_inline(...)` in
`forward`. Importing the candidate never makes that call, so the evaluating worker built it inside its first
correctness trial, under `eval.call_timeout_s` (60 s), and a build that took longer (nvcc often takes 60-90 s)
ended an honest candidate as a timeout (CUDA-L1's KernelBench L1/10 kernel on the H100).

So after the import, the build worker finds every `load_inline(...)` call inside a function of the candidate's
source and, where every argument is an expression of literals, the module's globals and the function's own
constants (a local assigned once, by `name = <such an expression>`, never a parameter), with no call anywhere,
evaluates the arguments in the module's namespace and makes the call through the same recording, light-first
`load_inline` as the import's calls (`eval.worker.prebuilt`). The evaluating worker's later
call has the same arguments, so the same fingerprint, and imports the library built ahead. A call whose arguments
cannot be told ahead is left to the evaluating worker, as before. A lazy build that fails is recorded as failed and
fails the later call at once, as it would; it never fails the import. Lazy builds start only until a deadline a
margin before the build's time limit, so a candidate with slow lazy builds it never makes is not failed by them; one
still building at the deadline stays recorded as building, and the later call fails at once, naming the limit,
rather than beginning the build again inside a trial's much shorter call limit.
"""

from __future__ import annotations

import ast
import collections
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from problems import compile_expression, parse_python

_UNKNOWABLE = (ast.Call, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.ListComp, ast.SetComp,
               ast.DictComp, ast.GeneratorExp, ast.Starred)


@dataclass(frozen=True)
class LazyCall:
    """A `load_inline` call made ahead: the call, and the function's constants its arguments read, in order."""

    call: ast.Call
    constants: tuple[tuple[str, ast.expr], ...]


def lazy_calls(source: str) -> list[LazyCall]:
    """The `load_inline(...)` calls inside functions of `source` whose arguments can be told before they run."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return []
    found: dict[str, list[LazyCall | None]] = {}  # call -> as seen from each function that holds it
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        constants, bound = _constants(function)
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and _is_load_inline(node.func):
                found.setdefault(ast.dump(node, include_attributes=True), []).append(_knowable(node, constants, bound))
    # a call in a nested function may read the enclosing function's locals (a closure): left to the worker
    return [seen[0] for seen in found.values() if len(seen) == 1 and seen[0] is not None]


def build_lazy(source: str, namespace: dict[str, Any], load_inline: Callable[..., Any], until: float) -> int:
    """Make each knowable lazy call of `source` with its arguments evaluated in `namespace` (the module's, never
    changed); none starts after the monotonic time `until`, and none is waited for past it (its record is then
    simply not used). Returns how many were made. Failures are ignored here: the record already says them."""
    calls = lazy_calls(source)
    made = [0]

    def make_all() -> None:
        seen: set[str] = set()
        for lazy in calls:
            if time.monotonic() >= until:
                return
            try:
                scope = dict(namespace)
                for name, value in lazy.constants:
                    scope[name] = _value(value, scope)
                args = [_value(a, scope) for a in lazy.call.args]
                kwargs = {k.arg: _value(k.value, scope) for k in lazy.call.keywords if k.arg is not None}
            except Exception:  # noqa: BLE001  a global the import never set: left to the evaluating worker
                continue
            key = repr((args, sorted(kwargs.items(), key=lambda kv: kv[0])))
            if key in seen:
                continue
            seen.add(key)
            try:
                load_inline(*args, **kwargs)
            except BaseException:  # noqa: BLE001  recorded as failed; the later call fails as it would have
                pass
            made[0] += 1

    thread = threading.Thread(target=make_all, name="kh-lazy-builds", daemon=True)
    thread.start()
    thread.join(max(0.0, until - time.monotonic()))
    return made[0]


def _is_load_inline(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "load_inline") or (
        isinstance(func, ast.Attribute) and func.attr == "load_inline")


def _constants(function: ast.AST) -> tuple[dict[str, ast.Assign | ast.AnnAssign], set[str]]:
    """The function's locals bound exactly once, by a plain `name = value` (never a parameter, an import or a nested
    definition), and every name it binds at all (those, loop targets and other assignments)."""
    args = function.args  # type: ignore[attr-defined]
    others = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    stores: collections.Counter[str] = collections.Counter()
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] += 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            others.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not function:
            others.add(node.name)
    constants: dict[str, ast.Assign | ast.AnnAssign] = {}
    for node in ast.walk(function):
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None)
        if isinstance(target, ast.Name) and stores[target.id] == 1 and target.id not in others:
            constants[target.id] = node  # type: ignore[assignment]
    return constants, others | set(stores)


def _knowable(call: ast.Call, constants: dict[str, ast.Assign | ast.AnnAssign], bound: set[str]) -> LazyCall | None:
    """The call with the constants its arguments read (in the order they are assigned), or None when an argument
    is starred or `**`, holds a call, or reads a name the function binds otherwise (known only when it runs)."""
    if any(k.arg is None for k in call.keywords):
        return None
    needed: dict[str, ast.Assign | ast.AnnAssign] = {}
    pending: list[ast.expr] = [*call.args, *(k.value for k in call.keywords)]
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, _UNKNOWABLE):
                return None
            if isinstance(node, ast.Name) and node.id in bound and node.id not in needed:
                assignment = constants.get(node.id)
                if assignment is None or assignment.lineno >= call.lineno:
                    return None
                needed[node.id] = assignment
                pending.append(assignment.value)  # type: ignore[arg-type]
    ordered = sorted(needed.items(), key=lambda item: (item[1].lineno, item[1].col_offset))
    return LazyCall(call, tuple((name, node.value) for name, node in ordered))  # type: ignore[misc]


def _value(node: ast.expr, namespace: dict[str, Any]) -> Any:
    return eval(compile_expression(node, "<lazy load_inline argument>"), namespace)  # noqa: S307
