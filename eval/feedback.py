"""A concise text rendering of an `EvalResult`, written for the agent's next turn."""

from __future__ import annotations

import os
import re
from pathlib import Path

from eval.profiling.render import render_profile  # profile (issue 57)
from eval.result import EvalResult, Status

_LOG_LINES = 30


_HARNESS_ROOT = str(Path(__file__).resolve().parent.parent) + os.sep
_FRAME = re.compile(r'^(\s*)File "([^"]+)", line (\d+)(.*)$')


def agent_view(text: str) -> str:
    """A traceback as the agent may see it: the harness's own frames (and their source lines) left out, and no
    absolute host path: library files relative to their site-packages, other files by name."""
    out: list[str] = []
    skip_source = False
    for line in text.splitlines():
        frame = _FRAME.match(line)
        if frame:
            indent, path, lineno, rest = frame.groups()
            skip_source = path.startswith(_HARNESS_ROOT)
            if skip_source:
                continue
            shown = path.split("site-packages" + os.sep, 1)[1] if "site-packages" + os.sep in path else Path(path).name
            out.append(f'{indent}File "{shown}", line {lineno}{rest}')
            continue
        if skip_source and line.startswith(" "):  # the skipped frame's source line (and its ^^^ marker)
            continue
        skip_source = False
        out.append(line)
    return "\n".join(out)


def _tail_lines(text: str, n: int = _LOG_LINES) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[-n:]) if len(lines) > n else "\n".join(lines)


def share_text(share: float) -> str:
    """A share of GPU time: `100%`, `36.7%`, `0.34%` (small shares keep their digits)."""
    if share >= 0.995:
        return f"{share:.0%}"
    return f"{share:.1%}" if share >= 0.1 else f"{share:.2%}"


def render_feedback(result: EvalResult) -> str:
    """What happened, why, and the numbers that help the next attempt."""
    lines = [f"Status: {result.status.value}", f"Reason: {result.reason}"]
    if result.status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.CRASH, Status.TIMEOUT) and result.error:
        label = "Compiler/import log (tail)" if result.status is Status.COMPILE_ERROR else "Traceback / output (tail)"
        lines += [f"{label}:", "```", _tail_lines(agent_view(result.error)), "```"]
    m = result.mismatch
    if m is not None:
        detail = [f"output {m.output}: {m.reason}"]
        if m.max_abs_err is not None:
            detail.append(f"max abs err {m.max_abs_err:.3g}, max rel err {m.max_rel_err:.3g}")
        if m.worst_index is not None and m.expected is not None:
            detail.append(f"worst at index {m.worst_index}: expected {m.expected:.6g}, got {m.got:.6g}")
        if m.mismatch_fraction is not None:
            detail.append(f"{m.mismatch_fraction:.2%} of elements mismatched")
        lines.append("Mismatch: " + "; ".join(detail))
    if result.candidate_timing and result.reference_timing:
        c, r = result.candidate_timing, result.reference_timing
        graphs = result.timing_mode == "cuda_graph"
        lines.append(f"Timing{' (CUDA-graph replays of both forwards)' if graphs else ''}: candidate "
                     f"{c.median_ms * 1000:.1f} us (IQR {c.iqr_ms * 1000:.1f}, n={c.n}), "
                     f"PyTorch {'reference' if graphs else 'eager'} {r.median_ms * 1000:.1f} us"
                     + (f" -> speedup {result.speedup:.2f}x" if result.speedup is not None else ""))
        if result.speedup_compile is not None:
            lines.append(f"Speedup over torch.compile: {result.speedup_compile:.2f}x")
    elif result.unscored:
        lines.append(f"Timing: not measured; no speedup is scored on this problem: {result.unscored}")
    elif result.status is Status.CORRECT:
        lines.append("Timing: not measured (no GPU; the Triton interpreter ran the kernels)")
    k = result.kernels
    if k is not None:
        share = (f"; they took {share_text(k.own_time_fraction)} of forward's GPU time, library kernels the rest"
                 if k.own_time_fraction is not None else "")
        lines.append(f"Own kernels launched: {', '.join(k.own_kernels_launched) or 'none'}{share}")
        if k.top_kernels:
            top = "; ".join(f"{name[:60]} {ms * 1000:.1f} us" for name, ms in k.top_kernels[:5])
            lines.append(f"Top kernels by GPU time: {top}")
    if result.host_ms:
        launch_us = ", ".join(f"{side} {ms * 1000:.0f} us" for side, ms in result.host_ms.items())
        lines.append(f"Host time to launch an eager call: {launch_us}")
    if result.gpu_busy:
        busy = ", ".join(f"{side} {share:.0%}" for side, share in result.gpu_busy.items())
        host = ", ".join(f"{side} {share:.2f}" for side, share in result.host_share.items())
        host = f"; host time over GPU time per call: {host}" if host else ""
        bound = f" (host-bound: {', '.join(result.host_bound)})" if result.host_bound else ""
        lines.append(f"GPU busy during an eager call: {busy}{host}{bound}")
    if result.sol_fraction is not None:
        lines.append(f"Speed-of-light fraction: {result.sol_fraction:.0%}")
    for flag in result.flags:
        lines.append(f"Note: {flag}")
    if result.profile is not None:  # profile (issue 57): last, so that a prompt can cut it (`cap_profile`)
        lines.append(render_profile(result.profile))
    return "\n".join(lines)
