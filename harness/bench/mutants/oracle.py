"""Equivalent mutants, told apart from real bugs by a float64 check over many inputs.

The oracle is ours, not the evaluator's: its draws are its own (published draws, the problem's extra shapes, its own
awkward sizes, value regimes and layouts), so the kill rate measures how much of what the oracle can tell apart the
evaluator finds. On every draw the reference runs in float64 (`R`), and the original solution (`O`) and each mutant
(`M`) in their own dtypes. A mutant is **equivalent** when, on every draw where the reference and the original run,
each of its output elements is as close to `R` as the problem's tolerance allows, or as the original is where the
original is further off (`|M - R| <= max(|O - R|, atol + rtol * |R|)`, NaN and Inf where the original has them):
it is as correct as the original, so an evaluator must accept it. Otherwise it **differs** (a bug; the draws that
show it are listed), **raises** where the original does not, or is **stillborn** (it raised on every draw: it does
not build or run at all, so it counts for no kill rate).

Each problem's candidates run in a child process (`python -m harness.bench.mutants.oracle JOB`), the original first,
one JSON line per candidate. A candidate that kills the process (an access past the end of a buffer), leaves CUDA in
an error state or runs past its time differs; the parent starts a new child for the ones after it. The candidates
are our own mutants of trusted solutions, run in-process: never a hostile candidate.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

EQUIVALENT, DIFFERS, RAISES, STILLBORN, ORIGINAL = "equivalent", "differs", "raises", "stillborn", "original"
WEIGHT_SEED = 1234
PUBLISHED_DRAWS = 3
GPU_BASE_MAX_BYTES = 64 << 20  # on a GPU the draws are at the published sizes when one draw's inputs fit this


@dataclass
class Verdict:
    """The oracle's verdict on one candidate: its status, the draws that tell it from the original, and why."""

    status: str
    draws: int = 0  # draws it was compared on
    # labels of the draws where it differs or raises; for the original, where it is outside the tolerance itself
    shown_by: list[str] = field(default_factory=list)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "draws": self.draws, "shown_by": self.shown_by, "detail": self.detail[:300]}


# -- the child: draws, the float64 reference, the candidates -------------------------------------------------------

def _regimes() -> dict[str, Any]:
    """Value regimes applied to every floating-point input (rows: the last dimension)."""
    import torch

    def rows(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1, t.shape[-1]) if t.dim() else t.reshape(1, 1)

    def zero_rows(t: torch.Tensor) -> torch.Tensor:
        r = rows(t).clone()
        r[:: 4] = 0
        return r.reshape(t.shape)

    def outlier(t: torch.Tensor) -> torch.Tensor:
        r = rows(t).clone()
        at = torch.arange(r.shape[0], device=t.device) * 7 % r.shape[1]
        r[torch.arange(r.shape[0], device=t.device), at] = r.abs().max() * 1000
        return r.reshape(t.shape)

    def tiny_variance(t: torch.Tensor) -> torch.Tensor:
        r = rows(t)
        return (10 + (r - r.mean(1, keepdim=True)) * 1e-3).reshape(t.shape)

    def constant_rows(t: torch.Tensor) -> torch.Tensor:
        r = rows(t)
        return r[:, :1].expand_as(r).contiguous().reshape(t.shape)

    def near_dtype_limit(t: torch.Tensor) -> torch.Tensor:
        """Scaled so its largest magnitude is the fourth root of its dtype's largest value (about 4e9 in float32
        and bfloat16, 16 in float16): a product of four stays finite, and a narrower dtype inside the kernel may not."""
        top = t.double().abs().max().clamp_min(1e-30)
        return (t.double() * (torch.finfo(t.dtype).max ** 0.25 / top)).to(t.dtype)

    return {"tiny magnitude (x 1e-3)": lambda t: t * 1e-3, "large magnitude (x 100)": lambda t: t * 100,
            "large mean (+100)": lambda t: t + 100, "tiny variance around 10": tiny_variance,
            "zero rows (every 4th)": zero_rows, "one outlier (x 1000) per row": outlier,
            "all negative": lambda t: -t.abs() - 1, "constant rows": constant_rows,
            "near the dtype's largest magnitudes": near_dtype_limit}


def _layouts() -> dict[str, Any]:
    import torch

    def transposed(t: torch.Tensor) -> torch.Tensor | None:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() >= 2 and min(t.shape[-2:]) > 1 else None

    def strided(t: torch.Tensor) -> torch.Tensor | None:
        if t.dim() == 0:
            return None
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1] + 3, dtype=t.dtype, device=t.device)
        wide[..., 1:t.shape[-1] + 1] = t
        return wide[..., 1:t.shape[-1] + 1]

    return {"transposed storage": transposed, "rows inside a wider buffer": strided}


