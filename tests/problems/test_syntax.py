"""Python source becomes an `ast` tree one thread at a time (CPython gh-106905: two threads converting at once can
raise "SystemError: AST constructor recursion depth mismatch", which CI saw in an honest evaluation), and every such
conversion in the project goes through `problems.syntax`."""

from __future__ import annotations

import ast
import threading
import time

from problems import syntax
from tests.paths import REPO as ROOT

CONVERSIONS = {"parse", "literal_eval"}  # ast's functions that build a tree from source


def test_conversions_from_many_threads_never_overlap(monkeypatch):
    inside, most = 0, 0
    count = threading.Lock()
    real_parse = ast.parse

    def watched_parse(*args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.002)  # wide enough for the other threads to arrive while this one converts
        try:
            return real_parse(*args, **kwargs)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(ast, "parse", watched_parse)
    trees = []
    threads = [threading.Thread(target=lambda: trees.append(syntax.parse_python("x = [1, (2, {3: 4})]")))
               for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trees) == 16 and all(isinstance(t, ast.Module) for t in trees)
    assert most == 1


def test_each_helper_gives_what_ast_gives():
    tree = syntax.parse_python("META = {'small': [1, 2]}\ny = 2 * 3\n", "<meta>")
    assert syntax.literal_value(tree.body[0].value) == {"small": [1, 2]}
    assert eval(syntax.compile_expression(tree.body[1].value, "<expr>")) == 6  # noqa: S307


def test_no_other_module_converts_source_itself():
    """Outside problems/syntax.py (tests aside), no code calls ast.parse or ast.literal_eval, or compiles a tree."""
    wrong = []
    for package in ("eval", "agents", "problems", "harness"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "problems" / "syntax.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                called = ast.unparse(node.func)
                if called in {f"ast.{name}" for name in CONVERSIONS} or (
                        called == "compile" and node.args and "ast." in ast.unparse(node.args[0])):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {called}")
    assert not wrong, "\n".join(wrong)
