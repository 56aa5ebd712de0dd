"""The run database's schema: the files of a run directory, the attempt (one row), its outline (the row without its
texts), and the SQL that makes, reads and versions the tables. One module knows the columns."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

from eval import EvalResult, Status
from harness.store.errors import StoreError

SCHEMA_VERSION = 2  # 2: samples count from 1, like turns (version 1 counted samples from 0)
READABLE_VERSIONS = (1, 2)  # reports and exports read these; runs resume only at SCHEMA_VERSION
DB_NAME = "attempts.sqlite"
JSONL_NAME = "results.jsonl"
CONFIG_NAME = "config.yaml"
CODE_DIR = "code"
LOCK_NAME = ".lock"
DIGEST_KEY = "results_sha256"  # meta: the SHA-256 of results.jsonl as the committed attempts make it

_SAFE = re.compile(r"[^A-Za-z0-9._+-]")  # no `=` or `,`: run names must pass through Hydra overrides as they are

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


@dataclass
class Attempt:
    """One turn of one sample of one problem: what was asked, answered and judged.

    Samples and turns both count from 1. `status` is the result's, or `Status.AGENT_ERROR` when the
    provider refused this request (then `result` is None and `error` holds its message); a status
    given as its text becomes the member here, so an attempt read back from the store holds one too.
    `best_*` describe the best attempt of this (problem, sample) up to and including this turn.
    The fields are also the database's columns (see `COLUMNS`), in this order.
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
        for name in COLUMNS:
            if name in ("prompt", "code"):
                continue
            out[name] = getattr(self, name)
            if name == "status":
                out["correct"] = self.status is Status.CORRECT
        out["reply"] = None if self.status is Status.AGENT_ERROR else self.reply
        out["result"] = None if self.result is None else self.result.to_dict()
        return out


# The attempts table, derived from `Attempt`: a column per field, typed by its annotation.
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Attempt))
_SQL_TYPES = {"str": "TEXT", "Status": "TEXT", "int": "INTEGER", "bool": "INTEGER", "float": "REAL"}  # else JSON text
# Columns added after a schema version was released, with the value of rows written before: a resume adds them
# (`add_new_columns`), a reader of an older database reads the default.
_ADDED_COLUMNS = {"usage_estimated": 0}
_JSON_COLUMNS = ("prompt", "result")


def _column_sql(f: Any) -> str:
    base, _, rest = str(f.type).partition(" | ")
    nullable = rest == "None"
    default = f" DEFAULT {_ADDED_COLUMNS[f.name]}" if f.name in _ADDED_COLUMNS else ""
    return f"{f.name} {_SQL_TYPES.get(base, 'TEXT')}{'' if nullable else ' NOT NULL'}{default}"


def add_new_columns(conn: sqlite3.Connection) -> None:
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
SKIPPED_TEXTS = ("prompt", "reply", "code", "feedback", "error")  # what `read_run(texts=False)` leaves out
OUTLINE_FIELDS: tuple[str, ...] = ("id", "session_id", *(c for c in COLUMNS if c not in _TEXT_COLUMNS))


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
INDEX_SQL = (
    f"CREATE INDEX IF NOT EXISTS attempts_outline ON attempts ({', '.join(OUTLINE_FIELDS[2:])}, session_id);\n"
)


def encode(a: Attempt) -> tuple[Any, ...]:
    """An attempt as database values, in `COLUMNS` order."""
    values = []
    for name in COLUMNS:
        value = getattr(a, name)
        if name == "result":
            value = None if value is None else dumps(value.to_dict())
        elif name in _JSON_COLUMNS:
            value = dumps(value)
        elif isinstance(value, bool):
            value = int(value)
        values.append(value)
    return tuple(values)


def decode(row: dict[str, Any], version: int) -> Attempt:
    """An attempt from a row read by column name; a version-1 row's sample is moved to count from 1."""
    d = {k: row[k] for k in COLUMNS}
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


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def set_digest(conn: sqlite3.Connection, digest: Any) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (DIGEST_KEY, digest.hexdigest()))


_BLANK = {"prompt": "[]", "reply": "", "code": None, "result": None, "feedback": "", "error": ""}


def attempt_rows(conn: sqlite3.Connection, *, with_session: bool = False, with_id: bool = False, where: str = "",
                  params: tuple[Any, ...] = (), skip: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """Attempt rows by problem, sample, turn, streamed; the text columns in `skip` are not read (left empty)."""
    wanted = tuple(c for c in COLUMNS if c not in skip)
    columns = (*(("id",) if with_id else ()), *(("session_id",) if with_session else ()), *wanted)
    condition = f" WHERE {where}" if where else ""
    cur = conn.execute(f"SELECT {_select(conn, columns)} FROM attempts{condition} ORDER BY problem_id, sample, turn",
                       params)
    blank = {c: _BLANK[c] for c in skip}
    for row in cur:
        yield {**blank, **dict(zip(columns, row))}


def outlines(conn: sqlite3.Connection, version: int) -> list[Outline]:
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


def sessions_in(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute(f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions ORDER BY id")
    return [dict(zip(_SESSION_COLUMNS, r)) for r in rows]


def connect(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(db_path, check_same_thread=False, isolation_level="DEFERRED", timeout=30)


def create_database(db_path: Path, config: dict[str, Any], harness_version: str) -> None:
    """Build the database under a temporary name, then rename it into place (a crash leaves no half-made DB)."""
    tmp = db_path.with_name(f".{db_path.name}.tmp")
    for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
        stale.unlink(missing_ok=True)
    conn = connect(tmp)
    try:
        with conn:
            conn.executescript(_SESSIONS_SQL + _ATTEMPTS_SQL + INDEX_SQL)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("harness_version", harness_version),
                    ("created_at", str(time.time())),
                    ("config", dumps(config)),
                    (DIGEST_KEY, hashlib.sha256().hexdigest()),
                ],
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
    os.replace(tmp, db_path)


def check_version(conn: sqlite3.Connection, db_path: Path, accepted: tuple[int, ...], hint: str) -> int:
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


def meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())
