"""`harness bench mutants`: the mutation benchmark. Seeded bugs in correct kernels, the equivalent ones found by a
float64 oracle, every other one judged by our evaluator and by KernelBench's, in one run; the kill rate by class.

Originals: the suite's reference solutions (`problems/solutions/`, Triton) and, with `--corpus`, CUDA-L1's published
CUDA kernels (the originals that the oracle finds correct on the published draws). Mutants: `rules`, at most
`--per-rule` sites of each rule in each original, picked with `--seed` (so the set is not one fixed list). Then:
  oracle  `oracle.judge`: each mutant equivalent, differs, raises or stillborn (stillborn ones count nowhere);
  ours    our evaluator, `eval`'s default preset (what `harness run` uses), on the originals and every mutant that is
          not stillborn;
  kb      KernelBench's `eval_kernel_against_ref` on the same candidates (needs its `src/` and a CUDA GPU; without
          them the table says KernelBench was not available).
A side's kill rate counts the non-equivalent mutants whose original that side accepts; its false rejects are the
originals and the equivalent mutants it rejects. Every record is appended to `--out` (`oracle.jsonl`, `ours.jsonl`,
`kb.jsonl`) as it is made, so a second run with the same `--out` goes on where the first stopped (`--time-budget`
ends a run cleanly between chunks); `summary.json` and `table.md` are written from whatever is there.
"""

from __future__ import annotations

import json
import platform
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.bench.corpus_audit import CorpusError, Results, load_corpus
from harness.bench.kernelbench_side_by_side import kernelbench_missing
from harness.bench.mutants import judges, oracle
from harness.bench.mutants.rules import BY_NAME, CLASSES, RULES, Rule, mutants
from harness.progress import Tally

CORPUS = "CUDA-L1/"  # the problem ids of the corpus's originals start so


def _pick(made: list[Any], per_rule: int, seed: int, origin: str) -> list[Any]:
    by_rule: dict[str, list[Any]] = defaultdict(list)
    for m in made:
        by_rule[m.rule].append(m)
    out = []
    for rule, ms in by_rule.items():
        rng = random.Random(f"{seed}:{origin}:{rule}")
        out += sorted(rng.sample(ms, min(per_rule, len(ms))), key=lambda m: m.site)
    return out


def _originals(selection: str, corpus: str | None, device: str, limit: int,
               keys: str = "") -> tuple[list[judges.Candidate], str]:
    """The originals (keys `<problem>:original`) and a note on the corpus (its entries `keys`, comma-separated like
    L1/32, else the first `limit` with a CUDA kernel)."""
    from problems import problem_from_source
    from harness.corpus.solutions import solutions

    out = [judges.Candidate(f"{p.id}:original", p, src, "triton")
           for p, src in (solutions(selection) if selection != "none" else [])]
    if corpus is None:
        return out, "CUDA-L1 corpus: not given (--corpus FILE, CUDA-L1's optimized_cuda_code/codes/h100.json)"
    if device == "cpu":
        return out, "CUDA-L1 corpus: left out (its kernels are CUDA; the oracle and both evaluators need a GPU)"
    entries = [e for e in load_corpus(corpus, [1, 2, 3]) if e.custom_code and "__global__" in e.custom_code]
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    unknown = sorted(set(wanted) - {e.key for e in entries})
    if unknown:
        raise CorpusError(f"--corpus-keys: no entry with a CUDA kernel is {', '.join(unknown)}")
    chosen = [e for e in entries if e.key in wanted] if wanted else entries[:limit]
    for e in chosen:
        problem = problem_from_source(e.ref_code, name=f"cudal1_L{e.level}_{e.task_id}",
                                      problem_id=f"{CORPUS}L{e.level}/{e.task_id}", level=f"level{e.level}")
        out.append(judges.Candidate(f"{problem.id}:original", problem, e.custom_code or "", "cuda"))
    which = ", ".join(e.key for e in chosen)
    return out, f"CUDA-L1 corpus: {len(chosen)} of its {len(entries)} entries with a CUDA kernel ({which})"


