"""Loaders for KernelBench: a local checkout and the Hugging Face dataset.

Both give the same ids for the same problem, `KB/L<level>/<number>_<Name>` (e.g.
`KB/L1/1_Square_matrix_multiplication_`), one-indexed as KernelBench numbers its files and
`problem_id`s. A file that cannot be used does not hide the others: loaders return a
`LoadFailure` in its place, and the caller decides (lint reports it; `select_problems` raises).
"""

from __future__ import annotations

import re
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from problems.problem import Problem, ProblemError, load_problem_file, problem_from_source

KB_LEVELS = (1, 2, 3)
HF_DATASET = "ScalingIntelligence/KernelBench"
_HUB_TIMEOUT_S = 10.0  # to connect to the Hub before `datasets` is asked (its own retries take about 40 s)
_NUMBERED = re.compile(r"^(\d+)_")


@dataclass(frozen=True)
class LoadFailure:
    """A problem that could not be loaded: its id, where it came from and why."""

    id: str
    origin: str
    error: str


Entry = Problem | LoadFailure


def kernelbench_id(level: int, number: int, name: str) -> str:
    """Stable id of KernelBench problem `number` (one-indexed) of `level`."""
    stem = name[:-3] if name.endswith(".py") else name
    if not _NUMBERED.match(stem):
        stem = f"{number}_{stem}"
    return f"KB/L{level}/{stem}"


def parse_level(text: str) -> int:
    """Accept `1`, `level1`, `level_1`, `L1` for KernelBench level 1."""
    match = re.fullmatch(r"(?:level_?|l)?(\d+)", text.strip().lower())
    if not match:
        raise ProblemError(f"not a KernelBench level: {text!r} (use 1, level1 or level_1)")
    return int(match.group(1))


def find_kernelbench_root(path: str | Path) -> Path:
    """The folder holding `level1/`, `level2/`, ...: `path` itself or its `KernelBench/` subfolder."""
    p = Path(path).expanduser()
    for candidate in (p, p / "KernelBench"):
        if any((candidate / f"level{n}").is_dir() for n in KB_LEVELS):
            return candidate
    raise ProblemError(f"{p}: no KernelBench levels here (expected {p}/level1 or {p}/KernelBench/level1)")


def _file_number(path: Path) -> int:
    match = _NUMBERED.match(path.stem)
    return int(match.group(1)) if match else 1 << 30


def load_kernelbench_dir(path: str | Path, levels: list[int] | None = None) -> list[Entry]:
    """Problems of a local KernelBench checkout, in level then problem-number order."""
    root = find_kernelbench_root(path)
    chosen = list(levels) if levels else [n for n in KB_LEVELS if (root / f"level{n}").is_dir()]
    entries: list[Entry] = []
    for level in chosen:
        folder = root / f"level{level}"
        if not folder.is_dir():
            raise ProblemError(f"{root}: no level{level} folder")
        files = sorted((p for p in folder.glob("*.py") if _NUMBERED.match(p.stem)), key=_file_number)
        for file in files:
            pid = kernelbench_id(level, _file_number(file), file.stem)
            try:
                entries.append(load_problem_file(file, problem_id=pid, level=f"level{level}"))
            except ProblemError as exc:
                entries.append(LoadFailure(pid, str(file), str(exc)))
    return entries


def _open_dataset(source: str, split: str | None) -> dict[str, Any]:
    """split name -> rows, from a `save_to_disk` folder, a folder of `level_N*.parquet` files, or the Hub."""
    import datasets

    local = Path(source).expanduser()
    if local.is_dir():
        if (local / "dataset_dict.json").is_file() or (local / "dataset_info.json").is_file():
            loaded = datasets.load_from_disk(str(local))
            if isinstance(loaded, datasets.Dataset):  # one split saved alone: split by its level column
                by_level: dict[str, list] = {}
                for row in loaded:
                    by_level.setdefault(f"level_{row['level']}", []).append(row)
                return by_level
            return dict(loaded)
        files: dict[str, list[str]] = {}
        for file in sorted(local.rglob("*.parquet")):
            match = re.match(r"(level_\d+)", file.name)
            if match:
                files.setdefault(match.group(1), []).append(str(file))
        if not files:
            raise ProblemError(f"{local}: neither a saved dataset nor a folder of level_N*.parquet files")
        wanted = {split: files[split]} if split and split in files else files
        return dict(datasets.load_dataset("parquet", data_files=wanted))
    _check_the_hub(source)
    if split:
        return {split: datasets.load_dataset(source, split=split)}
    return dict(datasets.load_dataset(source))


def _check_the_hub(source: str) -> None:
    """Fail at once, in one line, where the Hub cannot be reached: `datasets` would first retry for about 40 s,
    printing each retry, then give the same error. `HF_HUB_OFFLINE=1` reads a cached copy without asking."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return
    url = urllib.parse.urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=_HUB_TIMEOUT_S).close()
    except OSError as exc:
        raise ProblemError(
            f"cannot reach the Hugging Face Hub at {constants.ENDPOINT} for {source!r} ({exc.strerror or exc}); "
            "with a cached copy, set HF_HUB_OFFLINE=1; or use a local checkout: kernelbench:/path/to/KernelBench"
        ) from None


def load_kernelbench_dataset(source: str = HF_DATASET, levels: list[int] | None = None) -> list[Entry]:
    """Problems of the KernelBench dataset (`code`, `level`, `name`, `problem_id` columns).

    `source` is a Hub name (needs the network or a warm cache) or a local folder.
    """
    split = f"level_{levels[0]}" if levels and len(levels) == 1 else None
    try:
        splits = _open_dataset(source, split)
    except ProblemError:
        raise
    except Exception as exc:  # datasets/network raise many types; the user needs the message, not the type
        raise ProblemError(f"cannot open KernelBench dataset {source!r}: {exc}") from exc
    chosen = [f"level_{n}" for n in levels] if levels else sorted(splits, key=lambda s: parse_level(s))
    entries: list[Entry] = []
    for split_name in chosen:
        if split_name not in splits:
            raise ProblemError(f"{source}: no split {split_name!r} (has {', '.join(sorted(splits))})")
        level = parse_level(split_name)
        rows = sorted(splits[split_name], key=lambda r: int(r["problem_id"]))
        for row in rows:
            pid = kernelbench_id(level, int(row["problem_id"]), str(row["name"]))
            origin = f"{source}[{split_name}]#{row['problem_id']}"
            try:
                entries.append(
                    problem_from_source(
                        row["code"], name=pid.rsplit("/", 1)[1], problem_id=pid, level=f"level{level}", path=None
                    )
                )
            except ProblemError as exc:
                entries.append(LoadFailure(pid, origin, str(exc)))
    return entries
