"""`harness bench corpus`: our side of the false-reject audit on a tiny corpus in the published format, on the CPU.

The real evaluator judges every entry (an honest Triton kernel under the interpreter, a PyTorch-only candidate, one
that does not build, one that hard-codes its size); the JSON lines, the resume and the table's classes are checked.
KernelBench's side needs a GPU: here only its refusals are, and its lines are written as the command writes them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eval import UNFINISHED, EvalResult, Status
from harness.bench.corpus_audit import (Entry, Results, kb_record, load_corpus, ours_record, reject_class,
                                        why_rejected)
from harness.corpus import candidates
from tests.paths import REPO

REF = candidates.problem_source(4096)  # relu(x + y) * scale over N = 4096 elements; N only sizes the inputs
HONEST = candidates.triton_candidate()
PYTORCH_ONLY = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x + y) * self.scale
'''
NO_BUILD = candidates.edit(HONEST, "-> torch.Tensor:\n        a = ", "-> torch.Tensor\n        a = ")
FIXED_SIZE = candidates.edit(HONEST, "out = torch.empty_like(a)",
                             "assert a.numel() == 4096, 'built for 4096 elements'\n        out = torch.empty_like(a)")
CORPUS = {"1": [{"task_id": 1, "ref_code": REF, "custom_code": HONEST, "score": "1.1"},
                {"task_id": 2, "ref_code": REF, "custom_code": PYTORCH_ONLY, "score": "1.2"},
                {"task_id": 3, "ref_code": REF, "custom_code": NO_BUILD, "score": "1.3"},
                {"task_id": 4, "ref_code": REF, "custom_code": FIXED_SIZE, "score": "1.4"},
                {"task_id": 5, "ref_code": REF, "custom_code": "None", "score": None}],
          "2": []}


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "bench", "corpus", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=1500)  # a hang guard, never reached when well


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "h100.json"
    path.write_text(json.dumps(CORPUS))
    return path


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_our_side_judges_resumes_and_classifies(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    ours = ["--corpus", corpus, "--levels", "1,2", "--side", "ours", "--device", "cpu", "--backend", "triton",
            "--out", out]
    first = _cli(*ours)
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    assert (out / "table.md").exists()
    lines = (out / "ours.jsonl").read_text().splitlines()
    records = {r["key"]: r for r in map(json.loads, lines)}
    assert sorted(records) == ["L1/1", "L1/2", "L1/3", "L1/4"], records  # L1/5 publishes no kernel
    assert all(r["side"] == "ours" and r["level"] == 1 for r in records.values())
    honest, pytorch, broken, fixed = (records[f"L1/{n}"] for n in (1, 2, 3, 4))
    assert honest["status"] == "correct", honest
    assert pytorch["status"] == "rejected" and pytorch["step"] == "source", pytorch
    assert "PyTorch-only" in pytorch["reason"]
    assert broken["status"] == "compile_error" and broken["step"] == "source", broken
    assert fixed["status"] == "runtime_error" and fixed["step"] == "correctness", fixed
    # the first hidden workload it met, named by its kind (never its sizes: the verdict reaches agents)
    assert len(fixed["unfinished"]) == 1 and fixed["unfinished"][0].startswith("a hidden workload ("), fixed
    assert "N=" not in fixed["unfinished"][0] and "built for 4096 elements" in fixed["reason"]

    again = _cli(*ours)  # resumed: everything is done, nothing is evaluated again
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert "ours: 0 to evaluate (4 done before)" in again.stderr
    assert (out / "ours.jsonl").read_text().splitlines() == lines

    entries = {e.key: e for e in load_corpus(corpus, [1])}
    kb = Results(out, "kb")
    for key in records:  # KernelBench, which needs a GPU, accepted them all
        kb.append(kb_record(entries[key], "correct", "correct (5 / 5)", 3.0))
    shown = _cli("--corpus", corpus, "--levels", "1,2", "--out", out, "--table")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    md = shown.stdout
    assert "| 1 | 5 | 1 | 4 | 4 | 0 | 4 | 1 | 3 | 2 | 0 | 0 | 1 | 0 |" in md, md
    assert "| 2 | 0 | 0 |" in md
    assert "**Harness rejects (KernelBench accepts, we reject for a harness reason): 1** (the target is 0)" in md
    listed = [line for line in md.splitlines() if line.startswith("| L1/")]
    assert [line.split(" | ")[:4] for line in listed] == [
        ["| L1/2", "by design", "rejected", "source"], ["| L1/4", "by design", "runtime_error", "correctness"],
        ["| L1/3", "harness", "compile_error", "source"]], listed
    assert "(on a hidden workload (" in listed[1] and "N=" not in listed[1]


def test_each_reject_class_comes_from_our_result() -> None:
    entry = Entry(1, 7, REF, HONEST)

    def record(status: Status, reason: str, **fields: object) -> dict[str, object]:
        return ours_record(entry, EvalResult(status=status, reason=reason, **fields))  # type: ignore[arg-type]

    assert reject_class(record(Status.INCORRECT, "output 0: max abs diff 3.2 (trial 1)")) == "correctness"
    assert reject_class(record(Status.REJECTED, "integrity: the candidate reads the worker's stack")) == "integrity"
    decoy = ("the candidate's own kernels took 0.10% of forward's GPU time, under the minimum of 0.50% "
             "(eval.min_own_time_fraction): ...")
    assert reject_class(record(Status.REJECTED, decoy)) == "by design"
    assert reject_class(record(Status.CRASH, "crash: the worker died (signal 11)",
                               workloads={"batch=9": UNFINISHED})) == "by design"
    assert reject_class(record(Status.CRASH, "crash: the worker died (signal 11)",
                               distributions={"scaled": "passed"})) == "harness"
    assert reject_class(record(Status.TIMEOUT, "timeout: import took over 180 s")) == "harness"
    assert reject_class(record(Status.SKIPPED, "CUDA candidates cannot run without a GPU")) == "harness"
    fell_back = record(Status.REJECTED, "none of the candidate's own kernels ran during forward (defined: k)",
                       flags=["build: a load_inline build failed and the candidate caught the error, so it runs its "
                              "own fallback (as with torch's load_inline): error building extension 'k'"])
    assert reject_class(fell_back) == "by design"  # and the table says why no own kernel ran:
    assert why_rejected(fell_back).endswith("[build: a load_inline build failed and the candidate caught the error, so it "
                                    "runs its own fallback (as with torch's load_inline): error building extension 'k']")
    assert record(Status.REJECTED, "x")["build_note"] == "" and "[build:" not in why_rejected(record(Status.REJECTED, "x"))
    timed = record(Status.RUNTIME_ERROR, "forward raised: ...", phase_seconds={"load": 1.0, "correctness": 2.0})
    assert timed["step"] == "correctness" and record(Status.REJECTED, "x")["step"] == "source"


def test_a_line_cut_by_a_killed_run_is_not_a_result(tmp_path: Path) -> None:
    results = Results(tmp_path, "kb")
    entry = Entry(1, 1, REF, HONEST)
    results.append(kb_record(entry, "correct", "correct", 1.0))
    with open(results.path, "a") as fh:
        fh.write('{"key": "L1/2", "level": 1, "ta')  # the run was killed mid-line
    assert list(results.done()) == ["L1/1"]
    results.append(kb_record(Entry(1, 3, REF, HONEST), "incorrect", "Output mismatch", 1.0))
    assert list(results.done()) == ["L1/1", "L1/3"]


def test_refusals_are_one_line(corpus: Path, tmp_path: Path) -> None:
    no_kb = _cli("--corpus", corpus, "--levels", "1", "--side", "both", "--kernelbench-src", tmp_path,
                 "--out", tmp_path / "o")
    assert no_kb.returncode == 2
    assert no_kb.stdout == (f"--kernelbench-src {tmp_path}: no kernelbench/eval.py there (give KernelBench's src/ "
                            "folder)\n")
    assert not (tmp_path / "o").exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": [{"task_id": "one"}]}')
    for corpus_path, levels, said in ((bad, "1", "level 1 entry 0 lacks an int task_id or a ref_code"),
                                      (corpus, "4", "no list of entries for level 4 (levels there: 1, 2)"),
                                      (corpus, "x", "--levels: comma-separated level numbers"),
                                      (tmp_path / "none.json", "1", "cannot read it")):
        got = _cli("--corpus", corpus_path, "--levels", levels, "--side", "ours", "--out", tmp_path / "o")
        assert got.returncode == 2 and said in got.stdout and got.stdout.count("\n") == 1, got.stdout + got.stderr


def test_no_chunk_starts_after_the_time_budget(corpus: Path, tmp_path: Path) -> None:
    got = _cli("--corpus", corpus, "--levels", "1", "--side", "ours", "--device", "cpu", "--time-budget", "0",
               "--out", tmp_path / "o")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "ours: time budget spent, 4 left for the next invocation with the same --out" in got.stderr
    assert not (tmp_path / "o" / "ours.jsonl").exists()