def _mutants_of(original: judges.Candidate, per_rule: int, seed: int, rules: tuple[Rule, ...],
                probes: dict[str, Any]) -> list[tuple[Any, judges.Candidate]]:
    from harness.bench.mutants.probe import published_values

    problem_id = original.problem.id
    if original.backend == "triton" and problem_id not in probes and any(r.name == "hardcoded-size" for r in rules):
        probes[problem_id] = published_values(original.problem.source, original.source)
    made = _pick(mutants(original.source, original.backend, probes.get(problem_id), rules), per_rule, seed, problem_id)
    return [(m, judges.Candidate(f"{problem_id}:{m.key}", original.problem, m.source, original.backend)) for m in made]


def _run_oracle(groups: list[tuple[judges.Candidate, list[tuple[Any, judges.Candidate]]]], results: Results,
                device: str, seed: int, jobs: int, deadline: float | None) -> None:
    done = results.done()
    pending = [g for g in groups if any(c.key not in done for c in [g[0], *(c for _, c in g[1])])]
    print(f"oracle: {len(pending)} originals to check with their mutants ({len(groups) - len(pending)} done before)",
          file=sys.stderr, flush=True)
    tally = Tally(len(pending))

    def one(group: tuple[judges.Candidate, list[tuple[Any, judges.Candidate]]]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            return
        original, made = group
        try:
            verdicts = oracle.judge(original.problem, [original.source, *(c.source for _, c in made)], device, seed)
        except RuntimeError as exc:  # the oracle could not run the original: its mutants count nowhere
            results.append({"key": original.key, "problem": original.problem.id, "rule": "", "class": "",
                            **oracle.Verdict(oracle.STILLBORN, detail=str(exc)).to_json()})
            print(tally.step(), "oracle", original.problem.id, f"failed: {str(exc)[:300]}", file=sys.stderr,
                  flush=True)
            return
        results.append({"key": original.key, "problem": original.problem.id, "rule": "", "class": "",
                        **verdicts[0].to_json()})
        for (m, c), v in zip(made, verdicts[1:]):
            results.append({"key": c.key, "problem": original.problem.id, "rule": m.rule, "class": m.cls,
                            "line": m.line, "before": m.before, "after": m.after, **v.to_json()})
        counts = Counter(v.status for v in verdicts[1:])
        print(tally.step(), "oracle", original.problem.id, dict(counts), file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, pending))


def _left_out(key: str, original_record: dict[str, Any] | None) -> str:
    """Why an original carries no mutants, or "": the oracle could not run it, or a corpus kernel was outside the
    tolerance on the published draws (ours are correct by construction; where the oracle says otherwise, the table
    shows it)."""
    if original_record is None:
        return "not checked by the oracle yet"
    if original_record["status"] != oracle.ORIGINAL:
        return original_record["detail"] or original_record["status"]
    if key.startswith(CORPUS) and any(s.startswith("published draw") for s in original_record["shown_by"]):
        return "outside the tolerance on the published draws"
    return ""


def _to_judge(groups: list[tuple[judges.Candidate, list[tuple[Any, judges.Candidate]]]],
              verdicts: dict[str, dict[str, Any]]) -> list[judges.Candidate]:
    out = []
    for original, made in groups:
        if not _left_out(original.key, verdicts.get(original.key)):
            out.append(original)
            out += [c for _, c in made if c.key in verdicts and verdicts[c.key]["status"] != oracle.STILLBORN]
    return out


def _run_ours(candidates: list[judges.Candidate], results: Results, device: str, deadline: float | None) -> None:
    done = results.done()
    pending = [c for c in candidates if c.key not in done]
    print(f"ours: {len(pending)} to evaluate ({len(candidates) - len(pending)} done before)", file=sys.stderr,
          flush=True)
    tally = Tally(len(pending))

    def record(r: dict[str, Any]) -> None:
        results.append(r)
        print(tally.step(), "ours", r["key"], r["status"], file=sys.stderr, flush=True)

    left = judges.ours(pending, device, record, deadline)
    if left:
        print(f"ours: time budget spent, {left} left for a run with the same --out", file=sys.stderr)


