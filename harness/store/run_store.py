"""`RunStore`: one run directory opened for writing, its lock held; attempts committed to the database first, then
their code file and `results.jsonl` line, and both files repaired from the database on open."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from harness.store.configs import VOLATILE_KEYS, config_differences, recorded_config, refuse_a_different_config
from harness.store.errors import StoreError, check_intact, damaged, write_failed
from harness.store.files import (acquire_lock, discard_new_run, file_digest, jsonl_line, matching_prefix, missing_dirs,
                                 remove_empty, write_atomic)
from harness.store.schema import (COLUMNS, CONFIG_NAME, DB_NAME, DIGEST_KEY, INDEX_SQL, JSONL_NAME, SCHEMA_VERSION,
                                  Attempt, Outline, Totals, add_new_columns, attempt_rows, check_version, code_path,
                                  connect, create_database, decode, dumps, encode, meta, outlines, sessions_in,
                                  set_digest)


def _finite_or_none(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


class RunStore:
    """Durable record of one run directory. Thread-safe; one process at a time (a file lock)."""

    def __init__(self, run_dir: Path, conn: sqlite3.Connection, lock_fd: int | None, config: dict[str, Any],
                 durable: bool = True) -> None:
        self.run_dir = run_dir
        self._durable = durable
        self.config = config
        self._conn = conn
        self._lock_fd = lock_fd  # None: the caller holds the lock (`RunStore.locked`) and releases it
        self._mutex = threading.Lock()
        self._session_id: int | None = None
        self._jsonl = _append_handle(run_dir / JSONL_NAME)
        self._digest = hashlib.sha256()  # of results.jsonl as the committed attempts make it (set by the repair)

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(
        cls,
        run_dir: str | Path,
        config: dict[str, Any],
        *,
        volatile: Iterable[str] = VOLATILE_KEYS,
        harness_version: str = "",
        problem_ids: Iterable[str] | None = None,
        durable: bool = True,
        locked: bool = False,
    ) -> "RunStore":
        """Create `run_dir`, or reopen it to resume or extend.

        Resuming checks, before changing anything: the database is intact, was written by this
        schema version, and the config matches the one the run started with (keys under a
        `volatile` prefix, such as budgets, may change). A config that only grows the run (more
        `turns` or `samples`, or a problem selection, `problem_ids`, holding every problem already
        attempted) extends it: the stored config becomes the new one and every attempt is kept.
        Any failure raises `StoreError`. `durable=False` skips every fsync: only for writing synthetic runs
        (`harness bench store`), where a crash loses nothing of value. `locked=True`: the caller holds the
        directory's lock already (`RunStore.locked`).
        """
        run_dir = Path(run_dir)
        made = missing_dirs(run_dir)  # a new run that cannot be made (a full disk) takes these away again
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            lock_fd = None if locked else acquire_lock(run_dir)
        except BaseException:
            remove_empty(made)
            raise
        try:
            db_path = run_dir / DB_NAME
            if db_path.exists():
                conn = _open_existing(db_path)
                try:
                    stored = json.loads(meta(conn)["config"])
                    diff = config_differences(stored, config, volatile)
                    if diff:
                        refuse_a_different_config(run_dir, stored, config, diff, conn, problem_ids)
                        with conn:  # an extension: the run goes on under the grown config
                            conn.execute("UPDATE meta SET value = ? WHERE key = 'config'", (dumps(config),))
                        write_atomic(run_dir / CONFIG_NAME, yaml.safe_dump(config, sort_keys=False))
                        stored = config
                    add_new_columns(conn)
                    conn.executescript(INDEX_SQL)  # a run recorded before the index existed gets it on resume
                except BaseException:
                    conn.close()
                    raise
                config = stored
            else:
                if (run_dir / JSONL_NAME).exists() and (run_dir / JSONL_NAME).stat().st_size > 0:
                    raise StoreError(
                        f"{run_dir} has {JSONL_NAME} but no {DB_NAME}; it is not a run directory this harness "
                        f"can resume. Nothing was changed; choose another name=."
                    )
                write_atomic(run_dir / CONFIG_NAME, yaml.safe_dump(config, sort_keys=False))
                try:
                    create_database(db_path, config, harness_version)
                except sqlite3.Error as exc:  # "database or disk is full"
                    raise write_failed(db_path, exc) from None
                conn = _open_existing(db_path)
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            if made:
                discard_new_run(run_dir, made)
            raise
        if not durable:
            conn.execute("PRAGMA synchronous=OFF")
        store = cls(run_dir, conn, lock_fd, config, durable)
        try:
            store._reconcile_files()
        except BaseException as exc:
            store.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise damaged(run_dir / DB_NAME, exc) from None
            raise
        return store

    @staticmethod
    @contextmanager
    def locked(run_dir: str | Path) -> Iterator[None]:
        """Hold `run_dir`'s lock (made as `mkdir -p` would) from the start of `harness run`, before its evaluator
        starts (a minute on a loaded machine), so that a second run of the same name is refused at once, not after its
        own start-up; `open(locked=True)` then works under it. A new run whose start-up failed before its database
        was made leaves nothing behind. Raises `StoreError` while another process holds the lock."""
        run_dir = Path(run_dir)
        made = missing_dirs(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = acquire_lock(run_dir)
        except BaseException:
            remove_empty(made)
            raise
        try:
            yield
        finally:
            if made and not (run_dir / DB_NAME).exists():
                discard_new_run(run_dir, made)
            os.close(fd)

    @staticmethod
    def check_resume(run_dir: str | Path, config: dict[str, Any], *, volatile: Iterable[str] = VOLATILE_KEYS,
                     problem_ids: Iterable[str] | None = None) -> None:
        """Raise the `StoreError` that `open` would for a run recorded under a config `config` cannot resume or
        extend, without creating, locking or changing anything (so the caller can refuse before starting work)."""
        nearest = Path(run_dir)
        while not nearest.exists() and nearest != nearest.parent:
            nearest = nearest.parent
        if not os.access(nearest, os.W_OK):  # read-only filesystem or folder (root too: EROFS)
            raise StoreError(f"cannot write the run directory {run_dir}: {nearest} is not writable")
        db_path = Path(run_dir) / DB_NAME
        if not db_path.exists():
            return
        try:
            conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
            try:
                stored = recorded_config(conn)
                diff = [] if stored is None else config_differences(stored, config, volatile)
                if diff:
                    refuse_a_different_config(Path(run_dir), stored, config, diff, conn, problem_ids)
            finally:
                conn.close()
        except (sqlite3.Error, OSError):
            return  # unreadable here: `open` reports it

    @staticmethod
    def stored_config(run_dir: str | Path) -> dict[str, Any] | None:
        """The config the run in `run_dir` was recorded under, read without changing anything; None when there is
        no run there or its database cannot be read (`open` then says why). A resume starts from it."""
        db_path = Path(run_dir) / DB_NAME
        if not db_path.is_file():
            return None
        try:
            conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        except sqlite3.Error:
            return None
        try:
            return recorded_config(conn)
        finally:
            conn.close()

    # ------------------------------------------------------------------ access
    def attempts(self) -> list[Attempt]:
        """Every recorded attempt with its texts, ordered by problem, sample, turn (small runs and tests; a large
        run's callers read `outline` and the texts they show)."""
        with self._mutex:
            return [decode(row, SCHEMA_VERSION) for row in attempt_rows(self._conn)]

    def outline(self) -> list[Outline]:
        """Every recorded attempt without its texts, ordered by problem, sample, turn (read from the index)."""
        with self._mutex:
            return outlines(self._conn, SCHEMA_VERSION)

    def history(self, problem_id: str, sample: int) -> list[Attempt]:
        """The recorded attempts of one trajectory, with their texts, by turn."""
        with self._mutex:
            return [decode(row, SCHEMA_VERSION) for row in
                    attempt_rows(self._conn, where="problem_id = ? AND sample = ?", params=(problem_id, sample))]

    def attempts_by_id(self, ids: Iterable[int]) -> dict[int, Attempt]:
        """The attempts of these ids (from `outline`), with their texts."""
        wanted = sorted(set(ids))
        out: dict[int, Attempt] = {}
        with self._mutex:
            for start in range(0, len(wanted), 500):  # SQLite bounds the parameters of one statement
                chunk = wanted[start:start + 500]
                rows = attempt_rows(self._conn, where=f"id IN ({', '.join('?' * len(chunk))})", params=tuple(chunk),
                                     with_id=True)
                out.update((row["id"], decode(row, SCHEMA_VERSION)) for row in rows)
        return out

    def problem_hashes(self) -> set[tuple[str, str]]:
        """Each (problem id, problem source hash) pair recorded."""
        with self._mutex:
            return set(self._conn.execute("SELECT DISTINCT problem_id, problem_hash FROM attempts INDEXED BY "
                                          "attempts_outline"))

    def totals(self) -> Totals:
        """Usage summed over all recorded attempts (responses served from the cache cost nothing)."""
        with self._mutex:
            row = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0), "
                "COALESCE(SUM(cached_tokens),0), COALESCE(SUM(cost_usd),0) FROM attempts WHERE from_cache = 0"
            ).fetchone()
            n = self._conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
        return Totals(attempts=n, input_tokens=row[1], output_tokens=row[2], cached_tokens=row[3], cost_usd=row[4])

    # ---------------------------------------------------------------- sessions
    def begin_session(self) -> int:
        """Start a session (one invocation of the run); attempts recorded after this belong to it."""
        with self._mutex, self._conn:
            cur = self._conn.execute("INSERT INTO sessions (started_at) VALUES (?)", (time.time(),))
            self._session_id = int(cur.lastrowid)
        return self._session_id

    def end_session(self, stop_reason: str) -> None:
        """Close the current session with why it stopped (`finished`, `budget: ...`, `auth: ...`)."""
        if self._session_id is None:
            return
        try:
            with self._mutex, self._conn:
                self._conn.execute(
                    "UPDATE sessions SET finished_at = ?, stop_reason = ? WHERE id = ?",
                    (time.time(), stop_reason, self._session_id),
                )
        except sqlite3.OperationalError as exc:
            raise write_failed(self.run_dir / DB_NAME, exc) from None

    def sessions(self) -> list[dict[str, Any]]:
        """All sessions of this run, oldest first."""
        with self._mutex:
            return sessions_in(self._conn)

    # ------------------------------------------------------------------ record
    def record(self, attempt: Attempt) -> None:
        """Commit one attempt, then write its code file and its `results.jsonl` line (fsync'd).

        Raises `StoreError` if this (problem, sample, turn) was already recorded.
        """
        if attempt.sample < 1 or attempt.turn < 1:
            raise ValueError(f"samples and turns count from 1, got sample {attempt.sample}, turn {attempt.turn}")
        if self._session_id is None:
            raise RuntimeError("record() before begin_session()")
        if attempt.code is not None:
            attempt.code_path = code_path(attempt.problem_id, attempt.sample, attempt.turn)
        attempt.speedup = _finite_or_none(attempt.speedup)
        attempt.best_speedup = _finite_or_none(attempt.best_speedup)
        columns = ("session_id", *COLUMNS)
        line = jsonl_line(attempt)
        with self._mutex:
            digest = self._digest.copy()
            digest.update(line)
            try:
                with self._conn:
                    self._conn.execute(
                        f"INSERT INTO attempts ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        (self._session_id, *encode(attempt)),
                    )
                    set_digest(self._conn, digest)
            except sqlite3.IntegrityError:
                raise StoreError(
                    f"attempt {attempt.key} is already recorded in {self.run_dir}; it is never overwritten"
                ) from None
            except sqlite3.OperationalError as exc:  # "database or disk is full", a read-only file
                raise write_failed(self.run_dir / DB_NAME, exc) from None
            # committed: a failure below leaves a file or line that the next `open` writes again
            self._digest = digest
            if attempt.code is not None:
                write_atomic(self.run_dir / attempt.code_path, attempt.code, durable=self._durable)
            try:
                _write_all(self._jsonl, line)
                if self._durable:
                    os.fsync(self._jsonl.fileno())
            except OSError as exc:
                self._reopen_jsonl()  # drop what the failed write left buffered: the repair appends the line
                raise write_failed(self.run_dir / JSONL_NAME, exc) from None

    def _reopen_jsonl(self) -> None:
        """A fresh append handle on `results.jsonl` (after the file was replaced, cut or refused a write). The handle
        is unbuffered, so no unwritten bytes can follow it, and its descriptor is closed exactly once: closing it
        twice (once by number, once through the file object, as this did) closes whatever file another thread opened
        under that number in between, and a store's next write then failed with EBADF."""
        try:
            self._jsonl.close()
        except OSError:
            pass
        self._jsonl = _append_handle(self.run_dir / JSONL_NAME)

    def close(self) -> None:
        """Release the database, the jsonl file and the directory lock."""
        with self._mutex:
            try:
                self._jsonl.close()
            except OSError:  # a line the disk had no room for: the next open appends it
                pass
            self._conn.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- repair
    def _reconcile_files(self) -> None:
        """Make `results.jsonl` and the code files agree with the database after a crash or damage.

        A clean resume reads the file once and hashes it (C speed, no parsing) against the digest the database
        keeps; only a file that disagrees is compared line by line with the database's rows (`_repair_results`).
        A missing code file is written back.
        """
        path = self.run_dir / JSONL_NAME
        digest = file_digest(path)
        with self._mutex:
            recorded = meta(self._conn).get(DIGEST_KEY)
            missing_code = [o for o in outlines(self._conn, SCHEMA_VERSION)
                            if o.code_path and not (self.run_dir / o.code_path).exists()]
        if digest.hexdigest() != recorded:
            self._repair_results(path)
            digest = file_digest(path)
            with self._mutex, self._conn:  # a run recorded before the digest existed gets it here
                set_digest(self._conn, digest)
        self._digest = digest
        if missing_code:
            for a in self.attempts_by_id(o.id for o in missing_code).values():
                if a.code is not None and a.code_path:
                    write_atomic(self.run_dir / a.code_path, a.code)

    def _repair_results(self, path: Path) -> None:
        """Rewrite `results.jsonl` from the database, in commit order. Where the file is the database's first
        lines and then at most a torn line (a crash between commit and write), the torn line is cut and the rest
        appended in place; any other disagreement replaces the file whole (written aside, then renamed)."""
        with self._mutex:
            ids = [row[0] for row in self._conn.execute("SELECT id FROM attempts ORDER BY id")]
        kept, offset, torn_tail = matching_prefix(path, self._lines(ids))
        if torn_tail:
            with open(path, "rb+") as f:
                f.truncate(offset)
            self._reopen_jsonl()
            for line in self._lines(ids[kept:]):
                _write_all(self._jsonl, line)
            os.fsync(self._jsonl.fileno())
            return
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                for line in self._lines(ids):
                    f.write(line)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise write_failed(path, exc) from None
        self._reopen_jsonl()

    def _lines(self, ids: list[int]) -> Iterator[bytes]:
        """The `results.jsonl` lines of these attempts, in this order, read from the database 500 at a time."""
        for start in range(0, len(ids), 500):
            chunk = self.attempts_by_id(ids[start:start + 500])
            for attempt_id in ids[start:start + 500]:
                yield jsonl_line(chunk[attempt_id])


