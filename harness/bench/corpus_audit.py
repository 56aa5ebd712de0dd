"""`harness bench corpus`: the false-reject audit of a published kernel corpus (CUDA-L1's KernelBench kernels).

The corpus is `{"1": [{"task_id", "ref_code", "custom_code", "score"}, ...], "2": [...], "3": [...]}` (levels as
keys). Each entry is judged on two sides, and each side appends one JSON line per entry to `--out` as it finishes
(flushed and fsynced), so a second invocation with the same `--out` goes on where the first stopped: a device call
of a few minutes does a part, `--time-budget` ending it cleanly.
  kb    KernelBench's `eval_kernel_against_ref`, correctness only (a false-reject audit needs only its accept or
        reject), every entry in a fresh process, `--jobs` at once;
  ours  the default (strict) evaluator; the reference is the entry's `ref_code`; chunks of entries go through
        `Evaluator.evaluate_many`, every build queued ahead (`prebuild`), in order.
`--table` prints, per level, the counts and every entry KernelBench accepts and we reject, with a class taken from
our result's status, step and reason alone (`reject_class`). The target: no `harness` rejects.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.kernelbench_side_by_side import kernelbench_missing, run_child, stand_ins
from harness.progress import Tally

KB_ENTRY_TIMEOUT_S = 240.0  # one KernelBench entry, its build included (our own build limit is 180 s)
KB_TRIALS = 5  # KernelBench's correctness trials, as its own scripts run them
CLASSES = ("by design", "integrity", "correctness", "harness")
# Reasons of our refusals of work that is not the candidate's own kernels (eval's static and own-kernel checks):
# a rule KernelBench does not have.
_BY_DESIGN = ("defines no kernel of its own", "uses torch.compile", "none of the candidate's own kernels ran",
              "(eval.min_own_time_fraction)")
_NO_CANDIDATE = ("", "None")  # how the published file writes an entry without a kernel


class CorpusError(ValueError):
    """The corpus file or a request about it is unusable; the message is one line."""


@dataclass(frozen=True)
class Entry:
    """One published candidate and the KernelBench reference it was written for."""

    level: int
    task_id: int
    ref_code: str
    custom_code: str | None  # None: the corpus publishes no kernel for this task

    @property
    def key(self) -> str:
        return f"L{self.level}/{self.task_id}"


def load_corpus(path: str | Path, levels: list[int], limit: int | None = None) -> list[Entry]:
    """The entries of `levels`, in the file's order (the first `limit` of them)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise CorpusError(f"--corpus {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise CorpusError(f"--corpus {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CorpusError(f"--corpus {path}: expected an object of levels ({{\"1\": [...], ...}})")
    entries = []
    for level in levels:
        items = data.get(str(level))
        if not isinstance(items, list):
            raise CorpusError(f"--corpus {path}: no list of entries for level {level} (levels there: "
                              f"{', '.join(sorted(data)) or 'none'})")
        for n, item in enumerate(items):
            if not (isinstance(item, dict) and isinstance(item.get("task_id"), int)
                    and isinstance(item.get("ref_code"), str)):
                raise CorpusError(f"--corpus {path}: level {level} entry {n} lacks an int task_id or a ref_code")
            code = item.get("custom_code")
            code = code if isinstance(code, str) and code.strip() not in _NO_CANDIDATE else None
            entries.append(Entry(level, item["task_id"], item["ref_code"], code))
    return entries[:limit] if limit is not None else entries


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CorpusError(f"--levels: comma-separated level numbers, like 1,2,3 (got {text!r})") from None
    if not levels:
        raise CorpusError("--levels: name at least one level")
    return levels


class Results:
    """One side's JSON lines in `--out`: what is done, and each new record appended durably (thread-safe)."""

    def __init__(self, out: Path, side: str):
        self.path = out / f"{side}.jsonl"
        self._lock = threading.Lock()

    def done(self) -> dict[str, dict[str, Any]]:
        """The records by entry key; a line cut short by a killed run is not one (its entry runs again)."""
        records: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "key" in record:
                    records[record["key"]] = record
        return records

    def append(self, record: dict[str, Any]) -> None:
        with self._lock, open(self.path, "a+b") as fh:
            cut = False  # a line a killed run left unfinished: the new one starts on a line of its own
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                cut = fh.read(1) != b"\n"
            fh.write((b"\n" if cut else b"") + json.dumps(record).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())


def one_line(text: str, n: int = 300) -> str:
    flat = " / ".join(part.strip() for part in text.strip().splitlines() if part.strip())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


# -- KernelBench's side ------------------------------------------------------------------------------------------

