"""Reading a run directory for a report, strictly read-only, also while the run is still writing
(the database is read by `harness.store.read_run`, the one reader of run databases).

The run's problem selection is resolved again from its config (`problems.spec`, `problems.limit`)
so that problems without any attempt still count, as failures. Where that fails (a file spec that
moved, a dataset not available offline) the report falls back to the attempted problems and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.store import Attempt, read_run


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
    attempts: list[Attempt]  # without their texts (prompt, reply, code, feedback, error): see `load_run`
    problems: list[ProblemInfo]  # the selection (plus any attempted problem outside it), in order
    wall_s: float  # summed over sessions; an unfinished session counts up to its last attempt
    in_progress: bool  # the last session has not finished (still running, or killed)
    warnings: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int:
        """Samples planned per problem (at least as many as were recorded)."""
        recorded = max((a.sample for a in self.attempts), default=0)  # samples count from 1
        return max(int(self.config.get("samples") or 1), recorded)

    @property
    def turns(self) -> int:
        """Turns planned per sample (at least as many as were recorded)."""
        recorded = max((a.turn for a in self.attempts), default=0)
        return max(int(self.config.get("turns") or 1), recorded)


def load_run(run_dir: str | Path) -> RunData:
    """Read one run directory without changing anything in it; `StoreError` if it is not a run."""
    run_dir = Path(run_dir)
    record = read_run(run_dir, texts=False)  # the transcripts' texts are read per problem (report.transcripts)
    config, attempts, sessions, session_of = record.config, record.attempts, record.sessions, record.session_of
    problems, warnings = _selection(config, attempts)
    wall_s, in_progress = _wall_time(sessions, attempts, session_of)
    if in_progress:
        warnings.append("the run has not finished (still running, or stopped early): unfinished work counts as failed")
    elif sessions and sessions[-1]["stop_reason"] != "finished":
        warnings.append(f"the run stopped early ({sessions[-1]['stop_reason']}): unfinished work counts as failed")
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
    if config.get("serve"):  # a served study (`harness serve`): its problems are the ones clients asked about
        try:
            levels = {p.id: p.level for p in _resolve(str(spec), None)}
        except Exception:  # noqa: BLE001 (levels are a label here; the problems are the attempted ones anyway)
            levels = {}
        return [ProblemInfo(pid, levels.get(pid, "custom")) for pid in attempted], warnings
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
    from problems import select_problems

    problems = select_problems(spec)
    return problems if limit is None else problems[: int(limit)]
