"""The `replay` agent: serves the replies an earlier run recorded, for the same (problem, sample, turn).

Replays are free and deterministic, so a run can be re-scored under a different evaluator
setting, or a loop change tested, without calling a model again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from agents.base import ABSTENTION_REASON, AgentError, AgentResponse, ConfigError, Message, Usage
from eval import Status
from agents.settings import ReplaySettings

RESULTS_FILE = "results.jsonl"
_KEYS = ("problem_id", "sample", "turn")

Key = tuple[str, int, int]


class ReplayAgent:
    """Loads `path` (a run directory holding results.jsonl, or a JSONL file) at construction.

    Each line is a JSON object with at least problem_id, sample, turn and reply (null when the
    attempt had no reply). Two lines for one key with different replies are ambiguous and refused;
    a null reply never hides a recorded one. Samples and turns count from 1; a file with a sample 0
    was written when samples counted from 0, and its samples are read as one higher.
    """

    def __init__(self, settings: ReplaySettings) -> None:
        p = Path(str(settings.path))
        self.path = p / RESULTS_FILE if p.is_dir() else p
        self._replies, self._models, self._abstained = _load(self.path)
        self.name = f"replay:{self.path}"

    def __repr__(self) -> str:
        return f"ReplayAgent(path={str(self.path)!r}, entries={len(self._replies)})"

    def __len__(self) -> int:
        return len(self._replies)

    def recorded_keys(self) -> set[tuple[str, int, int]]:
        """(problem_id, sample, turn) of every recorded attempt."""
        return set(self._replies)

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """The recorded reply for (problem_id, sample, turn); a clear `AgentError` when there is none."""
        start = time.perf_counter()
        key = (str(problem_id), int(sample), int(turn))
        if key not in self._replies:
            raise AgentError(
                f"replay: {self.path} has no reply for problem {problem_id!r}, sample {sample}, turn {turn} "
                f"(it holds {len(self._replies)} attempts)"
            )
        text = self._replies[key]
        if text is None:
            raise AgentError(f"replay: the recorded attempt problem {problem_id!r}, sample {sample}, turn {turn} has no reply")
        model = self._models.get(key)
        return AgentResponse(
            text=text,
            usage=Usage(),
            cost_usd=0.0,
            latency_s=time.perf_counter() - start,
            model=f"replay:{model}" if model else "replay",
            abstained=key in self._abstained,
        )


def _load(path: Path) -> tuple[dict[Key, str | None], dict[Key, str], set[Key]]:
    """Replies and models by (problem_id, sample, turn), and the attempts where the agent abstained."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"replay: cannot read {path} ({exc.strerror or exc}); give a run directory or a .jsonl file") from None
    replies: dict[Key, str | None] = {}
    models: dict[Key, str] = {}
    abstained: set[Key] = set()
    where: dict[Key, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"replay: {path}:{lineno} is not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"replay: {path}:{lineno} is not a JSON object")
        missing = [k for k in (*_KEYS, "reply") if k not in row]
        if missing:
            raise ConfigError(f"replay: {path}:{lineno} lacks {', '.join(missing)} (each line needs {', '.join(_KEYS)}, reply)")
        try:
            key = (str(row["problem_id"]), int(row["sample"]), int(row["turn"]))
        except (TypeError, ValueError):
            raise ConfigError(f"replay: {path}:{lineno} has a non-integer sample or turn") from None
        reply = row["reply"]
        if reply is not None and not isinstance(reply, str):
            raise ConfigError(f"replay: {path}:{lineno} has a reply that is not a string")
        if key in replies and reply is None:
            continue  # a failed attempt never hides a recorded reply
        if replies.get(key) is not None and replies[key] != reply:
            raise ConfigError(
                f"replay: {path}:{lineno} and line {where[key]} give different replies for problem {key[0]!r}, "
                f"sample {key[1]}, turn {key[2]}"
            )
        replies[key], where[key] = reply, lineno
        if row.get("model"):
            models[key] = str(row["model"])
        reason = (row.get("result") or {}).get("reason", "") if isinstance(row.get("result"), dict) else ""
        if row.get("status") == Status.SKIPPED and str(reason).startswith(ABSTENTION_REASON):
            abstained.add(key)
    if not replies:
        raise ConfigError(f"replay: {path} holds no attempts")
    if any(key[1] == 0 for key in replies):  # the old convention: samples from 0
        replies = {(p, s + 1, t): r for (p, s, t), r in replies.items()}
        models = {(p, s + 1, t): m for (p, s, t), m in models.items()}
        abstained = {(p, s + 1, t) for (p, s, t) in abstained}
    return replies, models, abstained
