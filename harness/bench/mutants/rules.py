"""Mutation rules: source-to-source edits that seed the bugs LLM-written kernels really have.

A rule finds its sites in a candidate's source and makes one mutant per site: the same file with one change (or
one coherent group of changes), written at the exact place in the text, so a mutant's diff is its bug. Triton rules
find their sites through Python's AST (inside `@triton.jit` functions, or in the host code around them); CUDA rules
are careful regular expressions over the CUDA text of a `load_inline` candidate. Rules belong to classes (boundary,
shapes, reduction, constants, precision, offsets, special values, numerics), and the benchmark reports its kill rate
by class.

`hardcoded-size` needs the values the published run sees at each shape read: `probe_source` wraps each read so one
run at the published sizes records them (`harness.bench.mutants.probe`), and `mutants(..., published=...)` writes
them in as literals.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from problems import parse_python

CLASSES = ("boundary", "shapes", "reduction", "constants", "precision", "offsets", "special values", "numerics")
Edit = tuple[int, int, str]  # (start, end, replacement) as offsets into the source text
PROBE = "_kh_probe"


@dataclass(frozen=True)
class Mutant:
    """One seeded bug: the whole mutated source and where and what it changed."""

    rule: str
    cls: str
    site: int  # the site's index among its rule's sites in this source
    line: int  # the first changed line (1-based)
    before: str
    after: str
    source: str

    @property
    def key(self) -> str:
        return f"{self.rule}#{self.site}"


@dataclass(frozen=True)
class Rule:
    name: str
    cls: str
    what: str
    backend: str  # "triton" or "cuda"
    sites: Callable[["Source"], list[list[Edit]]]


class Source:
    """A candidate's text with its AST and the offsets of its lines; the kernels and host code told apart."""

    def __init__(self, text: str, published: dict[str, object] | None = None):
        self.text = text
        self.tree = parse_python(text)
        self.published = published or {}
        self._starts = [0]
        for line in text.splitlines(keepends=True):
            self._starts.append(self._starts[-1] + len(line))
        self.jit = [f for f in ast.walk(self.tree) if isinstance(f, ast.FunctionDef) and _is_jit(f)]
        inside = {id(n) for f in self.jit for n in ast.walk(f)}
        self.host = [n for n in ast.walk(self.tree) if id(n) not in inside]

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self._starts[node.lineno - 1] + node.col_offset,  # type: ignore[attr-defined]
                self._starts[node.end_lineno - 1] + node.end_col_offset)  # type: ignore[attr-defined]

    def seg(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def replace(self, node: ast.AST, new: str) -> list[Edit]:
        start, end = self.span(node)
        return [(start, end, new)]

    def line_of(self, offset: int) -> int:
        return next(i for i, s in enumerate(self._starts) if s > offset)

    def kernel_nodes(self) -> Iterator[ast.AST]:
        for f in self.jit:
            for node in ast.walk(f):
                if node is not f:
                    yield node


def _is_jit(f: ast.FunctionDef) -> bool:
    for d in f.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "jit":
            return True
    return False


def _call_name(node: ast.AST) -> str:
    """`tl.load` for a call of tl.load, `x.contiguous` for x.contiguous(): the dotted name called, else ""."""
    if not isinstance(node, ast.Call):
        return ""
    parts, f = [], node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts)) if parts else ""


def _is_float(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, float)


# -- boundary ----------------------------------------------------------------------------------------------------

def _compares(src: Source, op: type) -> Iterator[ast.Compare]:
    for node in src.kernel_nodes():
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], op):
            yield node


def _mask_le(src: Source) -> list[list[Edit]]:
    return [src.replace(c, f"{src.seg(c.left)} <= {src.seg(c.comparators[0])}") for c in _compares(src, ast.Lt)]


def _mask_lt(src: Source) -> list[list[Edit]]:
    return [src.replace(c, f"{src.seg(c.left)} < {src.seg(c.comparators[0])}") for c in _compares(src, ast.LtE)]


def _mask_short(src: Source) -> list[list[Edit]]:
    return [src.replace(c, f"{src.seg(c.left)} < {src.seg(c.comparators[0])} - 1") for c in _compares(src, ast.Lt)]


def _memory_calls(src: Source) -> Iterator[ast.Call]:
    for node in src.kernel_nodes():
        if isinstance(node, ast.Call) and _call_name(node) in ("tl.load", "tl.store"):
            yield node


