"""The run store's errors: each message says what is wrong and what to do, and a write that failed names its path."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

# What to do about a damaged database: `harness report`, `harness export` and a resume all say it.
DAMAGE_HINT = ("Nothing was changed. Restore the file from a backup, or salvage what SQLite can still read with "
               "`sqlite3 FILE .recover`.")


class StoreError(RuntimeError):
    """A run directory that cannot be used as asked; the message says why and what to do."""


class StoreWriteError(StoreError):
    """A write the run store could not make (a full disk, a read-only filesystem); the message names the path.
    What was committed before stays intact, so the run resumes once there is room."""


def damaged(db_path: Path, exc: BaseException | str, where: str = "") -> StoreError:
    """One line naming a damaged database, the attempt where known, and what to do (SQLite's message can hold a
    whole column's text: only its first line is kept, without the text)."""
    detail = re.sub(r" with text '.*", "", str(exc), flags=re.S).splitlines()[0][:200] if str(exc) else type(exc).__name__
    what = f": the attempt of {where} cannot be read" if where else " and cannot be read"
    return StoreError(f"{db_path} is corrupted{what} ({detail}). {DAMAGE_HINT.replace('FILE', str(db_path))}")


def check_intact(conn: sqlite3.Connection, db_path: Path) -> None:
    """SQLite's structural check of every page (`PRAGMA quick_check`); `StoreError` naming the damage."""
    check = conn.execute("PRAGMA quick_check").fetchall()
    if check != [("ok",)]:
        found = [line for r in check[:4] for line in str(r[0]).splitlines() if not line.startswith("*** in database")]
        raise damaged(db_path, f"integrity check: {'; '.join(found[:3])}")


def write_failed(path: Path, exc: BaseException) -> StoreWriteError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StoreWriteError(f"cannot write {path}: {reason}")
