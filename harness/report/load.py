"""Reading a run directory for a report, strictly read-only, also while the run is still writing.

The database is opened through SQLite's `mode=ro` URI. A read-only connection to a WAL database
that no writer has open would leave fresh `-wal`/`-shm` files behind, so when there is no `-wal`
file the database is read as `immutable` instead, and the read is repeated in the ordinary
read-only mode if a writer appeared meanwhile (its `-wal` file shows up, or the main file changed).

The run's problem selection is resolved again from its config (`problems.spec`, `problems.limit`)
so that problems without any attempt still count, as failures. Where that fails (a file spec that
moved, a dataset not available offline) the report falls back to the attempted problems and says so.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from eval.result import EvalResult
from harness.store import CONFIG_NAME, DB_NAME, SCHEMA_VERSION, Attempt, StoreError

_ATTEMPT_FIELDS = {f.name for f in fields(Attempt)}
_RETRIES = 3


@dataclass(frozen=True)
class ProblemInfo:
    """A problem of a run's selection: its id and level (`unknown` when it could not be resolved)."""

    id: str
    level: str


@dataclass
class RunData:
    """Everything a report needs from one run directory."""

    run_dir: Path
    name: str
    config: dict[str, Any]
    attempts: list[Attempt]
    problems: list[ProblemInfo]  # the selection (plus any attempted problem outside it), in order
    wall_s: float  # summed over sessions; an unfinished session counts up to its last attempt
    in_progress: bool  # the last session has not finished (still running, or killed)
    warnings: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int:
        """Samples planned per problem (at least as many as were recorded)."""
        recorded = max((a.sample + 1 for a in self.attempts), default=0)
        return max(int(self.config.get("samples") or 1), recorded)

    @property
    def turns(self) -> int:
        """Turns planned per sample (at least as many as were recorded)."""
        recorded = max((a.turn for a in self.attempts), default=0)
        return max(int(self.config.get("turns") or 1), recorded)


def load_run(run_dir: str | Path) -> RunData:
    """Read one run directory without changing anything in it; `StoreError` if it is not a run."""
    run_dir = Path(run_dir)
    db_path = run_dir / DB_NAME
    if not db_path.is_file():
        hint = f" (it has {CONFIG_NAME} but no database)" if (run_dir / CONFIG_NAME).exists() else ""
        raise StoreError(f"{run_dir} is not a run directory: no {DB_NAME}{hint}")
    config, attempts, sessions, session_of = _read_consistent(db_path)
    problems, warnings = _selection(config, attempts)
    wall_s, in_progress = _wall_time(sessions, attempts, session_of)
    if in_progress:
        warnings.append("the run has not finished (still running, or stopped early): unfinished work counts as failed")
    return RunData(
        run_dir=run_dir,
        name=str(config.get("name") or run_dir.name),
        config=config,
        attempts=attempts,
        problems=problems,
        wall_s=wall_s,
        in_progress=in_progress,
        warnings=warnings,
    )


# ------------------------------------------------------------------------ database
def _read_consistent(db_path: Path) -> tuple[dict[str, Any], list[Attempt], list[dict[str, Any]], dict[tuple, int]]:
    """Read the database; retry in live mode when a writer started during an immutable read."""
    for _ in range(_RETRIES):
        wal = Path(f"{db_path}-wal")
        immutable = not wal.exists()
        before = _stat(db_path)
        data = _read(db_path, immutable=immutable)
        if not immutable or (not wal.exists() and _stat(db_path) == before):
            return data
    return _read(db_path, immutable=False)


