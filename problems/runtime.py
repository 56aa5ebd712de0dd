"""Executing a problem module: import its source, apply reduced sizes, seed, set precision,
build the model and inputs, flatten its outputs.

The one place that does these things: lint, the cost counter, the evaluator's trusted parent
and its sandboxed worker all call it, so a problem runs the same way wherever it runs.
Seeding and drawing hold one process-wide lock, so concurrent evaluations in one process
never interleave their random draws (the worker must rebuild exactly the parent's weights).

Reduced sizes: a problem may declare `META["small"] = {"NAME": value, ...}`, overrides of its
module-level shape constants that keep the same computation at a size a CPU (or the Triton
interpreter) handles in well under a second. They are applied by assigning the module globals
before `get_init_inputs()`/`get_inputs()` run, so those functions must read the constants at
call time (all of ours do).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import itertools
import random
import sys
import threading
import types
from typing import Any, Iterator

import torch

from problems.problem import Problem, ProblemError
from problems.syntax import parse_python

_counter = itertools.count()
_rng_lock = threading.RLock()


def load_source(source: str, label: str, overrides: dict[str, Any] | None = None) -> types.ModuleType:
    """Execute a problem source as a fresh module, then apply shape-constant overrides."""
    name = f"_kh_problem_{next(_counter)}"
    module = types.ModuleType(name)
    module.__file__ = label
    sys.modules[name] = module  # some sources (dataclasses, pickling) look themselves up
    try:
        exec(compile(source, label, "exec"), module.__dict__)
    except Exception as exc:
        raise ProblemError(f"{label}: importing the problem failed: {exc!r}") from exc
    finally:
        sys.modules.pop(name, None)
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, required):
            raise ProblemError(f"{label}: module defines no {required}")
    for key, value in (overrides or {}).items():
        if not hasattr(module, key):
            raise ProblemError(f"{label}: META['small'] names {key!r}, which the module does not define")
        setattr(module, key, value)
    return module


def _module_reads(tree: ast.Module) -> tuple[dict[str, set[str]], set[str]]:
    """The names each top-level function or class loads (module-level statements under "<module>"), and the names
    assigned at module level: what decides which constants only the inputs read."""
    reads: dict[str, set[str]] = {}
    assigned: set[str] = set()
    for node in tree.body:
        loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            reads[node.name] = loads
        else:  # a module-level expression reading a constant (input_shape = (batch, dim)) keeps it
            reads.setdefault("<module>", set()).update(loads)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigned.add(node.targets[0].id)
    return reads, assigned


def _read_outside(reads: dict[str, set[str]], owners: tuple[str, ...]) -> set[str]:
    return set().union(*(names for owner, names in reads.items() if owner not in owners))


def input_only_constants(source: str) -> list[str]:
    """Module-level names that get_inputs() reads and nothing else in the problem does (a batch size, a sequence
    length): changing one changes the inputs, never the model, so the model built once runs on both workloads."""
    reads, assigned = _module_reads(parse_python(source))
    elsewhere = _read_outside(reads, ("get_inputs",))
    return sorted(n for n in assigned & reads.get("get_inputs", set()) if n not in elsewhere)


def sizes_varied_by_extras(source: str) -> list[str]:
    """Module-level names from which get_extra_inputs() computes another size (`ROWS // 2 + 1`) and that nothing
    but the two input functions reads: sizes the problem's own hidden shapes already vary (so a kernel must take
    any value of them), which a workload past those shapes may vary further. A name get_extra_inputs() passes on
    as it is (`HEAD_DIM`) is one the problem keeps."""
    tree = parse_python(source)
    reads, assigned = _module_reads(tree)
    extras = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "get_extra_inputs"]
    varied = {n.id for node in extras for op in ast.walk(node) if isinstance(op, ast.BinOp)
              for n in ast.walk(op) if isinstance(n, ast.Name)}
    return sorted((varied & assigned) - _read_outside(reads, ("get_inputs", "get_extra_inputs")))


def derived_workloads(module: types.ModuleType, names: list[str]) -> dict[str, dict[str, int]]:
    """Hidden workloads, by kind, from each of `names` (constants only get_inputs() reads) that is an int of at
    least 4: every one roughly halved and made odd (4096 -> 2049), or made the largest prime under that
    (4096 -> 2039); a single row (the batch-like constant, else the first, set to 1); and, where a second such
    size follows the rows' (the last defined: the row's width), wide rows (4x + 1 the width, a fifth the rows: a
    kernel with another path past its widest tile, or a tile that only fits the published width, is found) and
    narrow rows (3 wide, 4x + 1 the rows: one row is less than any block). Sizes no block divides, so a kernel that
    hard-codes the published sizes, or assumes they fill its blocks, is found; never more elements than published."""
    sizes = {n: v for n in names if isinstance(v := getattr(module, n, None), int) and not isinstance(v, bool) and v >= 4}
    if not sizes:
        return {}
    defined = [n for n in vars(module) if n in sizes]  # in the source's order: the width is defined last
    rows = next((n for n in defined if "batch" in n.lower()), defined[0])
    workloads = {"odd sizes": {n: (v // 2 + 1) | 1 for n, v in sizes.items()},
                 "prime sizes": {n: _prime_at_most((v // 2 + 1) | 1) for n, v in sizes.items()},
                 "a single row": {rows: 1}}
    widths = [n for n in defined if n != rows]
    if widths:
        width, r, w = widths[-1], sizes[rows], sizes[widths[-1]]
        if r >= 5:  # r // 5 rows of 4w + 1: at most r * w elements
            workloads["wide rows"] = {rows: r // 5, width: 4 * w + 1}
        if w >= 16:  # 4r + 1 rows of 3: at most r * w elements
            workloads["narrow rows"] = {rows: 4 * r + 1, width: 3}
    return workloads


def _prime_at_most(n: int) -> int:
    while n > 2 and any(n % d == 0 for d in range(2, int(n ** 0.5) + 1)):
        n -= 1
    return n


def load_module(problem: Problem, *, small: bool = False) -> types.ModuleType:
    """Execute the problem source as a fresh module; with `small`, apply `META["small"]`."""
    return load_source(problem.source, problem.path or f"<{problem.id}>", small_sizes(problem) if small else None)


def small_sizes(problem: Problem) -> dict[str, Any]:
    """The problem's reduced sizes (`META["small"]`), validated."""
    overrides = problem.meta.get("small") or {}
    if not isinstance(overrides, dict):
        raise ProblemError(f"{problem.id}: META['small'] must be a dict of shape constants")
    return overrides