def _mask_dropped(src: Source) -> list[list[Edit]]:
    out = []
    for call in _memory_calls(src):
        if any(k.arg == "mask" for k in call.keywords):
            kept = [src.seg(a) for a in call.args]
            kept += [src.seg(k) for k in call.keywords if k.arg not in ("mask", "other")]
            out.append(src.replace(call, f"{_call_name(call)}({', '.join(kept)})"))
    return out


def _grid_floor(src: Source) -> list[list[Edit]]:
    return [src.replace(n, f"(({src.seg(n.args[0])}) // ({src.seg(n.args[1])}))") for n in src.host
            if _call_name(n) == "triton.cdiv" and len(n.args) == 2]


def _launch_grids(src: Source) -> Iterator[ast.expr]:
    """The grid of each `kernel[grid](...)` launch in host code, when it is written as a tuple."""
    for node in src.host:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            grid = node.func.slice
            if isinstance(grid, ast.Tuple) and grid.elts:
                yield grid.elts[0]


def _grid_short(src: Source) -> list[list[Edit]]:
    return [src.replace(first, f"({src.seg(first)}) - 1") for first in _launch_grids(src)]


# -- shapes ------------------------------------------------------------------------------------------------------

def shape_reads(src: Source) -> list[ast.expr]:
    """Host-code reads of a runtime size: `x.shape[k]`, `x.size(k)`, `x.shape` unpacked, `x.numel()`."""
    out: list[ast.expr] = []
    for node in src.host:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and isinstance(node.slice, (ast.Constant, ast.UnaryOp)):
            out.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("size", "numel") and not node.keywords \
                and len(node.args) == (1 if node.func.attr == "size" else 0):
            out.append(node)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) \
                and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            out.append(node.value)
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def site_id(node: ast.AST) -> str:
    return f"{node.lineno}:{node.col_offset}"  # type: ignore[attr-defined]


def probe_source(text: str) -> str:
    """`text` with every shape read wrapped in `_kh_probe("line:col", read)`, which the probe defines: one run at
    the published sizes then knows each read's value."""
    src = Source(text)
    edits = [e for n in shape_reads(src) for e in src.replace(n, f"{PROBE}({site_id(n)!r}, {src.seg(n)})")]
    return apply(text, edits)


def _hardcoded(src: Source) -> list[list[Edit]]:
    out = []
    for node in shape_reads(src):
        value = src.published.get(site_id(node))
        if isinstance(value, int) or (isinstance(value, list) and all(isinstance(v, int) for v in value)):
            literal = repr(value) if isinstance(value, int) else repr(tuple(value))
            out.append(src.replace(node, literal))
    return out


def _contiguity(src: Source) -> list[list[Edit]]:
    return [src.replace(n, src.seg(n.func.value)) for n in src.host  # type: ignore[attr-defined]
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "contiguous"
            and not n.args]


def _row_stride(src: Source) -> list[list[Edit]]:
    return [src.replace(n, f"{src.seg(n.func.value)}.shape[-1]") for n in src.host  # type: ignore[attr-defined]
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "stride"
            and len(n.args) == 1 and isinstance(n.args[0], ast.Constant) and n.args[0].value != -1]


# -- reduction ---------------------------------------------------------------------------------------------------

def _first_block(src: Source) -> list[list[Edit]]:
    """A loop over the row's blocks that stops after the first: the reduction covers one block, not the row."""
    out = []
    for node in src.kernel_nodes():
        if isinstance(node, ast.For) and _call_name(node.iter) == "range" and len(node.iter.args) == 3:  # type: ignore
            start, _, step = node.iter.args  # type: ignore[attr-defined]
            out.append(src.replace(node.iter, f"range({src.seg(start)}, {src.seg(start)} + {src.seg(step)}, "
                                              f"{src.seg(step)})"))
    return out


def _constexpr_params(f: ast.FunctionDef) -> tuple[list[str], list[str]]:
    const, plain = [], []
    for a in f.args.args:
        ann = ast.unparse(a.annotation) if a.annotation else ""
        (const if ann.endswith("constexpr") else plain).append(a.arg)
    return const, plain


def _mean_over_block(src: Source) -> list[list[Edit]]:
    """`... / n_cols` (a runtime length) divided by the block size instead."""
    out = []
    for f in src.jit:
        const, plain = _constexpr_params(f)
        block = next((c for c in const if "BLOCK" in c), None)
        if block is None:
            continue
        for node in ast.walk(f):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Name) \
                    and node.right.id in plain:
                out.append(src.replace(node.right, block))
    return out


