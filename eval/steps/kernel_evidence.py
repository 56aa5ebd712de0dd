"""Own kernels: which of the kernels that ran are the candidate's own (not a library's, not the reference's), by
name, and the share of device time they took."""

from __future__ import annotations

import re

from eval.crossing import protocol as p
from eval.backends import TRITON_DIALECTS
from eval.steps.context import Context, Verdict
from eval._kernel_symbols import kernels_under
from eval.result import KernelShare, Status


KEPT_KERNEL_NAMES = 64  # kernel names a result keeps of each list (the count of those defined is kept whole)


def own_kernels(ctx: Context) -> None:
    """The candidate's own kernels must have run; on a GPU, report their share of GPU time.

    Own means defined by the candidate's own code, never named in its text: CUDA kernels whose host stubs
    the files it built hold (`eval._kernel_symbols`: the build folder, and the worker's own folder, read here
    once forward has run) and Triton kernels whose launches the worker's tracer recorded from the candidate's
    module. A profiled kernel is own when its
    qualified name (namespaces and name) is one of those and it is no library's: not by its namespace or
    vendor pattern (`is_library_kernel`) and not one the problem's reference launches, profiled in the clean
    reference process (so a kernel built under cuBLAS's `gemv2T_kernel_val` and never launched does not
    make `torch.mv`'s launches its own)."""
    reply, _ = ctx.request(p.Kernels(), timeout=ctx.config.call_timeout_s)
    built = _built_kernels(ctx)
    own_paths = {qualified_name(n) for n in [*reply.triton_own, *built]}
    profile = [(str(n), float(ms)) for n, ms in reply.profile]
    launched = set(reply.triton_own)
    share = None
    library_named: set[str] = set()
    if profile:
        total = sum(ms for _, ms in profile)
        own = [(n, ms) for n, ms in profile if qualified_name(n) in own_paths and not is_library_kernel(n)]
        library_named = {kernel_base_name(n) for n, _ in profile if qualified_name(n) in own_paths} - {
            kernel_base_name(n) for n, _ in own}
        if own:
            referenced = _reference_kernels(ctx)
            library_named |= {kernel_base_name(n) for n, _ in own if qualified_name(n) in referenced}
            own = [(n, ms) for n, ms in own if qualified_name(n) not in referenced]
        launched |= {kernel_base_name(n) for n, _ in own}
        share = sum(ms for _, ms in own) / total if total > 0 else None
    defined = sorted({*ctx.report.triton_kernels, *ctx.report.gluon_kernels, *ctx.report.helion_kernels,  # issue 56
                      *(kernel_base_name(n) for n in built)})
    ctx.result.kernels = KernelShare(own_kernels_launched=sorted(launched)[:KEPT_KERNEL_NAMES],
                                     own_kernels_defined=defined[:KEPT_KERNEL_NAMES], own_kernels_defined_count=len(defined),
                                     own_time_fraction=share, top_kernels=profile[:8])
    if ctx.config.own_kernel_policy != "reject":
        return
    hint = (f" (kernels named like a library's, {', '.join(sorted(library_named))}, never count as the candidate's "
            "own: rename them)") if library_named else ""
    if not launched:
        built_note = "" if built or not ctx.report.cuda_kernels else (
            "; no CUDA kernel was found in what its build or its run produced, and kernels named only in the source "
            "text do not count")
        named = ", ".join(defined[:8]) + (f" and {len(defined) - 8} more" if len(defined) > 8 else "")
        raise Verdict(Status.REJECTED, "none of the candidate's own kernels ran during forward (defined: "
                                       f"{named or 'none'}{built_note}); the work was done by PyTorch "
                                       f"or a fallback path{hint}")
    language = ctx.result.backend  # issue 56: a Gluon or Helion candidate's work runs in kernels of its language
    if language in TRITON_DIALECTS and language not in reply.languages:
        raise Verdict(Status.REJECTED, f"backend={language}: none of the candidate's own {language.capitalize()} "
                                       f"kernels ran during forward (its own launches: {', '.join(sorted(launched))}, "
                                       f"in {', '.join(reply.languages) or 'no Triton dialect'}); write the work in "
                                       f"{language.capitalize()}")
    shortfall = own_share_shortfall(share, ctx.config.min_own_time_fraction)
    if shortfall:
        raise Verdict(Status.REJECTED, shortfall + hint)


def _built_kernels(ctx: Context) -> list[str]:
    """Mangled names of the CUDA kernels the candidate's code built: at import, in the build worker (read from the
    build folder once that worker was gone; later calls it could make ahead too: `eval.worker.lazy_builds`), and at
    run time in its evaluating worker (other `load_inline` calls in `__init__` or a lazy first forward: read now, after forward ran, from the worker's own folder and its private /tmp and
    /dev/shm, as the parent pinned them before any candidate code ran; never from a list the worker sends)."""
    at_build = ctx.build.kernels if ctx.build else []
    at_run = [k for folder in ctx.lease.worker.own_folders for k in kernels_under(folder)]
    return sorted({*at_build, *at_run})