def _run_kb(candidates: list[judges.Candidate], results: Results, kernelbench_src: str, jobs: int,
            deadline: float | None) -> None:
    done = results.done()
    pending = [c for c in candidates if c.key not in done]
    print(f"kb: {len(pending)} to judge ({len(candidates) - len(pending)} done before), {jobs} at once",
          file=sys.stderr, flush=True)
    tally = Tally(len(pending))

    def record(r: dict[str, Any]) -> None:
        results.append(r)
        print(tally.step(), "kb", r["key"], r["verdict"], file=sys.stderr, flush=True)

    for i in range(0, len(pending), 4 * jobs):
        if deadline is not None and time.monotonic() >= deadline:
            print(f"kb: time budget spent, {len(pending) - i} left for a run with the same --out", file=sys.stderr)
            return
        judges.kernelbench(pending[i:i + 4 * jobs], kernelbench_src, jobs, record)


# -- the summary ---------------------------------------------------------------------------------------------------

def summarize(oracle_records: dict[str, dict[str, Any]], sides: dict[str, dict[str, dict[str, Any]]],
              notes: list[str], environment: dict[str, Any]) -> dict[str, Any]:
    """Counts by class for each side, the false rejects, the survivors, from the records alone."""
    originals = {k: r for k, r in oracle_records.items() if k.endswith(":original")}
    made = {k: r for k, r in oracle_records.items() if not k.endswith(":original")}
    summary: dict[str, Any] = {
        "environment": environment, "notes": notes,
        "oracle": {"originals": len(originals), "mutants": len(made),
                   "by_status": dict(Counter(r["status"] for r in made.values())),
                   "originals_outside_tolerance": {k: r["shown_by"] for k, r in originals.items() if r["shown_by"]},
                   "originals_left_out": {k: why for k, r in originals.items() if (why := _left_out(k, r))},
                   "by_rule": {rule: dict(Counter(r["status"] for r in made.values() if r["rule"] == rule))
                               for rule in sorted({r["rule"] for r in made.values()})}},
        "sides": {}}
    for side, records in sides.items():
        if not records:
            continue
        accepted_originals = {k.rsplit(":", 1)[0] for k in originals if records.get(k, {}).get("accepted")}
        by_class: dict[str, dict[str, int]] = {c: {"judged": 0, "killed": 0} for c in CLASSES}
        survivors, equivalent_rejects, pending, kills = [], [], 0, Counter()
        for key, r in made.items():
            origin = key.rsplit(":", 1)[0]
            verdict = records.get(key)
            if origin not in accepted_originals or r["status"] == oracle.STILLBORN:
                continue
            if verdict is None or verdict.get("accepted") is None:
                pending += 1
                continue
            if r["status"] == oracle.EQUIVALENT:
                if not verdict["accepted"]:
                    equivalent_rejects.append({"key": key, "reason": verdict["reason"][:200]})
                continue
            by_class[r["class"]]["judged"] += 1
            if verdict["accepted"]:
                survivors.append({"key": key, "rule": r["rule"], "shown_by": r["shown_by"], "change": r["after"]})
            else:
                by_class[r["class"]]["killed"] += 1
                kills[verdict.get("status") or verdict.get("verdict") or "?"] += 1
        judged = sum(c["judged"] for c in by_class.values())
        killed = sum(c["killed"] for c in by_class.values())
        equivalents = sum(1 for k, r in made.items() if r["status"] == oracle.EQUIVALENT
                          and k.rsplit(":", 1)[0] in accepted_originals
                          and records.get(k, {}).get("accepted") is not None)
        summary["sides"][side] = {
            "kill_rate": killed / judged if judged else None, "killed": killed, "judged": judged,
            "killed_as": dict(kills),
            "by_class": {c: {**v, "kill_rate": v["killed"] / v["judged"] if v["judged"] else None}
                         for c, v in by_class.items() if v["judged"]},
            "originals_judged": sum(1 for k in originals if records.get(k, {}).get("accepted") is not None),
            "originals_rejected": [{"key": k, "reason": records[k]["reason"][:200]} for k in originals
                                   if records.get(k, {}).get("accepted") is False],
            "equivalent_judged": equivalents, "equivalent_rejected": equivalent_rejects,
            "survivors": survivors, "not_judged_yet": pending}
    return summary