def has_small_sizes(problem: Problem) -> bool:
    """Whether the problem declares reduced sizes."""
    return bool(problem.meta.get("small"))


def strict_precision() -> None:
    """TF32 off and full fp32 matmul precision, as the tolerances assume."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


# PyTorch's own defaults, which KernelBench leaves as they are (its `src/eval.py` changes none of them)
_TORCH_DEFAULT_PRECISION = {"matmul_tf32": False, "cudnn_tf32": True, "matmul_precision": "highest"}
_precision_lock = threading.RLock()


def set_precision(mode: str) -> None:
    """Apply a precision mode: "strict" (`strict_precision`) or "torch_default" (PyTorch's defaults)."""
    if mode == "strict":
        strict_precision()
    elif mode == "torch_default":
        torch.backends.cuda.matmul.allow_tf32 = _TORCH_DEFAULT_PRECISION["matmul_tf32"]
        torch.backends.cudnn.allow_tf32 = _TORCH_DEFAULT_PRECISION["cudnn_tf32"]
        torch.set_float32_matmul_precision(str(_TORCH_DEFAULT_PRECISION["matmul_precision"]))
    else:
        raise ValueError(f"unknown precision mode {mode!r} (strict | torch_default)")


@contextlib.contextmanager
def precision(mode: str) -> Iterator[None]:
    """Run a block under a precision mode, then restore the switches.

    The switches are process-wide, so blocks hold one lock: two evaluations under different
    modes in one process never see each other's settings.
    """
    with _precision_lock:
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                 torch.get_float32_matmul_precision())
        set_precision(mode)
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
            torch.set_float32_matmul_precision(saved[2])


def kernelbench_trial_seeds(seed: int, n: int) -> list[int]:
    """KernelBench's per-trial input seeds: `torch.manual_seed(seed)`, then one `torch.randint(0, 2**32 - 1, (1,))` each.

    Drawn from a private generator (same sequence as the default one after `manual_seed`), so
    the caller's random state is left alone.
    """
    gen = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=gen).item()) for _ in range(n)]


def make_inputs_on_cpu(module: types.ModuleType, seed: int, device: str | torch.device,
                       extra_index: int | None = None) -> list[Any]:
    """Seed, draw `get_inputs()` on the CPU, then move them to `device`: KernelBench's order, so its values."""
    return list(to_device(make_inputs(module, seed, None, extra_index), device))