def kb_record(entry: Entry, verdict: str, reason: str, seconds: float) -> dict[str, Any]:
    """A KernelBench line: `verdict` is correct, incorrect, compile_error, runtime_error, timeout or error (its
    process failed: not a judgement of the candidate)."""
    return {"key": entry.key, "level": entry.level, "task_id": entry.task_id, "side": "kb", "verdict": verdict,
            "accepted": verdict == "correct", "reason": one_line(reason), "seconds": round(seconds, 1)}


def kb_child(corpus: str, level: str, task_id: str) -> dict[str, Any]:
    """In a fresh process: KernelBench's correctness check of one entry (its defaults: fp32, seed 42, CUDA)."""
    stand_ins()
    import torch
    from kernelbench.eval import eval_kernel_against_ref

    (entry,) = [e for e in load_corpus(corpus, [int(level)]) if e.task_id == int(task_id)]
    r = eval_kernel_against_ref(entry.ref_code, entry.custom_code, seed_num=42, num_correct_trials=KB_TRIALS,
                                measure_performance=False, verbose=False, device=torch.device("cuda:0"),
                                backend="cuda", precision=torch.float32)
    if r is None:
        return {"verdict": "error", "reason": "KernelBench asked for a retry (a lock-file error while building)"}
    meta = r.metadata
    if r.correctness:
        return {"verdict": "correct", "reason": f"correct {meta.get('correctness_trials', '')}".strip()}
    for verdict, name, detail in (("compile_error", "compilation_error_name", "compilation_error"),
                                  ("runtime_error", "runtime_error_name", "runtime_error"),
                                  ("incorrect", "correctness_issue_name", "correctness_issue")):
        if name in meta or detail in meta:
            return {"verdict": verdict, "reason": f"{meta.get(name, '')}: {meta.get(detail, '')}"}
    return {"verdict": "compile_error" if not r.compiled else "incorrect", "reason": str(meta)[:300]}