def _rate(v: dict[str, Any] | None) -> str:
    if not v or not v.get("judged"):
        return "-"
    return f"{v['killed']}/{v['judged']} ({100 * v['killed'] / v['judged']:.1f} %)"


def table(summary: dict[str, Any]) -> str:
    env, o, sides = summary["environment"], summary["oracle"], summary["sides"]
    ours, kb = sides.get("ours"), sides.get("kb")
    lines = [f"# Mutation benchmark: {o['mutants']} mutants of {o['originals']} originals",
             "", f"{env.get('device')}; torch {env.get('torch')}, Triton {env.get('triton')}, Python "
             f"{env.get('python')}; KernelBench {env.get('kernelbench') or 'not available'}", ""]
    lines += [f"- {n}" for n in summary["notes"]]
    status = o["by_status"]
    lines += ["", f"Oracle (float64, {env.get('device_kind')}): {status.get('differs', 0)} differ, "
              f"{status.get('raises', 0)} raise, {status.get('equivalent', 0)} equivalent (excluded from the kill "
              f"rate), {status.get('stillborn', 0)} stillborn (do not run at all; excluded)", "",
              "| class | ours: killed / judged | KernelBench: killed / judged |", "|---|---:|---:|"]
    for c in CLASSES:
        a, b = (ours or {}).get("by_class", {}).get(c), (kb or {}).get("by_class", {}).get(c)
        if a or b:
            lines.append(f"| {c} | {_rate(a)} | {_rate(b)} |")
    lines.append(f"| **all** | **{_rate(ours)}** | **{_rate(kb) if kb else 'KernelBench not available'}** |")
    lines += ["", "| false rejects | ours | KernelBench |", "|---|---:|---:|"]

    def fr(s: dict[str, Any] | None, what: str, n: str) -> str:
        return f"{len(s[what])} of {s[n]}" if s else "-"

    lines.append(f"| originals | {fr(ours, 'originals_rejected', 'originals_judged')} | "
                 f"{fr(kb, 'originals_rejected', 'originals_judged')} |")
    lines.append(f"| equivalent mutants | {fr(ours, 'equivalent_rejected', 'equivalent_judged')} | "
                 f"{fr(kb, 'equivalent_rejected', 'equivalent_judged')} |")
    for name, s in (("ours", ours), ("KernelBench", kb)):
        if s:
            for r in s["originals_rejected"] + s["equivalent_rejected"]:
                lines.append(f"- {name} rejects {r['key']}: {r['reason']}")
            if s["not_judged_yet"]:
                lines.append(f"- {name}: {s['not_judged_yet']} candidates not judged yet (run again with the same "
                             "--out)")
    if ours and ours["survivors"]:
        lines += ["", f"## Survivors of ours ({len(ours['survivors'])})", "", "| mutant | the oracle saw it on |",
                  "|---|---|"]
        lines += [f"| {s['key']} | {', '.join(s['shown_by'][:4])} |" for s in ours["survivors"]]
    if o.get("originals_left_out"):
        lines += ["", "Originals left out with their mutants: "
                  + "; ".join(f"{k}: {why[:150]}" for k, why in o["originals_left_out"].items())]
    if o["originals_outside_tolerance"]:
        lines += ["", "Originals outside the tolerance of the float64 reference on some oracle draws (the draws an "
                      "equivalent mutant may be as far off on): "
                  + "; ".join(f"{k} ({', '.join(v[:3])})" for k, v in o["originals_outside_tolerance"].items())]
    return "\n".join(lines) + "\n"


