"""What can be learned from a candidate's source without running it.

The parent reads the candidate as text only: it checks that it parses, defines `ModelNew`,
defines at least one kernel of its own, and does not reach for harness internals (frames,
the garbage collector, Triton's launch hooks, rebinding of comparison or timing functions).
Those patterns are refused outright; disguised versions are caught at run time by
`eval.worker.integrity` (an identity snapshot of every watched function) and by the
parent's own checks.

Rebinding is found on the syntax tree, never by matching text: only a write to an attribute
of a module or class imported from a watched package (`torch.allclose = f`,
`time.perf_counter = f`, `Event.elapsed_time = f` after `from torch.cuda import Event`,
`setattr(torch, "allclose", f)`, `vars(time)["perf_counter"] = f`,
`torch.__dict__["equal"] = f`, `del torch.isclose`) counts. A local or instance name that
merely shares a protected name (`elapsed_time = start.elapsed_time(end)`,
`t = time.perf_counter()`, `self.time = 0.0`) is never flagged. Writes whose attribute name
the source computes (`setattr(torch, "all" + "close", f)`) on a watched module are flagged too;
writes through an object the source obtains dynamically (`__import__`, `getattr`) are left to
the run-time snapshot.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from eval.backends import DEFAULT_BACKEND, TRITON_DIALECTS  # issue 56
from eval.result import Status
from problems import parse_python

_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")  # between __global__ and the name
_CUDA_KERNEL = re.compile(r"__global__\s+(?:[\w:<>,\s\*&]+?\s+)?\**\s*(\w+)\s*\(")
_FORBIDDEN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bgc\s*\.\s*get_(objects|referrers|referents)\b"), "scans the garbage collector's objects"),
    (re.compile(r"\bsys\s*\.\s*_getframe\b|\binspect\s*\.\s*(stack|currentframe|getouterframes)\b|\bf_back\b|\bf_locals\b|\bf_globals\b"
                r"|\b(tb|gi|cr|ag)_frame\b"),
     "inspects the caller's stack frames"),
    (re.compile(r"\b__closure__\b|\bcell_contents\b"), "reads the state inside another function's closure"),
    (re.compile(r"\btriton\s*\.\s*knobs\b"), "touches Triton's runtime hooks"),
    (re.compile(r"/proc/\w+/(mem|environ)|\bptrace\b"), "reads another process's memory or environment"),
)

# Packages whose modules and classes a candidate must not rebind, and the names that matter there.
_WATCHED_ROOTS = frozenset({"torch", "time", "triton", "gc", "threading", "eval", "problems"})
_PROTECTED = frozenset({
    "allclose", "isclose", "equal", "assert_close", "assert_allclose",  # comparisons
    "perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time",
    "process_time_ns", "Event", "elapsed_time", "record", "synchronize", "query", "wait", "Stream",
    "current_stream", "default_stream", "stream", "do_bench",  # timing and synchronisation
})
_REBIND = "replaces a comparison or timing function"


@dataclass
class SourceReport:
    """Facts about a candidate source; `status`/`reason` are set when it cannot proceed."""

    status: Status | None = None
    reason: str = ""
    triton_kernels: list[str] = field(default_factory=list)
    cuda_kernels: list[str] = field(default_factory=list)
    gluon_kernels: list[str] = field(default_factory=list)  # issue 56: @gluon.jit functions
    helion_kernels: list[str] = field(default_factory=list)  # issue 56: @helion.kernel functions
    uses_load_inline: bool = False
    uses_torch_compile: bool = False  # torch.compile / dynamo / inductor: generated kernels, not the candidate's

    @property
    def kernels(self) -> list[str]:
        return self.triton_kernels + self.cuda_kernels + self.gluon_kernels + self.helion_kernels  # issue 56


def _is_jit_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)
    return text.endswith(("jit", "autotune", "heuristics")) and ("triton" in text or text in ("jit", "autotune", "heuristics"))


# issue 56: the decorators of the Triton dialects, by where they come from (`from triton.experimental import gluon`,
# `import helion`; `helion.jit` is Helion's alias of `helion.kernel`)
_DIALECT_DECORATORS: dict[str, tuple[str, ...]] = {
    "gluon": ("triton.experimental.gluon.jit",),
    "helion": ("helion.kernel", "helion.jit", "helion.aot_kernel", "helion.runtime.kernel"),
}


def _dialect_of(node: ast.expr, names: dict[str, str]) -> str | None:  # issue 56
    """"gluon" or "helion" for a decorator of that language (called or bare), else None."""
    target = node.func if isinstance(node, ast.Call) else node
    origin = _origin(target, names) or ast.unparse(target)
    for dialect, decorators in _DIALECT_DECORATORS.items():
        if origin in decorators or origin.endswith(f"{dialect}.{decorators[0].rpartition('.')[2]}"):
            return dialect
    return None


def _uses_torch_compile(tree: ast.Module) -> bool:
    """Whether the source calls torch.compile or reaches dynamo or inductor (by attribute or import)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("compile", "_dynamo", "_inductor"):
            if ast.unparse(node.value) == "torch":
                return True
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module.startswith(("torch._dynamo", "torch._inductor"))
                or (node.module == "torch" and any(a.name in ("compile", "_dynamo", "_inductor") for a in node.names))):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith(("torch._dynamo", "torch._inductor"))
                                                for a in node.names):
            return True
    return False