def _reference_kernels(ctx: Context) -> set[tuple[str, ...]]:
    """Qualified names of the kernels the problem's reference launches, profiled in the clean reference process
    on its staged timing inputs: library kernels by construction (no candidate code ever runs there)."""
    if ctx.session is None:
        return set()
    reply, _ = ctx.request(p.Kernels(subject=ctx.session.label), timeout=ctx.config.call_timeout_s,
                           worker=ctx.session)
    return {qualified_name(str(n)) for n, _ in reply.profile}


def own_share_shortfall(share: float | None, minimum: float) -> str | None:
    """Why own kernels' share of forward's GPU time is too small (`eval.min_own_time_fraction`), or None.

    A share that could not be measured (None: CPU interpreter, no profile) or a minimum of 0 never rejects.
    """
    if share is None or minimum <= 0 or share >= minimum:
        return None
    return (f"the candidate's own kernels took {share:.2%} of forward's GPU time, under the minimum of "
            f"{minimum:.2%} (eval.min_own_time_fraction): library kernels (PyTorch, cuBLAS) did the work and the "
            "own kernels look like a decoy; write the substantial part of the computation as your own kernels")


# Kernels of the libraries a candidate calls: PyTorch (incl. its FlashAttention copy), CUB/Thrust, CUTLASS, cuBLAS,
# cuDNN. Namespaces honest code would reuse for its own kernels (`flash`, say) are left out; vendor GEMM names
# are recognised by their tile shapes (`ampere_sgemm_128x64_nn`), not by a prefix an honest name could start with.
_LIBRARY_NAMESPACES = frozenset({"at", "c10", "cub", "thrust", "cutlass", "cudnn", "xmma_cudnn", "pytorch_flash",
                                 "cublas", "cublasLt"})
_LIBRARY_NAME = re.compile(r"^(nvjet_|cutlass_\d|cublas|cudnn|(ampere|volta|turing|maxwell|sm\d+)_\w*?\d+x\d+)|_cublas$")


def kernel_base_name(profiler_name: str) -> str:
    """A kernel's own name as the profiler reports it, in any of the forms a CUDA kernel takes.

    `void ns::my_kernel<float>(float*, int)`, `void (anonymous namespace)::k<16>(float*)` and the
    mangled `_ZN2ns9my_kernelIfEEvPfi` or `_Z9my_kernelPfi` all give `my_kernel`/`k`; Triton and
    `extern "C"` names pass through.
    """
    return _qualified_name(profiler_name)[-1]


def qualified_name(kernel: str) -> tuple[str, ...]:
    """A kernel's namespaces and name, from a profiled name in any form or from a mangled symbol: `void
    kh::inner::k<1>(float*)` and `_ZN2kh5inner1kILi1EEvPf` both give ("kh", "inner", "k")."""
    return tuple(_qualified_name(kernel))


def is_library_kernel(profiler_name: str) -> bool:
    """Whether a profiled kernel belongs to a library (PyTorch, CUB, CUTLASS, cuBLAS, cuDNN, ...).

    Such a kernel never counts as the candidate's own, whatever the candidate named its kernels: a
    decoy could otherwise define (or launch on one element) a kernel named like the library kernel
    that does the real work, e.g. `vectorized_elementwise_kernel`, and have that work counted as its own.
    """
    parts = _qualified_name(profiler_name)
    return (len(parts) > 1 and parts[0] in _LIBRARY_NAMESPACES) or bool(_LIBRARY_NAME.search(parts[-1]))


def _qualified_name(profiler_name: str) -> list[str]:
    """The namespace path and name of a profiled kernel, template arguments and signature dropped."""
    name = profiler_name.strip()
    if name.startswith("_Z"):
        return _demangled_path(name) or [name]
    name = name.replace("(anonymous namespace)", "_anonymous_")
    name = name.split("(", 1)[0]
    depth, kept = 0, []
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            kept.append(ch)
    words = "".join(kept).split()
    return (words[-1] if words else name).split("::")


def _demangled_path(mangled: str) -> list[str]:
    """The identifiers of an Itanium-mangled function name (`_Z<len><id>` or `_ZN<len><id>...[I...]E`)."""
    nested = mangled.startswith("_ZN")
    rest = mangled[3:] if nested else mangled[2:]
    path = []
    while rest and rest[0].isdigit():
        digits = len(rest) - len(rest.lstrip("0123456789"))
        length = int(rest[:digits])
        path.append(rest[digits:digits + length])
        rest = rest[digits + length:]
        if not nested:
            break
    return ["_anonymous_" if part.startswith("_GLOBAL__N") else part for part in path]
