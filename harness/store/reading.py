"""Reading a run without changing it, also while a run writes it: the whole record, one problem's texts at a time,
and the JSON-lines export."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Iterator

from harness.store.errors import StoreError, check_intact, damaged
from harness.store.schema import (CONFIG_NAME, DB_NAME, READABLE_VERSIONS, SKIPPED_TEXTS, Attempt, RunRecord,
                                  attempt_rows, check_version, decode, dumps, meta, sessions_in)

_RETRIES = 3  # immutable reads repeated when a writer appears meanwhile, before a live read


def read_run(run_dir: str | Path, *, texts: bool = True) -> RunRecord:
    """Read a run directory without changing anything in it, also while a run is writing it.

    `texts=False` leaves every attempt's prompt, reply, code, feedback and error out (empty), so that a large
    run's metrics fit in memory; the results are read. `read_problem_texts` reads the texts one problem at a time.

    The database is opened through SQLite's `mode=ro` URI. A read-only connection to a WAL
    database that no writer has open would leave fresh `-wal`/`-shm` files behind, so when there
    is no `-wal` file the database is read as `immutable` instead, and the read is repeated in the
    ordinary read-only mode if a writer appeared meanwhile (its `-wal` file shows up, or the main
    file changed). Runs of schema versions `READABLE_VERSIONS` are read; `StoreError` otherwise.
    """
    run_dir = Path(run_dir)
    db_path = run_dir / DB_NAME
    if not db_path.is_file():
        hint = f" (it has {CONFIG_NAME} but no database)" if (run_dir / CONFIG_NAME).exists() else ""
        raise StoreError(f"{run_dir} is not a run directory: no {DB_NAME}{hint}")
    for _ in range(_RETRIES):
        wal = Path(f"{db_path}-wal")
        immutable = not wal.exists()
        before = _stat(db_path)
        record = _read_once(db_path, immutable=immutable, texts=texts)
        if not immutable or (not wal.exists() and _stat(db_path) == before):
            return record
    return _read_once(db_path, immutable=False, texts=texts)


def _stat(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _read_once(db_path: Path, *, immutable: bool, texts: bool = True) -> RunRecord:
    uri = f"{db_path.resolve().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}"
    hint = "Nothing was changed."
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)  # transactions are explicit below
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {db_path} read-only: {exc}. {hint}") from None
    try:
        version = check_version(conn, db_path, READABLE_VERSIONS, hint)
        check_intact(conn, db_path)
        config = json.loads(meta(conn)["config"])
        conn.execute("BEGIN")  # one read transaction: attempts and sessions from the same snapshot
        attempts, session_of = [], {}
        skip = () if texts else SKIPPED_TEXTS
        for row in attempt_rows(conn, with_session=True, skip=skip):  # decoded as they stream in
            a = _decode_or_refuse(row, version, db_path)
            attempts.append(a)
            session_of[a.key] = row["session_id"]
        sessions = sessions_in(conn)
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise damaged(db_path, exc) from None
    except (KeyError, ValueError) as exc:
        raise StoreError(f"{db_path} has no valid run metadata ({exc}). {hint}") from None
    finally:
        conn.close()
    return RunRecord(config, attempts, sessions, session_of, version)


def _decode_or_refuse(row: dict[str, Any], version: int, db_path: Path) -> Attempt:
    try:
        return decode(row, version)
    except (KeyError, TypeError, ValueError) as exc:
        where = f"problem {row.get('problem_id')!r}, sample {row.get('sample')}, turn {row.get('turn')}"
        raise damaged(db_path, exc, where) from None


def read_problem_texts(run_dir: str | Path, *, results: bool = True) -> Iterator[tuple[str, list[Attempt]]]:
    """Each problem's attempts with their texts, one problem at a time (problem, sample, turn order), read
    read-only in one transaction; memory holds one problem's attempts, never the run's. `results=False` leaves
    the results out (None), for a caller that holds them already (`read_run(texts=False)`)."""
    db_path = Path(run_dir) / DB_NAME
    immutable = not Path(f"{db_path}-wal").exists()  # as in `read_run`: leave no -wal/-shm files behind
    uri = f"{db_path.resolve().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        try:
            version = check_version(conn, db_path, READABLE_VERSIONS, "Nothing was changed.")
            conn.execute("BEGIN")
            problem, group = None, []
            for row in attempt_rows(conn, skip=() if results else ("result",)):
                a = _decode_or_refuse(row, version, db_path)
                if a.problem_id != problem and group:
                    yield problem, group
                    group = []
                problem = a.problem_id
                group.append(a)
            if group:
                yield problem, group
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise damaged(db_path, exc) from None


def export_jsonl(run_dir: str | Path, out: str | Path, *, include_prompts: bool = True) -> int:
    """Write every attempt of a run as JSON lines to `out` (with the prompts unless told not to), streamed one
    problem at a time; the file appears whole (written under a temporary name, then renamed)."""
    read_run(run_dir, texts=False)  # refuses what is not a readable run, before anything is written
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for _, attempts in read_problem_texts(run_dir):
                for a in attempts:
                    rec = a.summary()
                    rec["code"] = a.code
                    if include_prompts:
                        rec["prompt"] = a.prompt
                    f.write(dumps(rec) + "\n")
                    n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return n
