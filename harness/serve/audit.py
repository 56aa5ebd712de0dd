"""The audit trail: every served evaluation is an attempt of `runs_dir/serve-<name>/`, in the run store's schema,
so `harness report` and `harness export` work on a served study.

Each answer is sample n of its problem (counting on from what the store already holds) at the request's turn,
with the request id in `finish_reason`; the prompt is not known to the server and is stored empty.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

from eval import EvalResult, Status
from harness.cli import VERSION
from harness.store import VOLATILE_KEYS, Attempt, RunStore, safe_name
from problems import Problem


class AuditTrail:
    """One served study's run store, open for this server's lifetime (a second server of the same name is refused)."""

    def __init__(self, config: dict[str, Any], name: str) -> None:
        self.run_dir = Path(config["runs_dir"]) / f"serve-{safe_name(name)}"
        config["name"] = self.run_dir.name
        config["serve"] = {"name": name}  # tells `harness report` the problems are those clients asked about
        self._store = RunStore.open(self.run_dir, config, harness_version=VERSION,
                                    volatile=(*VOLATILE_KEYS, "executor", "problems"))
        self._store.begin_session()
        self._lock = threading.Lock()
        self._samples: collections.Counter[str] = collections.Counter()
        for a in self._store.attempts():
            self._samples[a.problem_id] = max(self._samples[a.problem_id], a.sample)

    def record(self, *, request_id: str, problem: Problem, turn: int, reply: str, code: str | None,
               result: EvalResult, feedback: str, speedup: float | None, eval_s: float, started: float) -> None:
        with self._lock:
            self._samples[problem.id] += 1
            sample = self._samples[problem.id]
        attempt = Attempt(problem_id=problem.id, sample=sample, turn=turn, status=result.status, prompt=[],
                          reply=reply, code=code, result=result, feedback=feedback, speedup=speedup,
                          problem_hash=problem.source_hash, eval_s=eval_s, started_at=started,
                          finished_at=time.time(), finish_reason=f"request {request_id}")
        if result.status is Status.CORRECT:
            attempt.best_turn, attempt.best_status, attempt.best_speedup = turn, result.status, speedup
        self._store.record(attempt)

    def close(self) -> None:
        self._store.end_session("stopped")
        self._store.close()
