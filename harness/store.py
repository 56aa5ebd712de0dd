"""The run store: everything a run produced, durable and resumable.

Layout of `runs/<name>/`:

- `config.yaml`      the resolved config the run was started with (for people; the DB keeps its own copy)
- `attempts.sqlite`  SQLite (WAL) database: one row per attempt, plus run metadata and sessions
- `code/<problem>/<sample>_<turn>.py`   each candidate's extracted source
- `results.jsonl`    one JSON line per attempt, in the order they were recorded (append-only)

The database is the source of truth. An attempt is committed to it first; its code file and
its `results.jsonl` line follow (flushed and fsync'd), under one lock, so the file's order is the
database's commit order (`id`). The database also keeps the SHA-256 of the whole file as the committed
attempts make it (meta `results_sha256`, updated in each attempt's transaction), so `RunStore.open` checks the
file's content, not its line count: a `kill -9` between those steps leaves a missing or torn last line, which is
cut and the missing lines appended in place; any other disagreement (a garbled, duplicated, cut or swapped line)
rewrites the file atomically from the database, in commit order. A resumed run neither repeats nor loses
finished attempts.

Resume, planning and summaries read an attempt's `Outline` (its small columns, served by the
covering index `attempts_outline`), never every prompt; the texts of an attempt are read only
where they are needed (one trajectory's history, one problem's transcripts).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

import yaml

from eval import EvalResult, Status

SCHEMA_VERSION = 2  # 2: samples count from 1, like turns (version 1 counted samples from 0)
READABLE_VERSIONS = (1, 2)  # reports and exports read these; runs resume only at SCHEMA_VERSION
DB_NAME = "attempts.sqlite"
JSONL_NAME = "results.jsonl"
CONFIG_NAME = "config.yaml"
CODE_DIR = "code"
LOCK_NAME = ".lock"
DIGEST_KEY = "results_sha256"  # meta: the SHA-256 of results.jsonl as the committed attempts make it
# What to do about a damaged database: `harness report`, `harness export` and a resume all say it.
DAMAGE_HINT = ("Nothing was changed. Restore the file from a backup, or salvage what SQLite can still read with "
               "`sqlite3 FILE .recover`.")


# Settings a resumed run may change: they alter how the run proceeds, never what an attempt means.
# The report's comparison of runs ignores the `eval.` ones for the same reason.
VOLATILE_KEYS = (
    "name", "runs_dir", "quiet", "max_concurrency", "stop_grace_s", "budget", "response_cache",
    "agent.retry", "agent.rate_limit", "agent.timeout_s", "agent.api_key_env",
    "eval.parallel_compiles", "eval.kept_builds_gib", "eval.cache_dir", "eval.log_cap_bytes",
    "eval.share_reference_timing",  # one reference timing for several candidates: the same measurement, cheaper
    # profile (issue 57): hardware counters after the verdict, a diagnostic that changes no verdict or timing
    "eval.profile", "eval.profile_ncu", "eval.profile_timeout_s", "prompt.profile_chars",
)  # fmt: skip

# keys added after runs were stored, each with the value that was the behaviour before it: a stored config without
# one differs from a new one only where the new value is another
ADDED_KEYS: dict[str, Any] = {"eval.observed_timing": False}

_SAFE = re.compile(r"[^A-Za-z0-9._+-]")  # no `=` or `,`: run names must pass through Hydra overrides as they are
_RETRIES = 3  # immutable reads repeated when a writer appears meanwhile, before a live read

_SESSIONS_SQL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    started_at REAL NOT NULL,
    finished_at REAL,
    stop_reason TEXT
);
"""
_SESSION_COLUMNS = ("id", "started_at", "finished_at", "stop_reason")


class StoreError(RuntimeError):
    """A run directory that cannot be used as asked; the message says why and what to do."""


class StoreWriteError(StoreError):
    """A write the run store could not make (a full disk, a read-only filesystem); the message names the path.
    What was committed before stays intact, so the run resumes once there is room."""


