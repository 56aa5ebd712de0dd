"""What can be learned from a candidate's source without running it.

The parent reads the candidate as text only: it checks that it parses, defines `ModelNew`,
defines at least one kernel of its own, and does not reach for harness internals (frames,
the garbage collector, Triton's launch hooks, patching of comparison or timing functions).
Those patterns are refused outright; disguised versions are caught at run time by
`eval.integrity` and by the parent's own checks.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from eval.result import Status

_CUDA_KERNEL = re.compile(r"__global__\s+(?:[\w:<>,\s\*&]+?\s+)?\**\s*(\w+)\s*\(")
_FORBIDDEN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bgc\s*\.\s*get_(objects|referrers|referents)\b"), "scans the garbage collector's objects"),
    (re.compile(r"\bsys\s*\.\s*_getframe\b|\binspect\s*\.\s*(stack|currentframe|getouterframes)\b|\bf_back\b|\bf_locals\b|\bf_globals\b"),
     "inspects the caller's stack frames"),
    (re.compile(r"\btriton\s*\.\s*knobs\b"), "touches Triton's runtime hooks"),
    (re.compile(r"(torch\s*\.\s*(allclose|equal|isclose|testing\s*\.\s*assert_close|cuda\s*\.\s*(Event|synchronize))"
                r"|time\s*\.\s*(perf_counter|time|monotonic)(_ns)?|elapsed_time)\s*=(?!=)"),
     "replaces a comparison or timing function"),
    (re.compile(r"setattr\s*\(\s*(torch|time|triton)\b"), "patches torch, time or triton with setattr"),
    (re.compile(r"/proc/\w+/(mem|environ)|\bptrace\b"), "reads another process's memory or environment"),
)


@dataclass
class SourceReport:
    """Facts about a candidate source; `status`/`reason` are set when it cannot proceed."""

    status: Status | None = None
    reason: str = ""
    triton_kernels: list[str] = field(default_factory=list)
    cuda_kernels: list[str] = field(default_factory=list)
    uses_load_inline: bool = False

    @property
    def kernels(self) -> list[str]:
        return self.triton_kernels + self.cuda_kernels


def _is_jit_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    text = ast.unparse(target)
    return text.endswith(("jit", "autotune", "heuristics")) and ("triton" in text or text in ("jit", "autotune", "heuristics"))


def _defines_model_new(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
            return True
    return False


def analyze(source: str) -> SourceReport:
    """Parse the candidate and classify it; never imports or executes it."""
    report = SourceReport()
    if not source.strip():
        report.status, report.reason = Status.FORMAT_ERROR, "the candidate is empty"
        return report
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        report.status = Status.COMPILE_ERROR
        report.reason = f"syntax error at line {exc.lineno}: {exc.msg}"
        return report
    if not _defines_model_new(tree):
        report.status, report.reason = Status.FORMAT_ERROR, "the candidate defines no ModelNew class"
        return report
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_jit_decorator(d) for d in node.decorator_list):
            report.triton_kernels.append(node.name)
    report.cuda_kernels = sorted(set(_CUDA_KERNEL.findall(source)))
    report.uses_load_inline = "load_inline" in source or "cpp_extension" in source
    for pattern, why in _FORBIDDEN:
        match = pattern.search(source)
        if match:
            line = source.count("\n", 0, match.start()) + 1
            report.status = Status.REJECTED
            report.reason = f"integrity: the candidate {why} (line {line}: '{match.group(0).strip()}')"
            return report
    return report
