"""`load_inline` calls a candidate makes only later (in `forward` or a helper), built ahead by the build worker.

Published kernels often build on their first call: `if self.ext is None: self.ext = load_inline(...)` in
`forward`. Importing the candidate never makes that call, so the evaluating worker built it inside its first
correctness trial, under `eval.call_timeout_s` (60 s), and a build that took longer (nvcc often takes 60-90 s)
ended an honest candidate as a timeout (CUDA-L1's KernelBench L1/10 kernel on the H100).

So after the import, the build worker finds every `load_inline(...)` call inside a function of the candidate's
source and, where every argument is an expression of the module's own globals and literals (no call, no name the
function binds itself), evaluates the arguments in the module's namespace and makes the call through the same
recording, light-first `load_inline` as the import's calls (`eval.worker.prebuilt`). The evaluating worker's later
call has the same arguments, so the same fingerprint, and imports the library built ahead. A call whose arguments
cannot be told ahead is left to the evaluating worker, as before. A lazy build that fails is recorded as failed and
fails the later call at once, as it would; it never fails the import. Lazy builds start only until a deadline that
keeps the build request well inside its time limit, so a candidate with slow lazy builds it never makes is not
failed by them.
"""

from __future__ import annotations

import ast
import threading
import time
from typing import Any, Callable


def lazy_calls(source: str) -> list[ast.Call]:
    """The `load_inline(...)` calls inside functions of `source` whose arguments depend only on module globals."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    verdicts: dict[str, tuple[ast.Call, bool]] = {}  # a call inside nested functions must be knowable in each
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        local = _bound_names(function)
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and _is_load_inline(node.func):
                key = ast.dump(node, include_attributes=True)
                known = verdicts.get(key, (node, True))[1]
                verdicts[key] = (node, known and _knowable(node, local))
    return [call for call, known in verdicts.values() if known]


def build_lazy(source: str, namespace: dict[str, Any], load_inline: Callable[..., Any], until: float) -> int:
    """Make each knowable lazy call of `source` with its arguments evaluated in `namespace`; none starts after the
    monotonic time `until`, and none is waited for past it (its record is then simply not used). Returns how many
    were made. Failures are ignored here: the record already says them."""
    calls = lazy_calls(source)
    made = [0]

    def make_all() -> None:
        seen: set[str] = set()
        for call in calls:
            if time.monotonic() >= until:
                return
            try:
                args = [_value(a, namespace) for a in call.args]
                kwargs = {k.arg: _value(k.value, namespace) for k in call.keywords if k.arg is not None}
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


def _bound_names(function: ast.AST) -> set[str]:
    """Names the function binds itself (parameters, assignments, loop targets, imports, nested definitions)."""
    bound: set[str] = set()
    args = function.args  # type: ignore[attr-defined]
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None:
            bound.add(a.arg)
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not function:
            bound.add(node.name)
    return bound


def _knowable(call: ast.Call, local: set[str]) -> bool:
    """Every argument is literals, module globals and their attributes: no call, no starred or `**` argument, no
    name the enclosing function binds (its value is known only when the function runs)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return False
    for argument in [*call.args, *(k.value for k in call.keywords)]:
        for node in ast.walk(argument):
            if isinstance(node, (ast.Call, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom,
                                 ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                return False
            if isinstance(node, ast.Name) and node.id in local:
                return False
    return True


def _value(node: ast.expr, namespace: dict[str, Any]) -> Any:
    return eval(compile(ast.Expression(node), "<lazy load_inline argument>", "eval"), namespace)  # noqa: S307