def _damaged(db_path: Path, exc: BaseException | str, where: str = "") -> StoreError:
    """One line naming a damaged database, the attempt where known, and what to do (SQLite's message can hold a
    whole column's text: only its first line is kept, without the text)."""
    detail = re.sub(r" with text '.*", "", str(exc), flags=re.S).splitlines()[0][:200] if str(exc) else type(exc).__name__
    what = f": the attempt of {where} cannot be read" if where else " and cannot be read"
    return StoreError(f"{db_path} is corrupted{what} ({detail}). {DAMAGE_HINT.replace('FILE', str(db_path))}")


def _check_intact(conn: sqlite3.Connection, db_path: Path) -> None:
    """SQLite's structural check of every page (`PRAGMA quick_check`); `StoreError` naming the damage."""
    check = conn.execute("PRAGMA quick_check").fetchall()
    if check != [("ok",)]:
        found = [line for r in check[:4] for line in str(r[0]).splitlines() if not line.startswith("*** in database")]
        raise _damaged(db_path, f"integrity check: {'; '.join(found[:3])}")


def _write_failed(path: Path, exc: BaseException) -> StoreWriteError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StoreWriteError(f"cannot write {path}: {reason}")


@dataclass
class Attempt:
    """One turn of one sample of one problem: what was asked, answered and judged.

    Samples and turns both count from 1. `status` is the result's, or `Status.AGENT_ERROR` when the
    provider refused this request (then `result` is None and `error` holds its message); a status
    given as its text becomes the member here, so an attempt read back from the store holds one too.
    `best_*` describe the best attempt of this (problem, sample) up to and including this turn.
    The fields are also the database's columns (see `_COLUMNS`), in this order.
    """

    problem_id: str
    sample: int
    turn: int
    status: Status
    prompt: list[dict[str, str]]
    reply: str = ""
    code: str | None = None
    result: EvalResult | None = None
    feedback: str = ""
    error: str = ""
    problem_hash: str = ""
    speedup: float | None = None
    best_turn: int | None = None
    best_status: Status | None = None
    best_speedup: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = 0.0  # None: the agent has no prices configured (unknown, not free)
    latency_s: float = 0.0
    model: str | None = None
    finish_reason: str | None = None
    requests: int = 0  # requests made to the provider, retries included (0 when served from the cache)
    eval_s: float = 0.0
    from_cache: bool = False
    started_at: float = field(default_factory=time.time)
    finished_at: float = field(default_factory=time.time)
    code_path: str | None = None  # relative to the run dir; set by the store
    usage_estimated: bool = False  # the provider sent no usage: tokens counted here, cost priced from them

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # ValueError for an unknown status
        self.best_status = None if self.best_status is None else Status(self.best_status)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.problem_id, self.sample, self.turn)

    def summary(self) -> dict[str, Any]:
        """The `results.jsonl` record: every field but the prompt (it grows with every turn) and the code
        (it has its own file); `correct` is added, and `reply` is null when the agent gave none."""
        out: dict[str, Any] = {}
        for name in _COLUMNS:
            if name in ("prompt", "code"):
                continue
            out[name] = getattr(self, name)
            if name == "status":
                out["correct"] = self.status is Status.CORRECT
        out["reply"] = None if self.status is Status.AGENT_ERROR else self.reply
        out["result"] = None if self.result is None else self.result.to_dict()
        return out


# The attempts table, derived from `Attempt`: a column per field, typed by its annotation.
_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Attempt))
_SQL_TYPES = {"str": "TEXT", "Status": "TEXT", "int": "INTEGER", "bool": "INTEGER", "float": "REAL"}  # else JSON text
# Columns added after a schema version was released, with the value of rows written before: a resume adds them
# (`_add_new_columns`), a reader of an older database reads the default.
_ADDED_COLUMNS = {"usage_estimated": 0}
_JSON_COLUMNS = ("prompt", "result")


def _column_sql(f: Any) -> str:
    base, _, rest = str(f.type).partition(" | ")
    nullable = rest == "None"
    default = f" DEFAULT {_ADDED_COLUMNS[f.name]}" if f.name in _ADDED_COLUMNS else ""
    return f"{f.name} {_SQL_TYPES.get(base, 'TEXT')}{'' if nullable else ' NOT NULL'}{default}"