def _kb_one(entry: Entry, corpus: str, kernelbench_src: str, jobs: int) -> dict[str, Any]:
    t0 = time.monotonic()
    folder = tempfile.mkdtemp(prefix="kh-kbaudit-")  # its own extensions folder: entries reuse extension names
    try:
        env = {"TORCH_EXTENSIONS_DIR": folder, "MAX_JOBS": str(max(1, len(os.sched_getaffinity(0)) // jobs))}
        got = run_child(__name__, ["--kb-child", corpus, str(entry.level), str(entry.task_id)], kernelbench_src,
                        timeout=KB_ENTRY_TIMEOUT_S, env=env)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if "verdict" in got:
        return kb_record(entry, got["verdict"], got["reason"], time.monotonic() - t0)
    verdict = "timeout" if got.get("timeout") else "error"
    last = (got["error"].strip().splitlines() or [""])[-1]  # a traceback's last line names the exception
    return kb_record(entry, verdict, f"KernelBench's process: {last}", time.monotonic() - t0)


def run_kb(entries: list[Entry], out: Path, corpus: str, kernelbench_src: str, jobs: int,
           deadline: float | None) -> int:
    """Judge every pending entry with KernelBench, `jobs` at once; none starts after `deadline`."""
    results = Results(out, "kb")
    done = results.done()
    pending = [e for e in entries if e.custom_code is not None and e.key not in done]
    print(f"kb: {len(pending)} to judge ({len(done)} done before), {jobs} at once", file=sys.stderr, flush=True)
    tally = Tally(len(pending))

    def one(entry: Entry) -> None:
        record = _kb_one(entry, corpus, kernelbench_src, jobs)
        results.append(record)
        print(tally.step(), "kb", entry.key, record["verdict"], file=sys.stderr, flush=True)

    started = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running: set[Future[None]] = set()
        for entry in pending:
            if len(running) >= jobs:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    future.result()  # a failure of ours (writing the file) ends the command
            if deadline is not None and time.monotonic() >= deadline:
                break
            running.add(pool.submit(one, entry))
            started += 1
        for future in running:
            future.result()
    _stopped_note("kb", len(pending) - started)
    return 0


def _stopped_note(side: str, left: int) -> None:
    if left:
        print(f"{side}: time budget spent, {left} left for the next invocation with the same --out", file=sys.stderr)


# -- our side ----------------------------------------------------------------------------------------------------

def ours_record(entry: Entry, result: Any) -> dict[str, Any]:
    """Our line: the verdict, the step it came from (the last step that ran; `source` when the source alone decided),
    and the trials the candidate never finished (it raised, crashed or hung on inputs or sizes it was never shown)."""
    from eval import UNFINISHED

    unfinished = [f"inputs off the published distribution ({name})"
                  for name, state in result.distributions.items() if state == UNFINISHED]
    unfinished += [f"a hidden workload ({name})" for name, state in result.workloads.items() if state == UNFINISHED]
    status = result.status.value
    return {"key": entry.key, "level": entry.level, "task_id": entry.task_id, "side": "ours", "status": status,
            "step": next(reversed(result.phase_seconds), "source"), "reason": one_line(result.reason, 1000),
            "unfinished": unfinished, "error": "" if status == "correct" else result.error[-1500:],
            "seconds": round(result.eval_seconds, 1), "device": result.device,
            # e.g. its load_inline build failed and it caught the error: why "none of its own kernels ran"
            "build_note": next((one_line(f[len("build: "):], 300) for f in result.flags if f.startswith("build: ")), "")}


def _problem(entry: Entry) -> Any:
    from problems import problem_from_source

    return problem_from_source(entry.ref_code, name=f"L{entry.level}_{entry.task_id}", problem_id=entry.key,
                               level=f"level{entry.level}")


def run_ours(entries: list[Entry], out: Path, device: str, backend: str, deadline: float | None) -> int:
    """Judge every pending entry with our default (strict) evaluator; no chunk starts after `deadline`."""
    from eval import Evaluator, Job
    from harness.presets import preset_config
    from problems import ProblemError

    results = Results(out, "ours")
    done = results.done()
    pending = [e for e in entries if e.custom_code is not None and e.key not in done]
    print(f"ours: {len(pending)} to evaluate ({len(done)} done before)", file=sys.stderr, flush=True)
    if not pending:
        return 0
    if deadline is not None and time.monotonic() >= deadline:
        _stopped_note("ours", len(pending))
        return 0
    tally = Tally(len(pending))
    jobs: list[tuple[Entry, Any]] = []
    for entry in pending:
        try:
            jobs.append((entry, Job(_problem(entry), entry.custom_code or "", backend)))
        except ProblemError as exc:  # our loader refused KernelBench's own reference: a harness fault
            results.append({"key": entry.key, "level": entry.level, "task_id": entry.task_id, "side": "ours",
                            "status": "reference_error", "step": "reference", "reason": one_line(str(exc)),
                            "unfinished": [], "error": "", "seconds": 0.0, "device": ""})
            print(tally.step(), "ours", entry.key, "reference_error", file=sys.stderr, flush=True)
    try:
        evaluator = Evaluator(preset_config("default", device=device, cache_dir=None))
    except RuntimeError as exc:
        print(f"ours: the evaluator cannot start: {exc}")
        return 2
    started = 0
    with evaluator as ev:
        for _, job in jobs:  # every build queued now, in order; closing cancels those not started
            ev.prebuild(job.problem, job.source, job.backend)
        size = 2 * ev.workers  # a chunk keeps every worker busy; the budget is checked between chunks
        for chunk in (jobs[i:i + size] for i in range(0, len(jobs), size)):
            if deadline is not None and time.monotonic() >= deadline:
                break

            def on_result(i: int, result: Any, chunk: list[tuple[Entry, Any]] = chunk) -> None:
                results.append(ours_record(chunk[i][0], result))
                print(tally.step(), "ours", chunk[i][0].key, result.status.value, file=sys.stderr, flush=True)

            ev.evaluate_many([job for _, job in chunk], on_result=on_result)
            started += len(chunk)
    _stopped_note("ours", len(jobs) - started)
    return 0


# -- the table ---------------------------------------------------------------------------------------------------

def reject_class(record: dict[str, Any]) -> str:
    """Why we reject what KernelBench accepts, from our record alone:
    by design   a rule KernelBench lacks: no own kernel, torch.compile, or the candidate raised, crashed or hung on
                inputs or sizes it was never shown (off the published distribution, a hidden workload);
    integrity   a hostile behaviour one of our checks names;
    correctness our comparison found wrong values;
    harness     anything else (builds, files, limits, timeouts, crashes): what a correct kernel should never hit."""
    status, reason = record["status"], record.get("reason", "")
    if status == "incorrect":
        return "correctness"
    if status == "rejected":
        return "by design" if any(phrase in reason for phrase in _BY_DESIGN) else "integrity"
    if status in ("runtime_error", "crash", "timeout") and record.get("unfinished"):
        return "by design"
    return "harness"


def why_rejected(record: dict[str, Any]) -> str:
    """The table's reason column: our reason, the trials never finished, and the build's note (a build that failed
    and a candidate that fell back is why "none of its own kernels ran")."""
    where = f" (on {'; '.join(record['unfinished'])})" if record.get("unfinished") else ""
    built = f" [build: {record['build_note']}]" if record.get("build_note") else ""
    return one_line(record.get("reason", "") + where + built, 400).replace("|", "\\|")


def table(entries: list[Entry], out: Path, levels: list[int]) -> str:
    """The markdown summary of what `out` holds for `entries`, a row and a section per level of `levels`."""
    kb, ours = Results(out, "kb").done(), Results(out, "ours").done()
    lines = [f"# False-reject audit: KernelBench beside our default evaluator ({len(entries)} entries)", "",
             "| level | entries | no kernel published | KB judged | KB accepts | KB failed to judge | ours judged | "
             "ours correct | KB accepts, we reject | by design | integrity | correctness | harness | "
             "we accept, KB rejects |", "|---|" + "---:|" * 13]
    sections, total_harness, total_pending = [], 0, 0
    for level in levels:
        mine = [e for e in entries if e.level == level]
        judged = [e for e in mine if e.custom_code is not None]
        k = [kb[e.key] for e in judged if e.key in kb]
        o = [ours[e.key] for e in judged if e.key in ours]
        both = [(e, kb[e.key], ours[e.key]) for e in judged if e.key in kb and e.key in ours]
        false = [(e, ours_rec) for e, kb_rec, ours_rec in both
                 if kb_rec["accepted"] and ours_rec["status"] != "correct"]
        classes = Counter(reject_class(r) for _, r in false)
        we_only = [e.key for e, kb_rec, ours_rec in both if not kb_rec["accepted"] and ours_rec["status"] == "correct"]
        failed = [r for r in k if r["verdict"] in ("error", "timeout")]
        total_harness += classes["harness"]
        lines.append(f"| {level} | {len(mine)} | {len(mine) - len(judged)} | {len(k)} | "
                     f"{sum(r['accepted'] for r in k)} | {len(failed)} | {len(o)} | "
                     f"{sum(r['status'] == 'correct' for r in o)} | {len(false)} | "
                     + " | ".join(str(classes[c]) for c in CLASSES) + f" | {len(we_only)} |")
        section = [f"## Level {level}: KernelBench accepts, we reject ({len(false)}; harness: {classes['harness']})"]
        if false:
            section += ["", "| entry | class | our status | step | reason |", "|---|---|---|---|---|"]
            section += [f"| {e.key} | {reject_class(r)} | {r['status']} | {r['step']} | {why_rejected(r)} |"
                        for e, r in sorted(false, key=lambda x: (CLASSES.index(reject_class(x[1])), x[0].task_id))]
        if failed:
            section += ["", "KernelBench failed to judge (not a verdict; delete the line from kb.jsonl to run it "
                        "again): " + "; ".join(f"{r['key']} {r['verdict']}: {one_line(r['reason'], 120)}"
                                               for r in failed)]
        if we_only:
            section += ["", f"We accept, KernelBench rejects: {', '.join(we_only)}"]
        pending = [e.key for e in judged if e.key not in kb or e.key not in ours]
        total_pending += len(pending)
        if pending:
            section += ["", f"Not judged on both sides yet: {len(pending)}"]
        sections.append("\n".join(section))
    not_yet = f"; {total_pending} entries not judged on both sides yet" if total_pending else ""
    lines += ["", f"**Harness rejects (KernelBench accepts, we reject for a harness reason): {total_harness}** "
                  f"(the target is 0{not_yet})", ""]
    return "\n".join(lines + ["\n\n".join(sections), ""])


# -- the command -------------------------------------------------------------------------------------------------

def main(corpus: str, levels: str = "1,2,3", kernelbench_src: str = ".kb/src", out: str = "corpus-audit",
         jobs: int = 4, side: str = "both", limit: int | None = None, time_budget: float | None = None,
         show_table: bool = False, device: str = "cuda", backend: str = "cuda") -> int:
    t0 = time.monotonic()
    if jobs < 1 or (limit is not None and limit < 0):
        print(f"--jobs: at least 1 (got {jobs}); --limit: not negative (got {limit})")
        return 2
    try:
        chosen = parse_levels(levels)
        entries = load_corpus(corpus, chosen, limit)
    except CorpusError as exc:
        print(exc)
        return 2
    folder = Path(out)
    if show_table:
        if not folder.is_dir():
            print(f"--out {out}: no such folder (run a side first)")
            return 2
        print(table(entries, folder, chosen))
        return 0
    if side in ("kb", "both"):
        missing = kernelbench_missing(kernelbench_src)
        if missing:
            print(missing)
            return 2
    folder.mkdir(parents=True, exist_ok=True)
    deadline = None if time_budget is None else t0 + time_budget
    code = 0
    if side in ("kb", "both"):
        import torch

        if not torch.cuda.is_available():
            print("the KernelBench side needs a CUDA GPU, and none is visible")
            return 2
        code = run_kb(entries, folder, str(Path(corpus).resolve()), str(Path(kernelbench_src).resolve()), jobs,
                      deadline)
    if side in ("ours", "both") and code == 0:
        code = run_ours(entries, folder, device, backend, deadline)
    if code == 0:
        (folder / "table.md").write_text(table(entries, folder, chosen))
        print(f"written to {folder}; the table: {folder / 'table.md'} (or --table)")
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--kb-child"]:
        print(json.dumps({"__r": kb_child(*sys.argv[2:5])}, default=str))