def derive_seed(secret: int, label: str) -> int:
    """A sub-seed for one use (trial, timing pool, timed repetition) that reveals nothing about the secret."""
    digest = hashlib.sha256(f"{secret}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), Python's and NumPy's RNGs; the evaluator does this before each call.

    The same values as `torch.manual_seed` on the CPU and CUDA, without its seeding of backends never used here
    (XPU, MTIA; CUDA too on a machine without it), which it queues with `traceback.format_stack()` while they are
    uninitialised: a cost that grows with the stack's depth and differs between processes (on a CPU, torch 2.13, 240
    of the 345 us a draw took). A timed block draws every repetition's inputs through this, inside the wall time the
    parent judges, so that cost was host noise the two processes pay unequally, and room a candidate's process could
    free for hidden work by making its own draws cheaper."""
    random.seed(seed)
    if torch.cuda._is_compiled() and not torch.cuda._is_in_bad_fork():
        torch.cuda.manual_seed_all(seed)  # at once where CUDA is up (queued until it is, as torch.manual_seed does)
    torch.default_generator.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:
        pass


def to_device(obj: Any, device: str | torch.device) -> Any:
    """Move tensors (also inside lists/tuples) to `device`; leave other values alone."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    return obj


def build_model(module: types.ModuleType, seed: int, device: str | torch.device | None = None) -> torch.nn.Module:
    """Seed, construct `Model(*get_init_inputs())` and move it to `device` (None: leave it where it is)."""
    with _rng_lock:
        seed_everything(seed)
        init_inputs = module.get_init_inputs()
        model = module.Model(*init_inputs)
    return model if device is None else model.to(device)


def make_inputs(module: types.ModuleType, seed: int, device: str | torch.device | None = None,
                extra_index: int | None = None) -> list[Any]:
    """Seed and draw `get_inputs()` (or hidden shape set `extra_index`) on `device` (None: where they are made).

    Random tensors are drawn directly on the device: CPU random numbers would otherwise dominate
    evaluation time at large sizes.
    """
    with _rng_lock:
        seed_everything(seed)
        if device is None:
            raw = module.get_inputs() if extra_index is None else module.get_extra_inputs()[extra_index]
            return list(raw)
        with torch.device(device):
            raw = module.get_inputs() if extra_index is None else module.get_extra_inputs()[extra_index]
    return list(to_device(list(raw), device))


# Correctness trials beyond the published distribution: each applies to every floating-point input at once. A
# shortcut that uses get_inputs()'s distribution instead of the inputs (a loss that is, on average, a function of a
# few statistics) fails on them; an honest kernel computes the same formula on any values. Each change takes the
# tensor and a seed of its own (the trial's secret seed and the input's index). The parent applies them and carries
# the inputs: the worker never learns which trial is moved.
_HEAVIEST = 1_000.0  # the largest heavy-tailed factor: randn inputs stay finite in fp16 (65,504)


def _heavy_tailed(t: torch.Tensor, seed: int) -> torch.Tensor:
    """`t`, each element times its own Pareto factor (tail index 2, from 1 to 1,000: median 1.41, 1 element in 100
    over 10, 1 in 10,000 over 100), drawn from `seed` on `t`'s device. A kernel that assumes get_inputs()'s range
    (exp without the maximum subtracted, an approximation valid on a range) meets values far outside it."""
    generator = torch.Generator(device=t.device).manual_seed(derive_seed(seed, "heavy-tailed"))  # not the draws' stream
    factors = torch.rand(t.shape, generator=generator, device=t.device).clamp_(min=_HEAVIEST ** -2).rsqrt_()
    return factors.mul_(t) if t.dtype == factors.dtype else t * factors.to(t.dtype)  # fp32: no third copy


DISTRIBUTIONS: dict[str, tuple[str, Any]] = {  # name -> (what it does, as a verdict says it; the change)
    "scaled": ("every floating-point input multiplied by 4", lambda t, seed: t * 4),
    "shifted": ("every floating-point input plus 2", lambda t, seed: t + 2),
    "flipped": ("every floating-point input negated", lambda t, seed: torch.neg(t)),
    "heavy-tailed": ("every floating-point element multiplied by its own heavy-tailed random factor (Pareto, tail "
                     "index 2, 1 to 1,000)", _heavy_tailed),
}


def transformed(inputs: list[Any], distribution: str, seed: int) -> list[Any]:
    """`inputs` with `distribution` (a key of DISTRIBUTIONS, or "" for none) applied to each floating-point tensor,
    input i with the seed `seed + i` (a trial's seed: secret, so a candidate cannot know the factors ahead)."""
    if not distribution:
        return inputs
    change = DISTRIBUTIONS[distribution][1]
    return [change(x, (seed + i) % 2**63) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for i, x in enumerate(inputs)]