def _add_new_columns(conn: sqlite3.Connection) -> None:
    """Give a database written before `_ADDED_COLUMNS` existed those columns (rows get their default)."""
    present = {r[1] for r in conn.execute("PRAGMA table_info(attempts)")}
    with conn:
        for f in fields(Attempt):
            if f.name in _ADDED_COLUMNS and f.name not in present:
                conn.execute(f"ALTER TABLE attempts ADD COLUMN {_column_sql(f)}")


def _select(conn: sqlite3.Connection, columns: Iterable[str]) -> str:
    """`columns` for a SELECT; a column an older database lacks is read as its default."""
    present = {r[1] for r in conn.execute("PRAGMA table_info(attempts)")}
    return ", ".join(c if c in present or c not in _ADDED_COLUMNS else f"{_ADDED_COLUMNS[c]} AS {c}" for c in columns)


_ATTEMPTS_SQL = (
    "CREATE TABLE attempts (\n    id INTEGER PRIMARY KEY,\n    session_id INTEGER NOT NULL REFERENCES sessions(id),\n"
    + "".join(f"    {_column_sql(f)},\n" for f in fields(Attempt))
    + "    CHECK (sample >= 1 AND turn >= 1),\n    UNIQUE (problem_id, sample, turn)\n);\n"
)


# The columns that grow with a run's texts; everything else is an attempt's outline.
_TEXT_COLUMNS = ("prompt", "reply", "code", "result", "feedback", "error")
_SKIPPED_TEXTS = ("prompt", "reply", "code", "feedback", "error")  # what `read_run(texts=False)` leaves out
OUTLINE_FIELDS: tuple[str, ...] = ("id", "session_id", *(c for c in _COLUMNS if c not in _TEXT_COLUMNS))


class Outline(NamedTuple):
    """An attempt without its texts (prompt, reply, code, result, feedback, error): what planning, progress and
    summaries need, small enough to hold for every attempt of a large run. `id` is the commit order."""

    id: int
    session_id: int
    problem_id: str
    sample: int
    turn: int
    status: Status
    problem_hash: str
    speedup: float | None
    best_turn: int | None
    best_status: Status | None
    best_speedup: float | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float | None
    latency_s: float
    model: str | None
    finish_reason: str | None
    requests: int
    eval_s: float
    from_cache: bool
    started_at: float
    finished_at: float
    code_path: str | None
    usage_estimated: bool


assert Outline._fields == OUTLINE_FIELDS, "Outline must list the attempt's non-text columns, in table order"

# Serves every outline read from the index alone (the table's rows hold the long prompts).
_INDEX_SQL = (
    f"CREATE INDEX IF NOT EXISTS attempts_outline ON attempts ({', '.join(OUTLINE_FIELDS[2:])}, session_id);\n"
)


def _encode(a: Attempt) -> tuple[Any, ...]:
    """An attempt as database values, in `_COLUMNS` order."""
    values = []
    for name in _COLUMNS:
        value = getattr(a, name)
        if name == "result":
            value = None if value is None else _dumps(value.to_dict())
        elif name in _JSON_COLUMNS:
            value = _dumps(value)
        elif isinstance(value, bool):
            value = int(value)
        values.append(value)
    return tuple(values)


def _decode(row: dict[str, Any], version: int) -> Attempt:
    """An attempt from a row read by column name; a version-1 row's sample is moved to count from 1."""
    d = {k: row[k] for k in _COLUMNS}
    d["prompt"] = json.loads(d["prompt"])
    d["result"] = None if d["result"] is None else EvalResult.from_dict(json.loads(d["result"]))
    d["from_cache"] = bool(d["from_cache"])
    d["usage_estimated"] = bool(d["usage_estimated"])
    if version == 1:
        d["sample"] += 1
    return Attempt(**d)


@dataclass
class Totals:
    """Usage summed over every attempt recorded so far (all sessions)."""

    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class RunRecord:
    """Everything a run's database holds, read in one transaction (see `read_run`)."""

    config: dict[str, Any]
    attempts: list[Attempt]
    sessions: list[dict[str, Any]]  # id, started_at, finished_at, stop_reason; oldest first
    session_of: dict[tuple[str, int, int], int]  # attempt key -> id of the session that recorded it
    schema_version: int


