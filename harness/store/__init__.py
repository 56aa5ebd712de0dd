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

One job per module: `schema` (the files, the attempt and its columns, the SQL), `errors`, `configs` (which configs
may resume or grow a run), `files` (`results.jsonl`, atomic writes, the lock), `run_store` (`RunStore`, the writer)
and `reading` (readers that change nothing).
"""

from harness.store.configs import ADDED_KEYS, GROWABLE_KEYS, VOLATILE_KEYS, config_differences
from harness.store.errors import DAMAGE_HINT, StoreError, StoreWriteError
from harness.store.reading import export_jsonl, read_problem_texts, read_run
from harness.store.run_store import RunStore
from harness.store.schema import (CODE_DIR, CONFIG_NAME, DB_NAME, JSONL_NAME, OUTLINE_FIELDS, READABLE_VERSIONS,
                                  SCHEMA_VERSION, Attempt, Outline, RunRecord, Totals, code_path, safe_name)

__all__ = ["ADDED_KEYS", "CODE_DIR", "CONFIG_NAME", "DAMAGE_HINT", "DB_NAME", "GROWABLE_KEYS", "JSONL_NAME",
           "OUTLINE_FIELDS", "READABLE_VERSIONS", "SCHEMA_VERSION", "VOLATILE_KEYS", "Attempt", "Outline", "RunRecord",
           "RunStore", "StoreError", "StoreWriteError", "Totals", "code_path", "config_differences", "export_jsonl",
           "read_problem_texts", "read_run", "safe_name"]
