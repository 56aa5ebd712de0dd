"""The run directory's files beside the database: `results.jsonl` lines and their digest, atomic writes of code and
config files, the directory lock, and taking back what a failed start made."""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Any, Iterator

from harness.store.errors import StoreError, write_failed
from harness.store.schema import CONFIG_NAME, DB_NAME, JSONL_NAME, LOCK_NAME, Attempt, dumps


def jsonl_line(attempt: Attempt) -> bytes:
    """An attempt's `results.jsonl` line, as written and as checked."""
    return (dumps(attempt.summary()) + "\n").encode("utf-8")


def file_digest(path: Path) -> Any:
    """The SHA-256 of `path`'s bytes (a hashlib object, to be continued as lines are appended)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest


def matching_prefix(path: Path, expected: Iterator[bytes]) -> tuple[int, int, bool]:
    """How many of `path`'s first lines are the `expected` ones, their size in bytes, and whether all that follows
    them is one torn line (no newline: a crash mid-write) or nothing; False when a whole line disagrees."""
    kept, offset = 0, 0
    with open(path, "rb") as f:
        for line in f:
            if line != next(expected, None):
                return kept, offset, not line.endswith(b"\n")
            kept, offset = kept + 1, offset + len(line)
    return kept, offset, True


def acquire_lock(run_dir: Path) -> int:
    """The locked descriptor of `run_dir`'s lock file. A lock won on a file that a run giving up its start-up
    removed meanwhile (`discard_new_run`) locks nothing another process can see: taken again on the file there now."""
    path = run_dir / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(
                f"{run_dir} is in use by another harness process; wait for it or choose another name="
            ) from None
        if _same_file(fd, path):
            return fd
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def write_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """Write `path` whole or not at all; a failure (a full disk) leaves no temporary file and raises
    `StoreWriteError` naming the path."""
    tmp = path.with_name(f".{path.name}.tmp")
    made = missing_dirs(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        remove_empty(made)  # no empty code/<problem>/ folder is left for a file that was never written
        raise write_failed(path, exc) from None


def missing_dirs(folder: Path) -> list[Path]:
    """The folders of `folder`'s path that do not exist yet, outermost first (what a `mkdir -p` would make)."""
    return [p for p in (folder, *folder.parents) if not p.exists()][::-1]


def remove_empty(made: list[Path]) -> None:
    """Take back folders made for a write that failed, innermost first, as long as they are empty."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # not empty: something else was written there meanwhile
            return


def discard_new_run(run_dir: Path, made: list[Path]) -> None:
    """A new run whose creation failed (a full disk) leaves nothing: the files this call made, then its folders."""
    tmp = run_dir / f".{DB_NAME}.tmp"
    for name in (LOCK_NAME, CONFIG_NAME, JSONL_NAME, DB_NAME, tmp.name, f"{tmp.name}-wal", f"{tmp.name}-shm",
                 f"{tmp.name}-journal", f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
        (run_dir / name).unlink(missing_ok=True)
    remove_empty(made)
