"""The project's import structure, read from its sources with `ast`: benchmarks depend on the product and never
the reverse, no modules import each other in a loop, and the sandboxed worker's code reaches only the packages its
sandbox shows it.

Every import counts, at module level or inside a function: a function-local import is still a dependency (it runs
whenever its function does), and deferring an import is how a loop hides (`harness bench eval`'s parts and its
`parents` and `steps` modules were one). Imports under `if TYPE_CHECKING:` never run and are left out.
`importlib.import_module` with a literal name counts, and so do the names a package exports lazily through an
`_EXPORTS` table (`from eval import Evaluator` depends on `eval.evaluator`). Names computed at run time (the CLI's
command table) cannot be read from the source and are not seen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
PACKAGES = ("harness", "eval", "agents", "problems", "tests")
BENCH = "harness.bench"
BENCH_DOOR = "harness.commands.bench_cmd"  # the bench command: the one module of the product that runs benchmarks
# Tests of a benchmark's own code (its tables, its CPU path), by module, and the benchmark modules each of them
# tests. Every other test takes its candidates from `harness.corpus`.
BENCH_TESTS: dict[str, set[str]] = {
    "tests.harness.test_bench_suite": {"harness.bench.suite_bench"},
    "tests.harness.test_bench_serve": {"harness.bench.serve_bench"},
    "tests.harness.test_bench_store": {"harness.bench.store_bench"},
    "tests.eval.test_launch_units": {"harness.bench.eval_bench", "harness.bench.launch_bound"},
    "tests.eval.test_pool": {"harness.bench.parents", "harness.bench.pools"},
    "tests.harness.test_run_loop": {"harness.bench.loop_bench"},
    "tests.harness.test_bench_confinement": {"harness.bench.confinement"},
    "tests.harness.test_bench_requests": {"harness.bench.requests"},
    "tests.harness.test_bench_stopwatch": {"harness.bench.stopwatch"},
    "tests.harness.test_bench_bound_survey": {"harness.bench.bound_survey"},
    "tests.harness.test_bench_kernelbench": {"harness.bench.kernelbench_side_by_side"},
    "tests.harness.test_bench_corpus": {"harness.bench.corpus_audit"},
    "tests.harness.test_bench_loop_overhead": {"harness.bench.loop_overhead"},
    "tests.harness.test_bench_pools": {"harness.bench.pools"},
    "tests.harness.test_bench_draws": {"harness.bench.draws"},
    "tests.harness.test_bench_ref_share": {"harness.bench.ref_share"},
    "tests.harness.test_bench_bytecode": {"harness.bench.bytecode"},
    "tests.harness.test_bench_steps": {"harness.bench.steps"},
    "tests.harness.test_bench_observed_blocks": {"harness.bench.observed_blocks"},
    "tests.harness.test_bench_mutants": {f"harness.bench.mutants.{m}" for m in ("bench", "oracle", "probe", "rules")},
}


@cache
def modules() -> dict[str, ast.Module]:
    """Every module of the project's packages, by dotted name (a package by its own name), parsed."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


@cache
def _lazy_exports(package: str) -> dict[str, str]:
    """A package's `_EXPORTS = {"Name": "package.module"}` table: what `from package import Name` loads."""
    tree = modules().get(package)
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            return dict(ast.literal_eval(node.value))
    return {}