def safe_name(text: str) -> str:
    """A path component made of `text`: unsafe characters become `_`; a hash keeps it unique."""
    cleaned = _SAFE.sub("_", text).strip(".") or "_"
    if cleaned != text:
        cleaned = f"{cleaned[:80]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return cleaned


def code_path(problem_id: str, sample: int, turn: int) -> str:
    """Where a candidate's source goes, relative to the run dir: `code/<problem>/<sample>_<turn>.py`.

    A `/` in the problem id (`L1/01_square_matmul`) makes nested folders; every component is
    made path-safe, so no id can escape the run directory.
    """
    parts = [safe_name(p) for p in problem_id.split("/")]
    return "/".join([CODE_DIR, *parts, f"{sample}_{turn}.py"])


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _finite_or_none(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_differences(old: dict[str, Any], new: dict[str, Any], volatile: Iterable[str] = ()) -> list[str]:
    """Dotted keys whose values differ between two configs, ignoring keys under `volatile` prefixes (a key of
    `ADDED_KEYS` absent from either has its value from before it was added)."""
    prefixes = tuple(volatile)

    def ignored(key: str) -> bool:
        return any(key == p or key.startswith(p + ".") for p in prefixes)

    a, b = {**ADDED_KEYS, **_flatten(old)}, {**ADDED_KEYS, **_flatten(new)}
    return sorted(k for k in set(a) | set(b) if not ignored(k) and a.get(k, "<unset>") != b.get(k, "<unset>"))


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
        self._jsonl = open(run_dir / JSONL_NAME, "ab")  # noqa: SIM115 (closed in close())
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
        made = _missing_dirs(run_dir)  # a new run that cannot be made (a full disk) takes these away again
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            lock_fd = None if locked else _acquire_lock(run_dir)
        except BaseException:
            _remove_empty(made)
            raise
        try:
            db_path = run_dir / DB_NAME
            if db_path.exists():
                conn = _open_existing(db_path)
                try:
                    stored = json.loads(_meta(conn)["config"])
                    diff = config_differences(stored, config, volatile)
                    if diff:
                        _refuse_a_different_config(run_dir, stored, config, diff, conn, problem_ids)
                        with conn:  # an extension: the run goes on under the grown config
                            conn.execute("UPDATE meta SET value = ? WHERE key = 'config'", (_dumps(config),))
                        _write_atomic(run_dir / CONFIG_NAME, yaml.safe_dump(config, sort_keys=False))
                        stored = config
                    _add_new_columns(conn)
                    conn.executescript(_INDEX_SQL)  # a run recorded before the index existed gets it on resume
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
                _write_atomic(run_dir / CONFIG_NAME, yaml.safe_dump(config, sort_keys=False))
                try:
                    _create(db_path, config, harness_version)
                except sqlite3.Error as exc:  # "database or disk is full"
                    raise _write_failed(db_path, exc) from None
                conn = _open_existing(db_path)
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            if made:
                _discard_new_run(run_dir, made)
            raise
        if not durable:
            conn.execute("PRAGMA synchronous=OFF")
        store = cls(run_dir, conn, lock_fd, config, durable)
        try:
            store._reconcile_files()
        except BaseException as exc:
            store.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise _damaged(run_dir / DB_NAME, exc) from None
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
        made = _missing_dirs(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = _acquire_lock(run_dir)
        except BaseException:
            _remove_empty(made)
            raise
        try:
            yield
        finally:
            if made and not (run_dir / DB_NAME).exists():
                _discard_new_run(run_dir, made)
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
                stored = _stored_config(conn)
                diff = [] if stored is None else config_differences(stored, config, volatile)
                if diff:
                    _refuse_a_different_config(Path(run_dir), stored, config, diff, conn, problem_ids)
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
            return _stored_config(conn)
        finally:
            conn.close()

    # ------------------------------------------------------------------ access
    def attempts(self) -> list[Attempt]:
        """Every recorded attempt with its texts, ordered by problem, sample, turn (small runs and tests; a large
        run's callers read `outline` and the texts they show)."""
        with self._mutex:
            return [_decode(row, SCHEMA_VERSION) for row in _attempt_rows(self._conn)]

    def outline(self) -> list[Outline]:
        """Every recorded attempt without its texts, ordered by problem, sample, turn (read from the index)."""
        with self._mutex:
            return _outline(self._conn, SCHEMA_VERSION)

    def history(self, problem_id: str, sample: int) -> list[Attempt]:
        """The recorded attempts of one trajectory, with their texts, by turn."""
        with self._mutex:
            return [_decode(row, SCHEMA_VERSION) for row in
                    _attempt_rows(self._conn, where="problem_id = ? AND sample = ?", params=(problem_id, sample))]

    def attempts_by_id(self, ids: Iterable[int]) -> dict[int, Attempt]:
        """The attempts of these ids (from `outline`), with their texts."""
        wanted = sorted(set(ids))
        out: dict[int, Attempt] = {}
        with self._mutex:
            for start in range(0, len(wanted), 500):  # SQLite bounds the parameters of one statement
                chunk = wanted[start:start + 500]
                rows = _attempt_rows(self._conn, where=f"id IN ({', '.join('?' * len(chunk))})", params=tuple(chunk),
                                     with_id=True)
                out.update((row["id"], _decode(row, SCHEMA_VERSION)) for row in rows)
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
            raise _write_failed(self.run_dir / DB_NAME, exc) from None

    def sessions(self) -> list[dict[str, Any]]:
        """All sessions of this run, oldest first."""
        with self._mutex:
            return _sessions(self._conn)

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
        columns = ("session_id", *_COLUMNS)
        line = _line(attempt)
        with self._mutex:
            digest = self._digest.copy()
            digest.update(line)
            try:
                with self._conn:
                    self._conn.execute(
                        f"INSERT INTO attempts ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        (self._session_id, *_encode(attempt)),
                    )
                    _set_digest(self._conn, digest)
            except sqlite3.IntegrityError:
                raise StoreError(
                    f"attempt {attempt.key} is already recorded in {self.run_dir}; it is never overwritten"
                ) from None
            except sqlite3.OperationalError as exc:  # "database or disk is full", a read-only file
                raise _write_failed(self.run_dir / DB_NAME, exc) from None
            # committed: a failure below leaves a file or line that the next `open` writes again
            self._digest = digest
            if attempt.code is not None:
                _write_atomic(self.run_dir / attempt.code_path, attempt.code, durable=self._durable)
            try:
                self._jsonl.write(line)
                self._jsonl.flush()
                if self._durable:
                    os.fsync(self._jsonl.fileno())
            except OSError as exc:
                self._reopen_jsonl()  # drop what the failed write left buffered: the repair appends the line
                raise _write_failed(self.run_dir / JSONL_NAME, exc) from None

    def _reopen_jsonl(self) -> None:
        """A fresh append handle on `results.jsonl`, discarding the old one's unwritten buffer."""
        try:
            os.close(self._jsonl.fileno())  # the buffer is never flushed into a file that had no room for it
        except OSError:
            pass
        try:
            self._jsonl.close()
        except (OSError, ValueError):
            pass
        self._jsonl = open(self.run_dir / JSONL_NAME, "ab")  # noqa: SIM115

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
        digest = _file_digest(path)
        with self._mutex:
            recorded = _meta(self._conn).get(DIGEST_KEY)
            missing_code = [o for o in _outline(self._conn, SCHEMA_VERSION)
                            if o.code_path and not (self.run_dir / o.code_path).exists()]
        if digest.hexdigest() != recorded:
            self._repair_results(path)
            digest = _file_digest(path)
            with self._mutex, self._conn:  # a run recorded before the digest existed gets it here
                _set_digest(self._conn, digest)
        self._digest = digest
        if missing_code:
            for a in self.attempts_by_id(o.id for o in missing_code).values():
                if a.code is not None and a.code_path:
                    _write_atomic(self.run_dir / a.code_path, a.code)

    def _repair_results(self, path: Path) -> None:
        """Rewrite `results.jsonl` from the database, in commit order. Where the file is the database's first
        lines and then at most a torn line (a crash between commit and write), the torn line is cut and the rest
        appended in place; any other disagreement replaces the file whole (written aside, then renamed)."""
        with self._mutex:
            ids = [row[0] for row in self._conn.execute("SELECT id FROM attempts ORDER BY id")]
        kept, offset, torn_tail = _matching_prefix(path, self._lines(ids))
        if torn_tail:
            with open(path, "rb+") as f:
                f.truncate(offset)
            self._reopen_jsonl()
            for line in self._lines(ids[kept:]):
                self._jsonl.write(line)
            self._jsonl.flush()
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
            raise _write_failed(path, exc) from None
        self._reopen_jsonl()

    def _lines(self, ids: list[int]) -> Iterator[bytes]:
        """The `results.jsonl` lines of these attempts, in this order, read from the database 500 at a time."""
        for start in range(0, len(ids), 500):
            chunk = self.attempts_by_id(ids[start:start + 500])
            for attempt_id in ids[start:start + 500]:
                yield _line(chunk[attempt_id])


def _line(attempt: Attempt) -> bytes:
    """An attempt's `results.jsonl` line, as written and as checked."""
    return (_dumps(attempt.summary()) + "\n").encode("utf-8")


def _set_digest(conn: sqlite3.Connection, digest: Any) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (DIGEST_KEY, digest.hexdigest()))


def _file_digest(path: Path) -> Any:
    """The SHA-256 of `path`'s bytes (a hashlib object, to be continued as lines are appended)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest


def _matching_prefix(path: Path, expected: Iterator[bytes]) -> tuple[int, int, bool]:
    """How many of `path`'s first lines are the `expected` ones, their size in bytes, and whether all that follows
    them is one torn line (no newline: a crash mid-write) or nothing; False when a whole line disagrees."""
    kept, offset = 0, 0
    with open(path, "rb") as f:
        for line in f:
            if line != next(expected, None):
                return kept, offset, not line.endswith(b"\n")
            kept, offset = kept + 1, offset + len(line)
    return kept, offset, True


# ---------------------------------------------------------------------- reading
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
        version = _check_version(conn, db_path, READABLE_VERSIONS, hint)
        _check_intact(conn, db_path)
        config = json.loads(_meta(conn)["config"])
        conn.execute("BEGIN")  # one read transaction: attempts and sessions from the same snapshot
        attempts, session_of = [], {}
        skip = () if texts else _SKIPPED_TEXTS
        for row in _attempt_rows(conn, with_session=True, skip=skip):  # decoded as they stream in
            a = _decode_or_refuse(row, version, db_path)
            attempts.append(a)
            session_of[a.key] = row["session_id"]
        sessions = _sessions(conn)
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise _damaged(db_path, exc) from None
    except (KeyError, ValueError) as exc:
        raise StoreError(f"{db_path} has no valid run metadata ({exc}). {hint}") from None
    finally:
        conn.close()
    return RunRecord(config, attempts, sessions, session_of, version)


def _decode_or_refuse(row: dict[str, Any], version: int, db_path: Path) -> Attempt:
    try:
        return _decode(row, version)
    except (KeyError, TypeError, ValueError) as exc:
        where = f"problem {row.get('problem_id')!r}, sample {row.get('sample')}, turn {row.get('turn')}"
        raise _damaged(db_path, exc, where) from None


_BLANK = {"prompt": "[]", "reply": "", "code": None, "result": None, "feedback": "", "error": ""}


def _attempt_rows(conn: sqlite3.Connection, *, with_session: bool = False, with_id: bool = False, where: str = "",
                  params: tuple[Any, ...] = (), skip: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """Attempt rows by problem, sample, turn, streamed; the text columns in `skip` are not read (left empty)."""
    wanted = tuple(c for c in _COLUMNS if c not in skip)
    columns = (*(("id",) if with_id else ()), *(("session_id",) if with_session else ()), *wanted)
    condition = f" WHERE {where}" if where else ""
    cur = conn.execute(f"SELECT {_select(conn, columns)} FROM attempts{condition} ORDER BY problem_id, sample, turn",
                       params)
    blank = {c: _BLANK[c] for c in skip}
    for row in cur:
        yield {**blank, **dict(zip(columns, row))}


def _outline(conn: sqlite3.Connection, version: int) -> list[Outline]:
    """Every attempt's outline by problem, sample, turn; the index serves it where it exists (an older run's
    database, read read-only, may lack it: then the table is scanned)."""
    has_index = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'attempts_outline'").fetchone()
    hint = " INDEXED BY attempts_outline" if has_index else ""
    shift = 1 if version == 1 else 0  # version 1 counted samples from 0
    cur = conn.execute(f"SELECT {_select(conn, OUTLINE_FIELDS)} FROM attempts{hint} ORDER BY problem_id, sample, turn")
    sample = OUTLINE_FIELDS.index("sample")
    status, best_status = OUTLINE_FIELDS.index("status"), OUTLINE_FIELDS.index("best_status")
    flags = (OUTLINE_FIELDS.index("from_cache"), OUTLINE_FIELDS.index("usage_estimated"))
    out = []
    for row in cur:
        row = list(row)
        row[sample] += shift
        row[status] = Status(row[status])
        if row[best_status] is not None:
            row[best_status] = Status(row[best_status])
        for i in flags:
            row[i] = bool(row[i])
        out.append(Outline(*row))
    return out


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
            version = _check_version(conn, db_path, READABLE_VERSIONS, "Nothing was changed.")
            conn.execute("BEGIN")
            problem, group = None, []
            for row in _attempt_rows(conn, skip=() if results else ("result",)):
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
        raise _damaged(db_path, exc) from None


def _sessions(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute(f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions ORDER BY id")
    return [dict(zip(_SESSION_COLUMNS, r)) for r in rows]


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
                    f.write(_dumps(rec) + "\n")
                    n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return n


# ---------------------------------------------------------------------- helpers
def _acquire_lock(run_dir: Path) -> int:
    """The locked descriptor of `run_dir`'s lock file. A lock won on a file that a run giving up its start-up
    removed meanwhile (`_discard_new_run`) locks nothing another process can see: taken again on the file there now."""
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


def _connect(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(db_path, check_same_thread=False, isolation_level="DEFERRED", timeout=30)


# Config keys a finished run may grow along (`harness run` with more turns, samples or problems extends it).
GROWABLE_KEYS = ("turns", "samples", "problems.spec", "problems.limit")


def _refuse_a_different_config(run_dir: Path, stored: dict[str, Any], new: dict[str, Any], diff: list[str],
                               conn: sqlite3.Connection, problem_ids: Iterable[str] | None) -> None:
    """Raise `StoreError` unless `new` merely extends the run recorded under `stored`."""
    why = _extension_refusal(stored, new, diff, conn, problem_ids)
    if why:
        raise StoreError(
            f"{run_dir} holds a run with a different config ({', '.join(diff[:8])}{', ...' if len(diff) > 8 else ''}"
            f" differ{why}). Resume it with the same settings, or start a new run with another name=."
        )


def _extension_refusal(stored: dict[str, Any], new: dict[str, Any], diff: list[str], conn: sqlite3.Connection,
                       problem_ids: Iterable[str] | None) -> str:
    """Why `new` does not merely extend the run recorded under `stored` ("" when it does)."""
    if not conn.execute("SELECT 1 FROM attempts LIMIT 1").fetchone():
        diff = [k for k in diff if not _fixes_the_agent(k)]
    if not set(diff) <= set(GROWABLE_KEYS):
        return ("; only turns, samples and the problem selection may change, and only grow; the agent's settings "
                "too while no attempt is recorded")
    for key in ("turns", "samples"):
        if isinstance(new.get(key), int) and isinstance(stored.get(key), int) and new[key] < stored[key]:
            return f"; {key} may grow, not shrink: {stored[key]} -> {new[key]}"
    if any(key.startswith("problems.") for key in diff):
        attempted = {row[0] for row in conn.execute("SELECT DISTINCT problem_id FROM attempts")}
        left_out = sorted(attempted - set(problem_ids or ()))
        if left_out:
            return f"; the new selection leaves out {len(left_out)} attempted problem(s), e.g. {left_out[0]}"
    return ""


def _fixes_the_agent(key: str) -> bool:
    """Whether `key` is one of the agent's settings other than its kind (`agent.model`, `agent.base_url`, `model.*`):
    a run that has recorded nothing yet may change them on resume, so that a model name or endpoint the provider
    refused (exit 6 or 5: "fix it and resume") is fixed in place; nothing recorded was made under the old value."""
    return key.startswith(("agent.", "model.")) and key != "agent.kind"


def _stored_config(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The run's recorded config; None when the database cannot be read (`open` reports it)."""
    try:
        return json.loads(_meta(conn)["config"])
    except (sqlite3.Error, OSError, KeyError, ValueError):
        return None