# -- constants ---------------------------------------------------------------------------------------------------

def _eps_outside_sqrt(src: Source) -> list[list[Edit]]:
    out = []
    for node in src.kernel_nodes():
        if _call_name(node) in ("tl.sqrt", "tl.rsqrt", "tl.math.rsqrt") and len(node.args) == 1:  # type: ignore
            arg = node.args[0]  # type: ignore[attr-defined]
            if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
                out.append(src.replace(node, f"({_call_name(node)}({src.seg(arg.left)}) + {src.seg(arg.right)})"))
    return out


def _eps_like(v: float) -> bool:
    return 0 < abs(v) < 1e-3


def _tenfold(v: float) -> float:
    """1e-5 -> 1e-6, 1e-6 -> 1e-5 (written short: 1e-06, not 1.0000000000000002e-06)."""
    return float(f"{v / 10 if v >= 1e-5 else v * 10:.6g}")


def _eps_changed(src: Source) -> list[list[Edit]]:
    """An eps-sized literal (host or kernel, a default argument too) off by a factor of ten: 1e-5 for 1e-6."""
    out = []
    for node in ast.walk(src.tree):
        if _is_float(node) and _eps_like(node.value):  # type: ignore[attr-defined]
            v = node.value  # type: ignore[attr-defined]
            out.append(src.replace(node, repr(_tenfold(v))))
    return out


def _other_literals(src: Source) -> set[int]:
    """Literals that fill masked lanes (`other=`): changing them is `special values`' business."""
    return {id(k.value) for n in ast.walk(src.tree) if isinstance(n, ast.Call) for k in n.keywords
            if k.arg == "other"}


def _wrong_constant(src: Source) -> list[list[Edit]]:
    """A float literal 1 % off (a mistyped constant), where it is not 0, 1, eps-sized or a masked lanes' fill."""
    skip = _other_literals(src)
    out = []
    for node in ast.walk(src.tree):
        if _is_float(node) and id(node) not in skip:
            v = node.value  # type: ignore[attr-defined]
            if v not in (0.0, 1.0, -1.0) and not _eps_like(v) and abs(v) != float("inf"):
                out.append(src.replace(node, repr(v * 1.01)))
    return out


def _sqrt_dropped(src: Source) -> list[list[Edit]]:
    """`x ** 0.5` written as `x`: a softmax scale of 1/d instead of 1/sqrt(d)."""
    return [src.replace(n, src.seg(n.left)) for n in ast.walk(src.tree)
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and _is_float(n.right) and n.right.value == 0.5]


# -- precision ---------------------------------------------------------------------------------------------------

def _attr_sites(src: Source, nodes: Iterator[ast.AST], old: str, new: str) -> list[list[Edit]]:
    return [src.replace(n, new) for n in nodes if isinstance(n, ast.Attribute) and src.seg(n) == old]


def _accum_fp16(src: Source) -> list[list[Edit]]:
    """An fp32 accumulator (`tl.zeros(..., dtype=tl.float32)`, `tl.full`) made fp16."""
    out = []
    for node in src.kernel_nodes():
        if _call_name(node) in ("tl.zeros", "tl.full"):
            for k in node.keywords:  # type: ignore[attr-defined]
                if k.arg == "dtype" and src.seg(k.value) == "tl.float32":
                    out.append(src.replace(k.value, "tl.float16"))
    return out


def _downcast(src: Source) -> list[list[Edit]]:
    """A load's upcast to fp32 made a cast to fp16: the math runs in half precision."""
    return [src.replace(n.args[0], "tl.float16") for n in src.kernel_nodes()  # type: ignore[attr-defined]
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "to"
            and n.args and src.seg(n.args[0]) == "tl.float32"]


def _tf32(src: Source) -> list[list[Edit]]:
    """`tl.dot(..., input_precision="tf32x3")` as plain tf32: 10-bit mantissas in an fp32 problem."""
    return [src.replace(k.value, '"tf32"') for n in src.kernel_nodes() if _call_name(n) == "tl.dot"
            for k in n.keywords if k.arg == "input_precision"]  # type: ignore[attr-defined]


# -- offsets -----------------------------------------------------------------------------------------------------