def _project_module(name: str) -> str | None:
    """The project module `import name` runs last: `name` itself, or the nearest package above it."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under `node`, but not the body of an `if TYPE_CHECKING:` (it never runs)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for other in child.orelse:
                yield other
                yield from _nodes(other)
        else:
            yield from _nodes(child)


def _imported_names(module: str, tree: ast.Module) -> Iterator[str]:
    """The dotted names `module` imports anywhere in its code."""
    is_package = (ROOT / module.replace(".", "/") / "__init__.py").exists()
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            yield from (_lazy_exports(base).get(alias.name, f"{base}.{alias.name}") for alias in node.names)
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value


@cache
def imports() -> dict[str, set[str]]:
    """module -> the project modules it imports (module-level and function-local alike)."""
    graph: dict[str, set[str]] = {}
    for module, tree in modules().items():
        targets = {_project_module(name) for name in _imported_names(module, tree)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_only_the_bench_command_and_the_benchmarks_own_tests_import_the_benchmarks() -> None:
    """Benchmarks depend on the product, never the reverse: outside `harness.bench`, only the bench command imports
    it, and the tests of a benchmark only the benchmark they test."""
    wrong = []
    for module, targets in imports().items():
        if _in(module, BENCH) or module == BENCH_DOOR:
            continue
        allowed = BENCH_TESTS.get(module, set()) if _in(module, "tests") else set()
        wrong += [f"{module} imports {t}" for t in sorted(targets) if _in(t, BENCH) and t not in allowed]
    assert not wrong, "\n".join(wrong)


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_loop_finder_finds_a_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _loops(graph) == [["a", "b", "c"]]
    assert _loops({"a": {"b"}, "b": set()}) == []


def test_no_modules_import_each_other_in_a_loop() -> None:
    loops = _loops(imports())
    assert not loops, "import loops:\n" + "\n".join(" <-> ".join(loop) for loop in loops)


def test_the_worker_reaches_only_the_packages_its_sandbox_shows_it() -> None:
    """The trust model: the sandboxed worker sees the project's `eval` and `problems` only (`eval.process.confine`),
    never the harness or the agents. Everything the worker's code imports, and every package above what it imports
    (whose `__init__` runs first), must lie there."""
    from eval.process.confine import _PROJECT_PACKAGES

    reached = {m for m in modules() if _in(m, "eval.worker")}
    todo = list(reached)
    while todo:
        for target in imports()[todo.pop()]:
            parts = target.split(".")
            for above in (".".join(parts[:k]) for k in range(1, len(parts) + 1)):
                if above not in reached:
                    reached.add(above)
                    todo.append(above)
    packages = {m.split(".")[0] for m in reached}
    assert not packages & {"harness", "agents", "tests"}, sorted(m for m in reached if not _in(m, "eval"))
    assert packages <= set(_PROJECT_PACKAGES), (packages, _PROJECT_PACKAGES)


# The crossing (`eval.crossing`): the one room of the parent's code the sandboxed worker's code may import (what both
# sides speak: the requests and replies, their framing, the outputs' captures, the build record, the builder of the
# native code the parent builds and the worker loads), besides the `eval` door itself and `problems`.
CROSSING = "eval.crossing"
# Imports of the worker's code from outside it, and why; the list may only shrink (but for a benchmark of a worker's
# own piece): the benchmarks time the worker's own pieces.
KNOWN_INTO_THE_WORKER = {
    ("harness.bench.builds", "eval.worker.light_build"),
    ("harness.bench.observed_contexts", "eval.worker.cuda_ipc"),  # measures observed timing's own flags
    ("harness.bench.imported_memory", "eval.worker.cuda_ipc"),  # measures kernels on observed timing's memory
    ("harness.bench.imported_memory", "eval.worker.observed"),  # with observed timing's lead clock
    ("harness.bench.loop_overhead", "eval.worker.native_loop"),
}


def _out_of_the_crossing(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(worker module, parent module) for each import of the worker's code that reaches `eval` outside the worker,
    the crossing and the door."""
    return sorted((m, t) for m, targets in graph.items() if _in(m, "eval.worker") for t in targets
                  if _in(t, "eval") and not _in(t, "eval.worker") and not _in(t, CROSSING) and t != "eval")


def _into_the_worker(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, worker module) for each import of the worker's code from outside it, tests aside."""
    return {(m, t) for m, targets in graph.items() if not _in(m, "eval.worker") and not _in(m, "tests")
            for t in targets if _in(t, "eval.worker")}


def test_the_worker_imports_only_the_crossing_of_the_parents_modules() -> None:
    """Module by module: the worker's code imports, of `eval` outside `eval.worker`, only the crossing; a parent
    module it reached would run inside the sandbox, where the candidate can patch it."""
    wrong = _out_of_the_crossing(imports())
    assert not wrong, wrong


def test_code_outside_the_worker_imports_it_only_where_known() -> None:
    """The other direction: the parent and the benchmarks import the worker's modules only where listed (tests
    aside, which test the worker's code directly)."""
    found = _into_the_worker(imports())
    assert found <= KNOWN_INTO_THE_WORKER, sorted(found - KNOWN_INTO_THE_WORKER)


def test_both_crossing_rules_fail_on_a_deliberate_crossing_import() -> None:
    """The real graph with one import added each way: the worker's serve loop importing the parent's timing, and
    the parent's front importing the worker's serve loop. Each rule names exactly the import added."""
    graph = {m: set(t) for m, t in imports().items()}
    graph["eval.worker.serve"].add("eval.timing.measure")
    graph["eval.evaluator"].add("eval.worker.serve")
    assert _out_of_the_crossing(graph) == [("eval.worker.serve", "eval.timing.measure")]
    assert _into_the_worker(graph) - KNOWN_INTO_THE_WORKER == {("eval.evaluator", "eval.worker.serve")}