def _stat(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _read(db_path: Path, *, immutable: bool) -> tuple[dict[str, Any], list[Attempt], list[dict[str, Any]], dict]:
    uri = f"{db_path.resolve().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}"
    hint = "Nothing was changed."
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)  # transactions are explicit below
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {db_path} read-only: {exc}. {hint}") from None
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{db_path} was written with run-store schema version {version}; this harness reads version "
                f"{SCHEMA_VERSION}. {hint}"
            )
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        config = json.loads(meta["config"])
        conn.execute("BEGIN")  # one read transaction: attempts and sessions from the same snapshot
        cur = conn.execute("SELECT * FROM attempts ORDER BY problem_id, sample, turn")
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
        sessions = [
            dict(zip(("id", "started_at", "finished_at", "stop_reason"), r))
            for r in conn.execute("SELECT id, started_at, finished_at, stop_reason FROM sessions ORDER BY id")
        ]
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{db_path} cannot be read ({exc}). {hint}") from None
    except (KeyError, ValueError) as exc:
        raise StoreError(f"{db_path} has no valid run metadata ({exc}). {hint}") from None
    finally:
        conn.close()
    attempts, session_of = [], {}
    for row in rows:
        d = dict(zip(names, row))
        try:
            d["prompt"] = json.loads(d["prompt"])
            d["result"] = None if d["result"] is None else EvalResult.from_dict(json.loads(d["result"]))
        except (KeyError, TypeError, ValueError) as exc:
            where = f"problem {d['problem_id']!r}, sample {d['sample']}, turn {d['turn']}"
            raise StoreError(f"{db_path}: the attempt of {where} cannot be read ({exc}). {hint}") from None
        d["from_cache"] = bool(d["from_cache"])
        session_of[(d["problem_id"], d["sample"], d["turn"])] = d["session_id"]
        attempts.append(Attempt(**{k: v for k, v in d.items() if k in _ATTEMPT_FIELDS}))
    return config, attempts, sessions, session_of


def _wall_time(
    sessions: list[dict[str, Any]], attempts: list[Attempt], session_of: dict[tuple, int]
) -> tuple[float, bool]:
    """Summed session wall time; an unfinished session ends at its last recorded attempt."""
    last: dict[int, float] = {}
    for a in attempts:
        sid = session_of[a.key]
        last[sid] = max(last.get(sid, a.finished_at), a.finished_at)
    total = 0.0
    for s in sessions:
        end = s["finished_at"] if s["finished_at"] is not None else last.get(s["id"], s["started_at"])
        total += max(0.0, end - s["started_at"])
    in_progress = bool(sessions) and sessions[-1]["finished_at"] is None
    return total, in_progress


# ----------------------------------------------------------------------- selection
def _selection(config: dict[str, Any], attempts: list[Attempt]) -> tuple[list[ProblemInfo], list[str]]:
    """The run's problems: its selection resolved again, plus attempted problems outside it."""
    warnings: list[str] = []
    attempted = list(dict.fromkeys(a.problem_id for a in attempts))
    cfg = config.get("problems") or {}
    spec = cfg.get("spec")
    try:
        resolved = _resolve(str(spec), cfg.get("limit"))
    except Exception as exc:  # noqa: BLE001 (any failure to re-resolve: fall back, and say so)
        warnings.append(
            f"the problem selection {spec!r} could not be resolved here ({type(exc).__name__}: {exc}); "
            f"only the {len(attempted)} attempted problem(s) are counted, so unattempted ones are missing"
        )
        return [ProblemInfo(pid, "unknown") for pid in attempted], warnings
    infos = [ProblemInfo(p.id, p.level) for p in resolved]
    hashes = {p.id: p.source_hash for p in resolved}
    known = set(hashes)
    extra = [pid for pid in attempted if pid not in known]
    if extra:
        warnings.append(
            f"{len(extra)} attempted problem(s) are not in the selection {spec!r} as resolved now "
            f"({', '.join(extra[:5])}{', ...' if len(extra) > 5 else ''}); they are counted too"
        )
        infos += [ProblemInfo(pid, "unknown") for pid in extra]
    changed = sorted(
        {a.problem_id for a in attempts if a.problem_id in known and a.problem_hash != hashes[a.problem_id]}
    )
    if changed:
        warnings.append(
            f"{len(changed)} problem source(s) changed since the run ({', '.join(changed[:5])}"
            f"{', ...' if len(changed) > 5 else ''}); levels come from the current files"
        )
    return infos, warnings


def _resolve(spec: str, limit: Any) -> list[Any]:
    """The problems `harness run` selected for this spec and limit (imported lazily: loaders are heavy)."""
    from problems.select import select_problems

    problems = select_problems(spec)
    return problems if limit is None else problems[: int(limit)]
