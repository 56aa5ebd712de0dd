"""The report's transcripts: one compressed file per (run, problem) beside the page, loaded when it is opened.

`leaderboard.html` embeds only an index (each run's problems, their best status and file), so the page stays
small however many attempts the runs hold. Each file, `transcripts/<run>/<problem>.js`, is a script that calls
`khTranscript(run, problem, "<base64 of gzip'd JSON>")`: a script, not JSON, because a page opened from disk
(file://) may load scripts beside it but may not fetch files. Its JSON holds each distinct text once (prompts
repeat across turns). The texts are read one problem at a time (`harness.store.read_problem_texts`).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from eval import Status
from harness.report import plots, profiles  # profile (issue 57): profiles
from harness.report.load import RunData
from harness.report.metrics import RunMetrics, rank
from harness.store import Attempt, read_problem_texts

DIR = "transcripts"
_CALL = re.compile(r'^khTranscript\((\d+),(\d+),"([A-Za-z0-9+/=]*)"\);\n$')


def file_name(run: int, problem: int) -> str:
    """A transcript file's path relative to the page."""
    return f"{DIR}/{run}/{problem}.js"


def index(runs: Sequence[RunData], metrics: Sequence[RunMetrics]) -> dict[str, Any]:
    """What the page embeds: per run, each problem's id, level, best status and transcript file (null: no attempt)."""
    out_runs = []
    for i, (run, m) in enumerate(zip(runs, metrics)):
        best: dict[str, Attempt] = {}
        for a in run.attempts:
            if a.problem_id not in best or rank(a.result) > rank(best[a.problem_id].result):
                best[a.problem_id] = a
        problems = []
        for j, p in enumerate(run.problems):
            top = best.get(p.id)
            problems.append({"id": p.id, "level": p.level, "status": "no attempt" if top is None else top.status,
                             "file": None if top is None else file_name(i, j)})  # fmt: skip
        out_runs.append({"name": m.name, "problems": problems})
    return {"statuses": sorted(plots.STATUS_STYLE), "runs": out_runs}


def payload(attempts: Sequence[Attempt]) -> dict[str, Any]:
    """One problem's attempts for the viewer, with each distinct text stored once in `strings`."""
    strings: list[str] = []
    refs: dict[str, int] = {}

    def ref(text: str | None) -> int | None:
        if text is None:
            return None
        if text not in refs:
            refs[text] = len(strings)
            strings.append(text)
        return refs[text]

    return {"strings": strings, "attempts": [_attempt(a, ref) for a in attempts]}


def _attempt(a: Attempt, ref: Callable[[str | None], int | None]) -> dict[str, Any]:
    r = a.result
    return {
        "sample": a.sample,
        "turn": a.turn,
        "status": a.status,
        "speedup": r.speedup if r is not None and r.is_correct and r.timing_meaningful else None,
        "input_tokens": a.input_tokens,
        "output_tokens": a.output_tokens,
        "cost_usd": a.cost_usd,
        "latency_s": a.latency_s,
        "eval_s": a.eval_s,
        "from_cache": a.from_cache,
        "prompt": [[str(m.get("role", "?")), ref(str(m.get("content", "")))] for m in a.prompt],
        "reply": None if a.status is Status.AGENT_ERROR else ref(a.reply),
        "code": ref(a.code),
        "feedback": ref(a.feedback),
        "error": ref(a.error) if a.error else None,
        "reason": ref(r.reason) if r is not None and r.reason else None,
        "flags": list(r.flags) if r is not None else [],
        "profile": profiles.viewer(r.profile) if r is not None else None,  # profile (issue 57)
    }


def script(run: int, problem: int, data: dict[str, Any]) -> str:
    """A transcript file's text: base64 holds no character that could end the string or the script."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    packed = base64.b64encode(gzip.compress(raw, compresslevel=1, mtime=0)).decode("ascii")  # level 1: speed over size
    return f'khTranscript({run},{problem},"{packed}");\n'


def read_script(text: str) -> tuple[int, int, dict[str, Any]]:
    """The run, problem and data of a transcript file (the inverse of `script`)."""
    m = _CALL.match(text)
    if not m:
        raise ValueError("not a transcript file")
    return int(m[1]), int(m[2]), json.loads(gzip.decompress(base64.b64decode(m[3])))


def write_transcripts(runs: Sequence[RunData], out_dir: Path) -> int:
    """Write every attempted problem's transcript file under `out_dir/transcripts/` (each atomically); how many.
    The results come from the runs as the report read them; an attempt recorded since is left out."""
    n = 0
    for i, run in enumerate(runs):
        position = {p.id: j for j, p in enumerate(run.problems)}
        known = {a.key: a.result for a in run.attempts}
        for problem_id, texts in read_problem_texts(run.run_dir, results=False):
            j = position.get(problem_id)
            attempts = [a for a in texts if a.key in known]
            for a in attempts:
                a.result = known[a.key]
            if j is None or not attempts:  # recorded after the report read the run: not in the index
                continue
            path = out_dir / file_name(i, j)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            try:
                tmp.write_text(script(i, j, payload(attempts)), encoding="ascii")
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            n += 1
    return n