def _create(db_path: Path, config: dict[str, Any], harness_version: str) -> None:
    """Build the database under a temporary name, then rename it into place (a crash leaves no half-made DB)."""
    tmp = db_path.with_name(f".{db_path.name}.tmp")
    for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
        stale.unlink(missing_ok=True)
    conn = _connect(tmp)
    try:
        with conn:
            conn.executescript(_SESSIONS_SQL + _ATTEMPTS_SQL + _INDEX_SQL)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("harness_version", harness_version),
                    ("created_at", str(time.time())),
                    ("config", _dumps(config)),
                    (DIGEST_KEY, hashlib.sha256().hexdigest()),
                ],
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
    os.replace(tmp, db_path)


def _check_version(conn: sqlite3.Connection, db_path: Path, accepted: tuple[int, ...], hint: str) -> int:
    """The database's schema version, if `accepted`; a `StoreError` that says what the file is otherwise."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version in accepted:
        return version
    if version == 0:
        raise StoreError(f"{db_path} is empty or corrupt: it is not a run-store database. {hint}")
    if version in READABLE_VERSIONS:  # readable, but not written by this harness any more
        raise StoreError(
            f"{db_path} was written by an older harness (run-store schema version {version}, samples counted "
            f"from 0); this harness continues only version {SCHEMA_VERSION} runs. `harness report` and "
            f"`harness export` still read it; to go on, start a new run with another name=. {hint}"
        )
    raise StoreError(
        f"{db_path} was written with run-store schema version {version}; this harness reads versions "
        f"{', '.join(map(str, READABLE_VERSIONS))}. {hint}"
    )


def _open_existing(db_path: Path) -> sqlite3.Connection:
    """Open and check an existing database for writing, changing nothing yet; raise `StoreError` if unusable."""
    hint = "Nothing was changed. Move the directory away or choose another name=."
    try:
        conn = _connect(db_path)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {db_path}: {exc}. {hint}") from None
    try:
        _check_version(conn, db_path, (SCHEMA_VERSION,), hint)
        _check_intact(conn, db_path)
        json.loads(_meta(conn)["config"])
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise _damaged(db_path, exc) from None
    except (KeyError, ValueError) as exc:
        conn.close()
        raise StoreError(f"{db_path} has no valid run metadata ({exc}). {hint}") from None
    except BaseException:
        conn.close()
        raise
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def _write_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """Write `path` whole or not at all; a failure (a full disk) leaves no temporary file and raises
    `StoreWriteError` naming the path."""
    tmp = path.with_name(f".{path.name}.tmp")
    made = _missing_dirs(path.parent)
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
        _remove_empty(made)  # no empty code/<problem>/ folder is left for a file that was never written
        raise _write_failed(path, exc) from None


def _missing_dirs(folder: Path) -> list[Path]:
    """The folders of `folder`'s path that do not exist yet, outermost first (what a `mkdir -p` would make)."""
    return [p for p in (folder, *folder.parents) if not p.exists()][::-1]


def _remove_empty(made: list[Path]) -> None:
    """Take back folders made for a write that failed, innermost first, as long as they are empty."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # not empty: something else was written there meanwhile
            return


def _discard_new_run(run_dir: Path, made: list[Path]) -> None:
    """A new run whose creation failed (a full disk) leaves nothing: the files this call made, then its folders."""
    tmp = run_dir / f".{DB_NAME}.tmp"
    for name in (LOCK_NAME, CONFIG_NAME, JSONL_NAME, DB_NAME, tmp.name, f"{tmp.name}-wal", f"{tmp.name}-shm",
                 f"{tmp.name}-journal", f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
        (run_dir / name).unlink(missing_ok=True)
    _remove_empty(made)
