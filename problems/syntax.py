"""The one way the project turns Python source into an `ast` tree (and a tree back into code), safe from threads.

CPython 3.11 counts the depth of its AST conversion in state shared by the whole interpreter, so two threads
converting at once can fail with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905; rare,
and only in threaded programs). The trusted parent parses candidates' sources from many threads at once (one per
evaluation, one per agent's reply), and CI saw an honest evaluation raise it. Every conversion goes through one lock.
"""

from __future__ import annotations

import ast
import threading
from types import CodeType
from typing import Any

_converting = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, one thread at a time; raises what it raises (SyntaxError, ValueError)."""
    with _converting:
        return ast.parse(source, filename)


def literal_value(node: ast.expr) -> Any:
    """`ast.literal_eval(node)`, one thread at a time."""
    with _converting:
        return ast.literal_eval(node)


def compile_expression(node: ast.expr, filename: str) -> CodeType:
    """The code of one expression node (for `eval`), one thread at a time."""
    with _converting:
        return compile(ast.Expression(node), filename, "eval")