def _environment(device: str, kernelbench_src: str, kb_ok: bool) -> dict[str, Any]:
    import torch
    import triton

    name = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU ({platform.processor() or platform.machine()}"\
                                                                      ", the Triton interpreter)"
    kb = None
    if kb_ok:  # its commit: a COMMIT file beside src/ (an exported checkout), else the checkout's own git
        root = Path(kernelbench_src).resolve().parent
        kb = "(commit unknown)"
        if (root / "COMMIT").exists():
            kb = (root / "COMMIT").read_text().strip()
        elif (root / ".git").exists():
            kb = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or kb
        kb = f"{kb} from {kernelbench_src}"
    return {"device": name, "device_kind": device, "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "kernelbench": kb}


# -- the command ---------------------------------------------------------------------------------------------------

def main(selection: str = "all", corpus: str | None = None, corpus_limit: int = 5, corpus_keys: str = "",
         kernelbench_src: str = ".kb/src",
         out: str = "runs/mutants-bench", jobs: int = 4, side: str = "both", per_rule: int = 1, seed: int = 0,
         rules: str = "", device: str = "auto", time_budget: float | None = None, show_table: bool = False) -> int:
    t0 = time.monotonic()
    folder = Path(out)
    if show_table:  # from the records as they are (a run cut short wrote no summary), the last run's notes
        if not (folder / "oracle.jsonl").exists():
            print(f"--out {out}: no oracle.jsonl there (run the benchmark first)")
            return 2
        last = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").exists() else {}
        summary = summarize(Results(folder, "oracle").done(), {s: Results(folder, s).done() for s in ("ours", "kb")},
                            last.get("notes", []), last.get("environment", {}))
        print(table(summary), end="")
        return 0
    chosen = tuple(r for r in RULES if not rules or r.name in rules.split(","))
    unknown = sorted(set(filter(None, rules.split(","))) - set(BY_NAME))
    if unknown:
        print(f"--rules: choose from {', '.join(BY_NAME)} (unknown: {', '.join(unknown)})")
        return 2
    if per_rule < 1 or jobs < 1:
        print(f"--per-rule and --jobs: at least 1 (got {per_rule}, {jobs})")
        return 2
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if corpus is not None and not Path(corpus).is_file():
        print(f"--corpus {corpus}: no such file")
        return 2
    try:
        originals, corpus_note = _originals(selection, corpus, device, corpus_limit, corpus_keys)
    except CorpusError as exc:
        print(exc)
        return 2
    if not originals:
        print(f"nothing to mutate: {selection!r} selects no reference solution; {corpus_note}")
        return 2
    notes = [corpus_note]
    missing = kernelbench_missing(kernelbench_src)
    kb_ok = side in ("kb", "both") and not missing and device == "cuda"
    if side in ("kb", "both") and not kb_ok:
        notes.append(f"KernelBench was not available: {missing or 'it needs a CUDA GPU, and this run has none'}")
    folder.mkdir(parents=True, exist_ok=True)
    probes_path = folder / "probes.json"
    probes = json.loads(probes_path.read_text()) if probes_path.exists() else {}
    groups = [(o, _mutants_of(o, per_rule, seed, chosen, probes)) for o in originals]
    probes_path.write_text(json.dumps(probes))
    deadline = None if time_budget is None else t0 + time_budget
    oracle_results = Results(folder, "oracle")
    _run_oracle(groups, oracle_results, device, seed, jobs if device == "cuda" else 1, deadline)
    verdicts = oracle_results.done()
    candidates = _to_judge(groups, verdicts)
    if side in ("ours", "both"):
        _run_ours(candidates, Results(folder, "ours"), device, deadline)
    if kb_ok:
        _run_kb(candidates, Results(folder, "kb"), str(Path(kernelbench_src).resolve()), jobs, deadline)
    keys = {c.key for o, made in groups for c in [o, *(c for _, c in made)]}
    summary = summarize({k: v for k, v in verdicts.items() if k in keys},
                        {s: {k: v for k, v in Results(folder, s).done().items() if k in keys} for s in ("ours", "kb")},
                        notes, _environment(device, kernelbench_src, kb_ok))
    summary["settings"] = {"selection": selection, "per_rule": per_rule, "seed": seed,
                           "rules": [r.name for r in chosen], "corpus": corpus, "corpus_limit": corpus_limit,
                           "corpus_keys": corpus_keys}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1))
    text = table(summary)
    (folder / "table.md").write_text(text)
    print(text, end="")
    print(f"written to {folder} (summary.json, table.md; the records: oracle.jsonl, ours.jsonl, kb.jsonl)")
    return 0