def draw_inputs(module: types.ModuleType, seed: int, device: str | torch.device, extra_index: int | None = None,
                on_cpu: bool = False) -> list[Any]:
    """The inputs of `seed` on `device`: drawn there, or on the CPU and moved (`on_cpu`, KernelBench's values).

    The parent and the worker both call this (the worker for timing inputs only), so the same seed gives the same
    values on either side.
    """
    return (make_inputs_on_cpu if on_cpu else make_inputs)(module, seed, device, extra_index)


_FINGERPRINT_VALUES = 64


def input_fingerprint(inputs: list[Any]) -> list[str]:
    """An exact, short summary of inputs (dtype, shape and a fixed spread of element values).

    Two processes that drew from the same seed compare fingerprints instead of moving the
    tensors; a difference means the draw is not reproducible across processes.
    """
    out = []
    for x in inputs:
        if not isinstance(x, torch.Tensor):
            out.append(repr(x))
            continue
        flat = x.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        n = flat.numel()
        m = min(n, _FINGERPRINT_VALUES)
        picks = [k * (n - 1) // (m - 1) for k in range(m)] if m > 1 else list(range(m))
        values = flat[torch.tensor(picks, dtype=torch.long, device=flat.device)].double().cpu().tolist()
        out.append(f"{x.dtype}{tuple(x.shape)}:" + ",".join(float(v).hex() for v in values))
    return out


def extra_input_count(module: types.ModuleType) -> int:
    """How many hidden shape sets `get_extra_inputs()` defines (0 when it is absent)."""
    if not hasattr(module, "get_extra_inputs"):
        return 0
    with _rng_lock:
        seed_everything(0)
        return len(module.get_extra_inputs())


def make_extra_inputs(module: types.ModuleType, seed: int, device: str | torch.device | None = None) -> list[list[Any]]:
    """Seed and draw `get_extra_inputs()` (empty when the problem defines none)."""
    if not hasattr(module, "get_extra_inputs"):
        return []
    with _rng_lock:
        seed_everything(seed)
        sets = [list(inputs) for inputs in module.get_extra_inputs()]
    return sets if device is None else [list(to_device(inputs, device)) for inputs in sets]


def flatten_outputs(out: Any) -> list[Any]:
    """The leaves of a forward's output, in order: tuples, lists and dict values are walked.

    The evaluator's worker, its trusted parent and lint all flatten with this, so a problem
    lint accepts is one a candidate can pass.
    """
    if isinstance(out, (list, tuple)):
        return [leaf for o in out for leaf in flatten_outputs(o)]
    if isinstance(out, dict):
        return [leaf for o in out.values() for leaf in flatten_outputs(o)]
    return [out]


def output_structure(out: Any) -> str:
    """The containers of a forward's output as canonical text, written as Python writes them: `tensor` for a
    tensor, `(tensor,)`, `[tensor, tensor]`, `{'y': tensor}`, other leaves as `None` or `<type>`.

    `flatten_outputs` gives `{"y": (t,)}` and `t` the same leaves; the evaluator compares this text as well,
    so a candidate must return what the reference returns. Subclasses of tuple, list and dict (named tuples,
    OrderedDict) are written as their base container.
    """
    if isinstance(out, torch.Tensor):
        return "tensor"
    if isinstance(out, tuple):
        items = [output_structure(o) for o in out]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(out, list):
        return "[" + ", ".join(output_structure(o) for o in out) + "]"
    if isinstance(out, dict):
        return "{" + ", ".join(f"{_key_text(k)}: {output_structure(v)}" for k, v in out.items()) + "}"
    return "None" if out is None else f"<{type(out).__name__}>"


def _key_text(key: Any) -> str:
    """A dict key as written in `output_structure`: literals by value, anything else by type."""
    if key is None or type(key) in (str, int, float, bool):
        return repr(key)
    return f"<{type(key).__name__}>"


def output_tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a forward's output, in order; a leaf that is not a tensor is a problem error."""
    leaves = flatten_outputs(out)
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            raise ProblemError(f"output {i} is a {type(leaf).__name__}, not a tensor: no candidate could match it")
    return leaves


def run_forward(model: torch.nn.Module, inputs: list[Any]) -> Any:
    """One reference forward without autograd, on clones so the caller's inputs stay pristine."""
    clones = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        return model(*clones)