DOORS = ("eval", "agents", "problems")


def _statements(module: str, tree: ast.Module) -> Iterator[tuple[str, str | None]]:
    """Every import of `module` as written: (`from` part or imported module, imported name or None)."""
    is_package = (ROOT / module.replace(".", "/") / "__init__.py").exists()
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            yield from ((base, alias.name) for alias in node.names)
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value, None


def _module_named(base: str, name: str | None) -> str:
    """The module an import statement names: `from eval.process import _pids` names `eval.process._pids`,
    `from eval.process.pool import Lease` names `eval.process.pool`."""
    return f"{base}.{name}" if name and f"{base}.{name}" in modules() else base


def _is_private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split(".")[1:])


def _home(module: str) -> str:
    """The package whose private modules `module` may import: its own, or for a test the package it tests."""
    parts = module.split(".")
    return parts[1] if parts[0] == "tests" and len(parts) > 2 and parts[1] in DOORS else parts[0]


def test_no_module_imports_another_packages_private_modules() -> None:
    """A module whose name starts with `_` is used only inside its package (and by that package's own tests)."""
    wrong = []
    for module, tree in modules().items():
        for base, name in _statements(module, tree):
            target = _module_named(base, name)
            if target.split(".")[0] in DOORS and _is_private(target) and _home(module) != target.split(".")[0]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_other_packages_import_eval_agents_and_problems_only_through_their_doors() -> None:
    """Outside a package (tests aside), code imports it only as `from package import Name`, where Name is in the
    package's `__all__`: the door is its one public interface."""
    wrong = []
    for module, tree in modules().items():
        if _in(module, "tests"):
            continue
        for base, name in _statements(module, tree):
            package = base.split(".")[0]
            if package not in DOORS or _in(module, package):
                continue
            if base != package or name is None or name not in _lazy_exports(package):
                wrong.append(f"{module}: {'from ' + base + ' import ' + name if name else 'import ' + base}")
    assert not wrong, "\n".join(wrong)


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def test_each_door_exports_what_its_modules_define_and_loads_nothing_by_itself() -> None:
    """Each name of a door's `_EXPORTS` is defined at the top of its module, and is not the name of one of the
    package's modules (importing a module `compare` of `problems` sets the package's attribute `compare` to that
    module, so a function `compare` could never be exported). The door imports no project module itself: importing
    `eval.worker.serve` runs `eval/__init__.py` first, and the sandboxed worker must not load the parent with it."""
    for package in DOORS:
        exports = _lazy_exports(package)
        assert exports, f"{package}/__init__.py has no _EXPORTS table"
        assert imports()[package] == set(), (package, imports()[package])
        for name, home in exports.items():
            assert home in modules() and _in(home, package), (package, name, home)
            assert _defines(modules()[home], name), f"{home} does not define {name}"
            assert f"{package}.{name}" not in modules(), f"{package} exports {name}, the name of a module"


def _harness_package(module: str) -> str:
    """`harness` for a module directly in it, else the subpackage of `harness` it lies in."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (ROOT / "harness" / parts[-1] / "__init__.py").exists() \
        else "harness"


# Package pairs of the harness that still import each other both ways, and why: `harness.app` reads `harness.conf`,
# whose schema takes its defaults from the loop and the executors; `harness.sweep` prints a report table.
KNOWN_BOTH_WAYS = {("harness", "harness.conf"), ("harness", "harness.report")}


def test_the_harness_and_its_subpackages_import_each_other_both_ways_only_where_known() -> None:
    """Package by package (the harness's own modules as one), arrows point one way: `harness.serve` builds on the
    harness (`harness.env` keeps its own returns), never the reverse; the known exceptions may only shrink."""
    graph: dict[str, set[str]] = {}
    for module, targets in imports().items():
        if _in(module, "harness"):
            graph.setdefault(_harness_package(module), set()).update(
                _harness_package(t) for t in targets if _in(t, "harness") and _harness_package(t) != _harness_package(module))
    both = {(a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, set())}
    assert both <= KNOWN_BOTH_WAYS, sorted(both - KNOWN_BOTH_WAYS)