def _defines_model_new(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
            return True
    return False


def _imported_names(tree: ast.Module, roots: frozenset[str] = _WATCHED_ROOTS) -> dict[str, str]:  # issue 56: roots
    """Local name -> dotted origin, for every import of a watched package (of `roots`) anywhere in the source."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in roots:  # issue 56
                    if alias.asname:
                        names[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] in roots:  # issue 56
                for alias in node.names:
                    if alias.name != "*":
                        names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    # plain aliases of those (`T = torch`, `Ev = torch.cuda.Event`), to a fixed point
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                origin = _origin(node.value, names)
                name = node.targets[0].id
                if origin is not None and names.get(name) != origin and name not in names:
                    names[name] = origin
                    changed = True
    return names


def _origin(node: ast.expr, names: dict[str, str]) -> str | None:
    """The dotted watched origin of a plain name or attribute chain (`torch.cuda.Event`), else None."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _origin(node.value, names)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def _namespace_of(node: ast.expr, names: dict[str, str]) -> str | None:
    """For `vars(X)` or `X.__dict__` with X a watched module or class: X's origin."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and len(node.args) == 1:
        return _origin(node.args[0], names)
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return _origin(node.value, names)
    return None


def _key(node: ast.expr) -> str | None:
    """A literal attribute name, or None when the source computes it."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _protected(name: str | None) -> bool:
    return name is None or name in _PROTECTED or (name.startswith("__") and name.endswith("__"))


def _rebinding(tree: ast.Module) -> tuple[int, str] | None:
    """(line, what) of the first rebinding of a protected function on a watched module or class."""
    names = _imported_names(tree)
    if not names:
        return None
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if len(node.args) >= 2 and (owner := _origin(node.args[0], names)) is not None:
                key = _key(node.args[1])
                if _protected(key):
                    return node.lineno, f"{node.func.id}({owner}, {key or '<computed name>'!s})"
            continue
        else:
            continue
        for target in [t for t in targets for t in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]:
            if isinstance(target, ast.Attribute) and (owner := _origin(target.value, names)) is not None:
                if _protected(target.attr):
                    return target.lineno, f"{owner}.{target.attr}"
            if isinstance(target, ast.Subscript) and (owner := _namespace_of(target.value, names)) is not None:
                key = _key(target.slice)
                if _protected(key):
                    return target.lineno, f"{owner}.{key or '<computed name>'} through its namespace dict"
    return None


# The most a candidate's source may take as sent to its worker (JSON-escaped, within the channel's 8 MiB header
# limit with the problem's source beside it). Published kernels take tens of kilobytes.
MAX_SOURCE_BYTES = 4 << 20


def analyze(source: str) -> SourceReport:
    """Parse the candidate and classify it; never imports or executes it."""
    report = SourceReport()
    if not source.strip():
        report.status, report.reason = Status.FORMAT_ERROR, "the candidate is empty"
        return report
    sent = len(json.dumps(source))
    if sent > MAX_SOURCE_BYTES:
        report.status = Status.FORMAT_ERROR
        report.reason = (f"the candidate's source takes {sent / (1 << 20):.1f} MiB as sent to its worker, over the "
                         f"limit of {MAX_SOURCE_BYTES >> 20} MiB (eval/static_checks.py: MAX_SOURCE_BYTES)")
        return report
    try:
        tree = parse_python(source)
    except SyntaxError as exc:
        report.status = Status.COMPILE_ERROR
        report.reason = f"syntax error at line {exc.lineno}: {exc.msg}"
        return report
    if not _defines_model_new(tree):
        report.status, report.reason = Status.FORMAT_ERROR, "the candidate defines no ModelNew class"
        return report
    languages = _imported_names(tree, _WATCHED_ROOTS | {"helion"})  # issue 56: Gluon and Helion kernels
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        dialects = {_dialect_of(d, languages) for d in node.decorator_list} - {None}  # issue 56
        if dialects:
            getattr(report, f"{dialects.pop()}_kernels").append(node.name)
        elif any(_is_jit_decorator(d) for d in node.decorator_list):
            report.triton_kernels.append(node.name)
    report.cuda_kernels = sorted(set(_CUDA_KERNEL.findall(_LAUNCH_BOUNDS.sub(" ", source))))
    report.uses_load_inline = "load_inline" in source or "cpp_extension" in source
    report.uses_torch_compile = _uses_torch_compile(tree)
    rebinding = _rebinding(tree)
    if rebinding is not None:
        line, what = rebinding
        report.status = Status.REJECTED
        report.reason = f"integrity: the candidate {_REBIND} (line {line}: rebinds {what})"
        return report
    for pattern, why in _FORBIDDEN:
        match = pattern.search(source)
        if match:
            line = source.count("\n", 0, match.start()) + 1
            report.status = Status.REJECTED
            report.reason = f"integrity: the candidate {why} (line {line}: '{match.group(0).strip()}')"
            return report
    return report


def refusal(report: SourceReport, own_kernel_policy: str,
            backend: str = DEFAULT_BACKEND) -> tuple[Status, str] | None:  # issue 56: backend
    """The verdict a candidate gets from its source alone (before any build or worker), or None."""
    if report.status is not None:
        return report.status, report.reason
    if backend in TRITON_DIALECTS and own_kernel_policy == "reject" and not getattr(report, f"{backend}_kernels"):
        decorator = {"gluon": "@gluon.jit", "helion": "@helion.kernel"}[backend]  # issue 56
        return Status.REJECTED, (f"backend={backend}: the candidate defines no {backend.capitalize()} kernel (no "
                                 f"{decorator} function); write the kernels in {backend.capitalize()}")
    if not report.kernels and own_kernel_policy == "reject" and report.uses_torch_compile:
        return Status.REJECTED, ("the candidate uses torch.compile, whose kernels PyTorch's compiler generates: they "
                                 "are not the candidate's own, and it defines none (no @triton.jit function and no "
                                 "CUDA __global__ function); write the kernel itself")
    if not report.kernels and own_kernel_policy == "reject":
        return Status.REJECTED, ("the candidate defines no kernel of its own (no @triton.jit function and no CUDA "
                                 "__global__ function): PyTorch-only solutions are not accepted")
    return None