def _awkward_sizes(value: int) -> dict[str, int]:
    """Sizes no block divides, down to one, and past the published ones (a kernel's path for wide rows)."""
    return {"sizes of 1": 1, "sizes of 3": 3, "sizes one less": value - 1, "sizes one more": value + 1,
            "sizes a third, odd": (value // 3) | 1, "sizes four times, plus one": 4 * value + 1}


def _bytes(inputs: list[Any]) -> int:
    import torch

    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def _input_sizes(source: str) -> list[str]:
    """Module-level names get_inputs() reads and neither the model nor get_init_inputs() does: sizes that change the
    inputs only, so one model runs on every size."""
    import ast

    from problems import parse_python

    tree = parse_python(source)
    reads = {node.name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    model = reads.get("Model", set()) | reads.get("get_init_inputs", set())
    return sorted(reads.get("get_inputs", set()) - model)


def _float_inputs(inputs: list[Any], change: Any) -> list[Any] | None:
    import torch

    out, changed = [], False
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1:
            new = change(x)
            if new is not None:
                out.append(new.to(x.dtype) if new.dtype != x.dtype else new)
                changed = True
                continue
        out.append(x)
    return out if changed else None


def plan(problem: Any, device: str, seed: int) -> list[tuple[str, Any, list[Any]]]:
    """(label, problem module, inputs) for every draw: published draws, extra shapes, awkward sizes, regimes,
    layouts; at the published sizes on a GPU when one draw fits `GPU_BASE_MAX_BYTES`, else at `META["small"]`."""
    import torch

    from problems import draw_inputs, extra_input_count, has_small_sizes, load_module, load_source

    small = has_small_sizes(problem) and device == "cpu"
    base = load_module(problem, small=small)
    if device != "cpu" and has_small_sizes(problem):
        try:
            with torch.device("meta"):
                size = _bytes(base.get_inputs())
        except Exception:  # noqa: BLE001 - get_inputs() that cannot run on the meta device: the small sizes
            size = GPU_BASE_MAX_BYTES + 1
        if size > GPU_BASE_MAX_BYTES:
            base, small = load_module(problem, small=True), True
    draws: list[tuple[str, Any, list[Any]]] = []
    for k in range(PUBLISHED_DRAWS):
        draws.append((f"published draw {k}", base, draw_inputs(base, seed + k, device)))
    for j in range(extra_input_count(base)):
        draws.append((f"extra shapes #{j}", base, draw_inputs(base, seed, device, extra_index=j)))
    names = [n for n in _input_sizes(problem.source) if isinstance(getattr(base, n, None), int)
             and not isinstance(getattr(base, n), bool) and getattr(base, n) >= 2]
    overrides_base = dict(problem.meta.get("small", {})) if small else {}
    for label in _awkward_sizes(2):
        sizes = {n: max(1, _awkward_sizes(getattr(base, n))[label]) for n in names}
        if not sizes:
            break
        try:
            module = load_source(problem.source, f"<{problem.id} {label}>", {**overrides_base, **sizes})
            with torch.device("meta"):
                if _bytes(module.get_inputs()) > GPU_BASE_MAX_BYTES:  # one draw stays small on either device
                    continue
            draws.append((label, module, draw_inputs(module, seed + 11, device)))
        except Exception:  # noqa: BLE001 - a size the problem refuses is not a draw
            continue
    published = draws[0][2]
    for label, change in {**_regimes(), **_layouts()}.items():
        inputs = _float_inputs(published, change)
        if inputs is not None:
            draws.append((label, base, inputs))
    return draws


def _as_float64(x: Any) -> Any:
    import torch

    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _load_candidate(source: str, folder: str, index: int) -> Any:
    path = os.path.join(folder, f"candidate_{index}.py")  # Triton reads a kernel's source from its file
    with open(path, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(f"_kh_oracle_{index}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _to(inputs: list[Any], device: str) -> list[Any]:
    import torch

    return [x.to(device, copy=True) if isinstance(x, torch.Tensor) else x for x in inputs]


def _outputs(model: Any, inputs: list[Any], device: str) -> list[Any]:
    """The model's outputs on fresh device copies of `inputs`, brought to host memory: what the oracle keeps never
    lies where a candidate's kernel can write."""
    import torch

    from problems import flatten_outputs

    with torch.no_grad():
        out = model(*_to(inputs, device))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return [x.detach().to("cpu", copy=True) if isinstance(x, torch.Tensor) else x for x in flatten_outputs(out)]


def _fingerprint(*groups: Any) -> list[int]:
    """A byte sum of every tensor kept (draws, references, the original's outputs): under the interpreter a kernel
    that writes past its buffer writes host memory, and a changed fingerprint says it did."""
    import torch

    sums = []
    for group in groups:
        for values in group:
            for x in values:
                if isinstance(x, torch.Tensor):
                    sums.append(int(torch.sum(x.reshape(-1).contiguous().view(torch.uint8), dtype=torch.int64)))
    return sums


def _differs(ref: list[Any], orig: list[Any], mut: list[Any], atol: float, rtol: float, own: bool = True) -> str:
    """Why `mut` is less correct than `orig` against the float64 `ref`, or "" when it is not (`own` off: why `mut` is
    outside the tolerance itself, the original's error no excuse)."""
    import torch

    if len(mut) != len(orig):
        return f"{len(mut)} outputs, the original has {len(orig)}"
    for i, (r, o, m) in enumerate(zip(ref, orig, mut)):
        if not isinstance(m, torch.Tensor) or not isinstance(o, torch.Tensor):
            if m != o:
                return f"output {i}: {m!r} where the original gives {o!r}"
            continue
        if m.shape != o.shape or m.dtype != o.dtype:
            return f"output {i}: {m.dtype} {tuple(m.shape)} where the original gives {o.dtype} {tuple(o.shape)}"
        r64, o64, m64 = (t.detach().to("cpu", torch.float64) for t in (r, o, m))
        if r64.shape != o64.shape:
            r64 = r64.reshape(o64.shape)
        known = torch.isfinite(r64) & (torch.isfinite(o64) if own else True)  # where the original is defined
        same_special = (torch.isnan(o64) & torch.isnan(m64)) | (o64 == m64)
        bad_special = (~known & ~same_special if own else ~torch.isfinite(m64) & (m64 != r64)) & ~torch.isnan(r64)
        band = atol + rtol * r64.abs()
        allowed = torch.maximum((o64 - r64).abs(), band) if own else band
        bad = known & ~((m64 - r64).abs() <= allowed)
        if bool(bad.any()) or bool(bad_special.any()):
            where = bad | bad_special
            n = int(where.sum())
            worst = float(((m64 - r64).abs()[bad]).max()) if bool(bad.any()) else float("nan")
            return f"output {i}: {n} of {where.numel()} elements out of the band (worst |M - R| {worst:.3g})"
    return ""


def _context_broken() -> bool:
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").item()
        return False
    except Exception:  # noqa: BLE001 - a sticky CUDA error: this process can run nothing more
        return True


def child(job: dict[str, Any]) -> None:
    """Print `{"__c": index, ...}` for the candidates from `job["start"]` on (index 0: the original)."""
    import torch

    from problems import build_model, problem_from_source, seed_everything, strict_precision, tolerance

    strict_precision()
    device = job["device"]
    problem = problem_from_source(job["problem"], problem_id=job["problem_id"])
    atol, rtol = tolerance(problem.dtype, problem.atol, problem.rtol)
    draws = [(label, module, _to(inputs, "cpu")) for label, module, inputs in plan(problem, device, job["seed"])]
    reference = build_model(draws[0][1], WEIGHT_SEED, device)
    ref64 = build_model(draws[0][1], WEIGHT_SEED, device).double()
    refs: dict[str, list[Any]] = {}
    for label, _, inputs in draws:
        try:
            refs[label] = _outputs(ref64, [_as_float64(x) for x in inputs], device)
        except Exception:  # noqa: BLE001 - the reference refuses this draw: not one
            continue

    def model_of(source: str, index: int, folder: str) -> Any:  # built as the evaluator builds ModelNew
        module = _load_candidate(source, folder, index)
        seed_everything(WEIGHT_SEED)
        model = module.ModelNew(*draws[0][1].get_init_inputs())
        state = {k: v for k, v in reference.state_dict().items()
                 if k in model.state_dict() and model.state_dict()[k].shape == v.shape}
        model.load_state_dict(state, strict=False)
        return model.to(device)

    with tempfile.TemporaryDirectory() as folder:
        originals: dict[str, list[Any]] = {}
        try:
            original = model_of(job["candidates"][0], 0, folder)
            for label, _, inputs in draws:
                if label in refs:
                    try:
                        originals[label] = _outputs(original, inputs, device)
                    except Exception:  # noqa: BLE001 - a draw the original cannot take is no draw
                        pass
        except Exception as exc:  # noqa: BLE001
            print(json.dumps({"__c": 0, "status": STILLBORN, "detail": f"the original: {exc!r}"}), flush=True)
            return
        if job["start"] == 0:
            off = [label for label, out in originals.items() if _differs(refs[label], out, out, atol, rtol, own=False)]
            print(json.dumps({"__c": 0, **Verdict(ORIGINAL, len(originals), off).to_json()}), flush=True)
        kept = _fingerprint([d[2] for d in draws], refs.values(), originals.values())
        for index in range(max(1, job["start"]), len(job["candidates"])):
            verdict = _judge(job["candidates"][index], index, folder, model_of, draws, refs, originals, atol, rtol,
                             device)
            corrupted = _fingerprint([d[2] for d in draws], refs.values(), originals.values()) != kept
            if corrupted:
                verdict = Verdict(DIFFERS, verdict.draws, verdict.shown_by or ["(the process)"],
                                  "wrote outside its outputs: the oracle's own tensors changed")
            print(json.dumps({"__c": index, **verdict.to_json()}), flush=True)
            if corrupted or _context_broken():
                sys.exit(3)


def _judge(source: str, index: int, folder: str, model_of: Any, draws: list[tuple[str, Any, list[Any]]],
           refs: dict[str, list[Any]], originals: dict[str, list[Any]], atol: float, rtol: float,
           device: str) -> Verdict:
    try:
        model = model_of(source, index, folder)
    except Exception as exc:  # noqa: BLE001
        return Verdict(STILLBORN, detail=f"does not load: {exc!r}")
    verdict, ran, differed, first = Verdict(EQUIVALENT), 0, 0, ""
    for label, _, inputs in draws:
        if label not in originals:
            continue
        verdict.draws += 1
        try:
            got = _outputs(model, inputs, device)
        except Exception as exc:  # noqa: BLE001
            verdict.shown_by.append(label)
            first = first or f"{label}: raised {exc!r}"
            if _context_broken():
                break
            continue
        ran += 1
        why = _differs(refs[label], originals[label], got, atol, rtol)
        if why:
            differed += 1
            verdict.shown_by.append(label)
            first = first or f"{label}: {why}"
    if ran == 0:
        return Verdict(STILLBORN, verdict.draws, verdict.shown_by, first)
    verdict.status = EQUIVALENT if not verdict.shown_by else (DIFFERS if differed else RAISES)
    verdict.detail = first
    return verdict


# -- the parent: a child per problem, started again after a candidate that ends it ------------------------------------

def _reader(stream: Any, lines: "queue.Queue[str | None]") -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def judge(problem: Any, sources: list[str], device: str, seed: int = 0, timeout_s: float = 300) -> list[Verdict]:
    """The oracle's verdict on each of `sources` (the first: the original, whose verdict is `original` with the count
    of draws, or `stillborn`), each candidate given `timeout_s`."""
    verdicts: dict[int, Verdict] = {}
    start = 0
    env = {**os.environ, **({"TRITON_INTERPRET": "1"} if device == "cpu" else {})}
    while start < len(sources):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump({"problem": problem.source, "problem_id": problem.id, "candidates": sources, "device": device,
                       "seed": seed, "start": start}, fh)
        proc = subprocess.Popen([sys.executable, "-m", __name__, fh.name], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        errors: list[str] = []
        threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True).start()  # type: ignore
        deadline = time.monotonic() + timeout_s * (2 if start == 0 else 1)  # the first waits for the draws too
        ended = ""
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                ended = f"ran past {timeout_s:g} s"
                os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own group: nothing of ours
                break
            if line is None:
                ended = "ended the oracle's process"
                break
            if line.startswith('{"__c"'):
                record = json.loads(line)
                index = record.pop("__c")
                verdicts[index] = Verdict(**record)
                start = index + 1
                deadline = time.monotonic() + timeout_s
                if index == 0 and record["status"] == STILLBORN:
                    start = len(sources)
        proc.wait()
        os.unlink(fh.name)
        if start < len(sources) and start not in verdicts:
            if start == 0:
                tail = (errors[0] if errors else "")[-400:]
                raise RuntimeError(f"{problem.id}: the oracle's process {ended} before the original ran: {tail}")
            verdicts[start] = Verdict(DIFFERS, shown_by=["(the process)"], detail=f"the candidate {ended}")
            start += 1
    return [verdicts.get(i, Verdict(STILLBORN, detail="not run: the original is stillborn"))
            for i in range(len(sources))]


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        child(json.load(fh))
