"""The profile's block in the feedback: short lines a model can act on, last in the feedback, capped in length.

The stored feedback holds the block whole (at most `MAX_CHARS`); the next turn's prompt cuts it to
`prompt.profile_chars` (`cap_profile`, which finds it by its first line, `HEADER`).
"""

from __future__ import annotations

from eval.profile_record import KernelProfile, Profile, SideProfile

HEADER = "Profile (Nsight Compute"
MAX_CHARS = 4000  # of the block in the stored feedback
PROFILE_PROMPT_CHARS = 1500  # of the block in a prompt, unless prompt.profile_chars says otherwise
_OWN_SHOWN, _REFERENCE_SHOWN = 4, 3
_NAME_CHARS = 90


def short_name(name: str) -> str:
    """A kernel's name without its return type and arguments, cut to a readable length."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth = 0
    for i, ch in enumerate(name):  # the argument list: the first "(" outside template arguments
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0:
            name = name[:i]
            break
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}%"


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


def _roofline(k: KernelProfile, profile: Profile) -> str:
    """Where the kernel sits: FLOPs per DRAM byte against the ridge, and the bandwidth it reached."""
    achieved = ""
    if k.bytes_per_s is not None and profile.peak_bytes_per_s:
        share = k.bytes_per_s / profile.peak_bytes_per_s
        achieved = f"; {k.bytes_per_s / 1e12:.2f} TB/s ({share:.0%} of the measured copy bandwidth)"
    intensity, ridge = k.intensity, profile.ridge
    if intensity is None:
        return achieved
    if intensity == 0:
        return f"; no floating-point arithmetic counted{achieved}"
    where = "" if ridge is None else (f", {'memory' if intensity < ridge else 'compute'}-bound against the ridge at "
                                     f"{ridge:.0f} FLOP/byte")
    return f"; {intensity:.3g} FLOP/byte{where}{achieved}"


def kernel_line(k: KernelProfile, profile: Profile) -> str:
    """One kernel: its share and time, throughputs, occupancy, resources, roofline position and top stalls."""
    launches = f", {k.launches} launches" if k.launches > 1 else ""
    spills = "?" if k.spills is None else (
        "no spills" if k.spills == 0 else f"{k.spills:,} local-memory instructions (spills)")
    tensor = f", tensor cores {k.tensor_pct:.0f}% busy" if k.tensor_pct else ""
    regs = "?" if k.registers is None else str(k.registers)
    line = (f"- {short_name(k.name)}: {k.share:.0%} of the call's GPU time ({k.time_ns / 1e3:.1f} us{launches}); "
            f"DRAM {_pct(k.dram_pct)} of peak, SM {_pct(k.sm_pct)}{tensor}; occupancy {_pct(k.occupancy_pct)}; "
            f"{regs} registers/thread, {_bytes(k.shared_bytes)} shared memory/block, {spills}{_roofline(k, profile)}")
    if k.stalls:
        line += "; stalls: " + ", ".join(f"{reason} {share:.0%}" for reason, share in k.stalls)
    return line


def _side_lines(side: SideProfile, profile: Profile) -> list[str]:
    if side.side == "reference":
        lines = ["The reference's main kernels (PyTorch):"]
        lines += [kernel_line(k, profile) for k in side.kernels[:_REFERENCE_SHOWN]]
    else:
        own = [k for k in side.kernels if k.own]
        lines = ["Your kernels:"] + [kernel_line(k, profile) for k in own[:_OWN_SHOWN]]
        if len(own) > _OWN_SHOWN:
            lines.append(f"- and {len(own) - _OWN_SHOWN} more of your kernels")
        if not own:
            lines.append("- none of your own kernels was among those profiled")
        library = [k for k in side.kernels if not k.own]
        if library:
            share = sum(k.share for k in library)
            lines.append(f"Library kernels in your call: {share:.0%} of its GPU time (largest: "
                         f"{short_name(library[0].name)}, {library[0].time_ns / 1e3:.1f} us)")
    if side.note:
        lines.append(f"Note: {side.note}")
    return lines


def render_profile(profile: Profile) -> str:
    """The block for the feedback: why there is no profile, or the candidate's kernels then the reference's."""
    head = f"{HEADER}, {profile.level}; one forward call on fresh inputs; a diagnostic, never part of the verdict):"
    if profile.candidate is None or not profile.candidate.kernels:
        return f"{head}\nNot available: {profile.note or 'no kernel was profiled'}"
    lines = [head] + _side_lines(profile.candidate, profile)
    if profile.reference is not None and (profile.reference.kernels or profile.reference.note):
        lines += _side_lines(profile.reference, profile)
    return cut("\n".join(lines), MAX_CHARS)


def cut(block: str, chars: int) -> str:
    """`block` in at most about `chars` characters, cut at a line's end, saying it was cut."""
    if len(block) <= chars:
        return block
    kept = block[:chars]
    kept = kept[: kept.rfind("\n")] if "\n" in kept else kept
    return f"{kept}\n(profile cut at {chars} characters: prompt.profile_chars)"


def cap_profile(feedback: str, chars: int) -> str:
    """`feedback` with its profile block (its last part, from `HEADER` on) cut to `chars` characters; 0 leaves the
    block out. Feedback without a profile is returned as it is."""
    at = feedback.rfind("\n" + HEADER)  # the last: the block ends the feedback
    if at < 0:
        return feedback
    head, block = feedback[:at], feedback[at + 1:]
    return head if chars <= 0 else f"{head}\n{cut(block, chars)}"