def _offset_plus_one(src: Source) -> list[list[Edit]]:
    """A load's pointer one element on: an off-by-one offset."""
    return [src.replace(c.args[0], f"{src.seg(c.args[0])} + 1") for c in _memory_calls(src)
            if _call_name(c) == "tl.load" and c.args]


def _int32_offsets(src: Source) -> list[list[Edit]]:
    """`pid.to(tl.int64)` dropped: row offsets in int32, which overflow past 2**31 elements."""
    return [src.replace(n, src.seg(n.func.value)) for n in src.kernel_nodes()  # type: ignore[attr-defined]
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "to"
            and n.args and src.seg(n.args[0]) == "tl.int64"]


# -- special values ----------------------------------------------------------------------------------------------

def _guard_dropped(src: Source) -> list[list[Edit]]:
    """`tl.where(cond, a, b)` as `a`: a guard for zeros, a causal mask or padding lanes left out."""
    return [src.replace(n, f"({src.seg(n.args[1])})") for n in src.kernel_nodes()  # type: ignore[attr-defined]
            if _call_name(n) == "tl.where" and len(n.args) == 3]  # type: ignore[attr-defined]


def _literal(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) or (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))


def _clamp_dropped(src: Source) -> list[list[Edit]]:
    """`tl.maximum(x, 1e-4)` / `tl.minimum(x, 448.0)` against a literal, as `x`: a floor or saturation left out."""
    out = []
    for n in src.kernel_nodes():
        if _call_name(n) in ("tl.maximum", "tl.minimum") and len(n.args) == 2:  # type: ignore[attr-defined]
            a, b = n.args  # type: ignore[attr-defined]
            if _literal(b) or _literal(a):
                out.append(src.replace(n, f"({src.seg(a if _literal(b) else b)})"))
    return out


def _other_changed(src: Source) -> list[list[Edit]]:
    """Masked lanes filled with 0 where the kernel fills -inf (a max or a log-sum-exp then counts them)."""
    return [src.replace(k.value, "0.0") for c in _memory_calls(src) for k in c.keywords
            if k.arg == "other" and "inf" in src.seg(k.value)]


# -- numerics ----------------------------------------------------------------------------------------------------

def _max_not_subtracted(src: Source) -> list[list[Edit]]:
    """`tl.exp(x - m)` as `tl.exp(x)`: the running maximum never subtracted (overflow, or a rescale that no longer
    matches)."""
    return [src.replace(n, f"{_call_name(n)}({src.seg(n.args[0].left)})") for n in src.kernel_nodes()  # type: ignore
            if _call_name(n) in ("tl.exp", "tl.exp2") and len(n.args) == 1  # type: ignore[attr-defined]
            and isinstance(n.args[0], ast.BinOp) and isinstance(n.args[0].op, ast.Sub)]  # type: ignore[attr-defined]


_WELFORD_MEAN = re.compile(r"^(?P<i>[ \t]*)(?P<m>\w+) = (?P=m) \+ (?P<d>\w+) \* \((?P<n>\w+) / (?P<t>\w+)\)\n", re.M)
_WELFORD_M2 = re.compile(r"^(?P<i>[ \t]*)(?P<v>\w+) = (?P=v) \+ \w+ \+ \w+ \* \w+ \* \(\w+ \* \w+ / \w+\)\n", re.M)
_RSTD = re.compile(r"^(?P<i>[ \t]*)\w+ = 1\.0 / tl\.sqrt\((?P<v>\w+) / (?P<len>\w+) \+ \w+\)\n", re.M)


def _naive_variance(src: Source) -> list[list[Edit]]:
    """A Welford / chunk-merged variance rewritten as E[h^2] - E[h]^2 in fp32 (cancels on rows with a large mean).
    The kernel's loaded row must be named `h` (our LayerNorm solution's form); one site per kernel that has it."""
    mean, m2, rstd = _WELFORD_MEAN.search(src.text), _WELFORD_M2.search(src.text), _RSTD.search(src.text)
    if not (mean and m2 and rstd and mean.start() < m2.start() < rstd.start() and "h = (" in src.text):
        return []
    m, v, length, ind = mean["m"], m2["v"], rstd["len"], rstd["i"]
    return [[(mean.start(), mean.end(), f"{mean['i']}{m} = {m} + tl.sum(h, axis=0)\n"),
             (m2.start(), m2.end(), f"{m2['i']}{v} = {v} + tl.sum(h * h, axis=0)\n"),
             (rstd.start(), rstd.start(), f"{ind}{m} = {m} / {length}\n{ind}{v} = {v} - {length} * {m} * {m}\n")]]