def _open_existing(db_path: Path) -> sqlite3.Connection:
    """Open and check an existing database for writing, changing nothing yet; raise `StoreError` if unusable."""
    hint = "Nothing was changed. Move the directory away or choose another name=."
    try:
        conn = connect(db_path)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {db_path}: {exc}. {hint}") from None
    try:
        check_version(conn, db_path, (SCHEMA_VERSION,), hint)
        check_intact(conn, db_path)
        json.loads(meta(conn)["config"])
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise damaged(db_path, exc) from None
    except (KeyError, ValueError) as exc:
        conn.close()
        raise StoreError(f"{db_path} has no valid run metadata ({exc}). {hint}") from None
    except BaseException:
        conn.close()
        raise
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _append_handle(path: Path) -> io.FileIO:
    """An unbuffered append handle: each write reaches the file at once, and nothing is left to discard."""
    return open(path, "ab", buffering=0)  # noqa: SIM115 (closed in close() or _reopen_jsonl())


def _write_all(handle: io.FileIO, data: bytes) -> None:
    """All of `data`, however many writes the OS takes (a full disk raises `OSError` with a part written, which the
    next open's repair cuts)."""
    view = memoryview(data)
    while view:
        written = handle.write(view)
        if not written:
            raise OSError(f"a write to {handle.name} took no bytes")
        view = view[written:]