# -- CUDA (a load_inline candidate's CUDA text) --------------------------------------------------------------------

def _cuda_spans(src: Source) -> list[tuple[int, int]]:
    """Offsets of the string literals that hold a `__global__` function."""
    return [src.span(n) for n in ast.walk(src.tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "__global__" in n.value]


def _regex_sites(src: Source, pattern: re.Pattern[str], new: Callable[[re.Match[str]], str | None]) -> list[list[Edit]]:
    out = []
    for start, end in _cuda_spans(src):
        for m in pattern.finditer(src.text, start, end):
            text = new(m)
            if text is not None and text != m.group(0):
                out.append([(m.start(), m.end(), text)])
    return out


_CUDA_LT = re.compile(r"(?<=[\w\)\]])(\s*)<(\s*)(?=[\w\(])(?![\w:]*\s*>)")
_CUDA_GUARD = re.compile(r"if\s*\(\s*[\w\.\[\]]+\s*<\s*[\w\.\[\]]+\s*\)")
_CUDA_CDIV = re.compile(r"\(\s*([\w\.]+)\s*\+\s*([\w\.]+)\s*-\s*1\s*\)\s*/\s*([\w\.]+)")
_CUDA_EPS = re.compile(r"\b(\d+(?:\.\d*)?[eE]-0?[4-9])(f?)\b")
_CUDA_SQRT_ADD = re.compile(r"\b(r?sqrtf?)\(\s*([^()]+?)\s*\+\s*([\w\.\-]+)\s*\)")
_CUDA_EXP_SUB = re.compile(r"\b(__expf|expf|exp)\(\s*([^()]+?)\s*-\s*([^()]+?)\s*\)")
_CUDA_FLOAT = re.compile(r"(?<![\w\.])(\d+\.\d+)(f?)(?![\w\.])")


def _cuda_lt(m: re.Match[str]) -> str | None:
    line_start = m.string.rfind("\n", 0, m.start()) + 1
    line = m.string[line_start:m.start()]
    if not re.search(r"\b(if|for|while)\s*\(|\?", line) or "<<" in m.string[m.start() - 1:m.end() + 1]:
        return None
    return f"{m.group(1)}<={m.group(2)}"


def _cuda_cdiv(m: re.Match[str]) -> str | None:
    return f"({m.group(1)}) / {m.group(3)}" if m.group(2) == m.group(3) else None


def _cuda_eps(m: re.Match[str]) -> str:
    return f"{_tenfold(float(m.group(1)))!r}{m.group(2)}"


def _cuda_float(m: re.Match[str]) -> str | None:
    v = float(m.group(1))
    return None if v in (0.0, 1.0) else f"{float(f'{v * 1.01:.12g}')!r}{m.group(2)}"


def _cuda(pattern: re.Pattern[str], new: Callable[[re.Match[str]], str | None]) -> Callable[[Source], list[list[Edit]]]:
    return lambda src: _regex_sites(src, pattern, new)


RULES: tuple[Rule, ...] = (
    Rule("mask-le", "boundary", "a `<` bound written `<=`: one element past the end is read or written", "triton",
         _mask_le),
    Rule("mask-lt", "boundary", "a `<=` bound (a causal diagonal) written `<`", "triton", _mask_lt),
    Rule("mask-short", "boundary", "a bound one short: the last element is never read or written", "triton",
         _mask_short),
    Rule("mask-dropped", "boundary", "a load's or store's mask left out", "triton", _mask_dropped),
    Rule("grid-floor", "boundary", "the grid floor-divided (`//`) instead of triton.cdiv: the tail is never run",
         "triton", _grid_floor),
    Rule("grid-short", "boundary", "the launch grid one program short", "triton", _grid_short),
    Rule("hardcoded-size", "shapes", "a runtime size replaced by its value at the published sizes", "triton",
         _hardcoded),
    Rule("contiguity-assumed", "shapes", "`.contiguous()` left out: a strided input is read as if it were dense",
         "triton", _contiguity),
    Rule("row-stride-assumed", "shapes", "a stride read as the row's width", "triton", _row_stride),
    Rule("first-block-only", "reduction", "a loop over the row's blocks that stops after the first", "triton",
         _first_block),
    Rule("mean-over-block", "reduction", "a division by the row's length made a division by the block size",
         "triton", _mean_over_block),
    Rule("eps-outside-sqrt", "constants", "`sqrt(v + eps)` written `sqrt(v) + eps`", "triton", _eps_outside_sqrt),
    Rule("eps-changed", "constants", "an eps off by a factor of ten (1e-5 for 1e-6)", "triton", _eps_changed),
    Rule("wrong-constant", "constants", "a float constant 1 % off", "triton", _wrong_constant),
    Rule("sqrt-dropped", "constants", "`x ** 0.5` written `x` (a scale of 1/d for 1/sqrt(d))", "triton",
         _sqrt_dropped),
    Rule("accum-fp16", "precision", "an fp32 accumulator made fp16", "triton", _accum_fp16),
    Rule("downcast-fp16", "precision", "an upcast to fp32 made a cast to fp16", "triton", _downcast),
    Rule("tf32-dot", "precision", "tf32x3 products made plain tf32", "triton", _tf32),
    Rule("offset-plus-one", "offsets", "a load's pointer one element on", "triton", _offset_plus_one),
    Rule("int32-offsets", "offsets", "the int64 cast of an index dropped", "triton", _int32_offsets),
    Rule("guard-dropped", "special values", "`tl.where(c, a, b)` written `a`", "triton", _guard_dropped),
    Rule("clamp-dropped", "special values", "a clamp against a literal (a floor, a saturation) left out", "triton",
         _clamp_dropped),
    Rule("other-changed", "special values", "masked lanes filled with 0 instead of -inf", "triton", _other_changed),
    Rule("max-not-subtracted", "numerics", "`exp(x - max)` written `exp(x)`", "triton", _max_not_subtracted),
    Rule("naive-variance", "numerics", "a Welford variance as E[x^2] - E[x]^2", "triton", _naive_variance),
    Rule("cuda-mask-le", "boundary", "a `<` bound in an if or a for written `<=`", "cuda", _cuda(_CUDA_LT, _cuda_lt)),
    Rule("cuda-guard-dropped", "boundary", "an `if (i < n)` guard made `if (true)`", "cuda",
         _cuda(_CUDA_GUARD, lambda m: "if (true)")),
    Rule("cuda-grid-floor", "boundary", "`(n + b - 1) / b` written `n / b`", "cuda", _cuda(_CUDA_CDIV, _cuda_cdiv)),
    Rule("cuda-eps-changed", "constants", "an eps off by a factor of ten", "cuda", _cuda(_CUDA_EPS, _cuda_eps)),
    Rule("cuda-wrong-constant", "constants", "a float constant 1 % off", "cuda", _cuda(_CUDA_FLOAT, _cuda_float)),
    Rule("cuda-eps-outside-sqrt", "constants", "`sqrtf(v + eps)` written `sqrtf(v) + eps`", "cuda",
         _cuda(_CUDA_SQRT_ADD, lambda m: f"({m.group(1)}({m.group(2)}) + {m.group(3)})")),
    Rule("cuda-max-not-subtracted", "numerics", "`expf(x - m)` written `expf(x)`", "cuda",
         _cuda(_CUDA_EXP_SUB, lambda m: f"{m.group(1)}({m.group(2)})")),
)
BY_NAME = {r.name: r for r in RULES}


def apply(text: str, edits: list[Edit]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _changed_lines(old: str, new: str) -> tuple[str, str]:
    """The lines a mutant changed, before and after, each stripped and joined by " / "."""
    import difflib

    a, b = old.splitlines(), new.splitlines()
    gone, came = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            gone += [line.strip() for line in a[i1:i2]]
            came += [line.strip() for line in b[j1:j2]]
    return " / ".join(gone) or "(nothing)", " / ".join(came) or "(nothing)"


def mutants(text: str, backend: str = "triton", published: dict[str, object] | None = None,
            rules: tuple[Rule, ...] = RULES) -> list[Mutant]:
    """Every mutant of `text` the rules of `backend` make, one per site, in rule order; a site whose edit leaves the
    text as it was, or no longer parses, makes none."""
    src = Source(text, published)
    out = []
    for rule in rules:
        if rule.backend != backend:
            continue
        for n, edits in enumerate(rule.sites(src)):
            new = apply(text, edits)
            if new == text:
                continue
            try:
                parse_python(new)
            except SyntaxError:
                continue
            first = min(e[0] for e in edits)
            before, after = _changed_lines(text, new)
            out.append(Mutant(rule.name, rule.cls, n, src.line_of(first), before[:200], after[:200], new))
    return out
