"""The run store: durable attempts, repair after a crash, and refusal of unusable run directories."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from eval.result import EvalResult, Mismatch, Status
from harness.store import (
    Attempt,
    RunStore,
    StoreError,
    code_path,
    config_differences,
    export_jsonl,
    read_run,
)

CONFIG = {"name": "r", "turns": 2, "agent": {"kind": "reference", "retry": {"max_attempts": 1}},
          "budget": {"max_tokens": 10}}  # fmt: skip
VOLATILE = ("budget", "agent.retry")


def attempt(problem: str = "L1/01_x", sample: int = 1, turn: int = 1, status: str = "incorrect", **kw) -> Attempt:
    result = None if status == Status.AGENT_ERROR else EvalResult(
        status=Status(status), reason="why", problem_id=problem,
        mismatch=Mismatch(output=0, reason="differs", max_abs_err=0.5) if status == "incorrect" else None,
    )  # fmt: skip
    return Attempt(problem_id=problem, sample=sample, turn=turn, status=status,
                   prompt=[{"role": "user", "content": f"turn {turn}"}], reply=f"reply {turn}",
                   code=None if status == Status.AGENT_ERROR else f"# code {sample} {turn}\n", result=result,
                   input_tokens=10, output_tokens=5, cost_usd=0.01, **{"feedback": "fb", **kw})  # fmt: skip


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_record_and_reopen_keeps_everything(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt(turn=1))
        store.record(attempt(turn=2, status="correct", speedup=1.5))
        store.record(attempt(sample=2, status=Status.AGENT_ERROR, error="HTTP 400: context length exceeded"))
        store.end_session("finished")
    with RunStore.open(run, CONFIG) as store:
        got = store.attempts()
        assert [(a.problem_id, a.sample, a.turn, a.status) for a in got] == [
            ("L1/01_x", 1, 1, "incorrect"), ("L1/01_x", 1, 2, "correct"), ("L1/01_x", 2, 1, Status.AGENT_ERROR)]
        assert got[0].result.mismatch.max_abs_err == 0.5 and got[0].prompt == [{"role": "user", "content": "turn 1"}]
        assert got[1].speedup == 1.5 and got[2].result is None and "HTTP 400" in got[2].error
        totals = store.totals()
        assert (totals.attempts, totals.tokens, round(totals.cost_usd, 6)) == (3, 45, 0.03)
        assert [s["stop_reason"] for s in store.sessions()] == ["finished"]
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert [(x["sample"], x["turn"], x["status"], x["speedup"]) for x in lines] == [
        (1, 1, "incorrect", None), (1, 2, "correct", 1.5), (2, 1, Status.AGENT_ERROR, None)]
    assert lines[1]["reply"] == "reply 2" and lines[1]["result"]["status"] == "correct"
    assert (run / "code/L1/01_x/1_2.py").read_text() == "# code 1 2\n"
    assert not (run / "code/L1/01_x/2_1.py").exists()  # no code for an agent error
    assert json.loads(json.dumps(read_run(run).attempts[1].summary())) == lines[1]


def test_statuses_read_back_as_members_and_store_as_their_text(tmp_path: Path) -> None:
    """Every reader gets `Status` members (not the stored text), and the stored text is the member's value."""
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt(turn=1, status=Status.CORRECT, speedup=2.0, best_turn=1, best_status=Status.CORRECT))
        store.record(attempt(sample=2, status=Status.AGENT_ERROR))
    with RunStore.open(run, CONFIG) as store:
        read = [(a.status, a.best_status) for a in store.attempts()] + [(o.status, o.best_status) for o in store.outline()]
    read += [(a.status, a.best_status) for a in read_run(run).attempts]
    assert read == [(Status.CORRECT, Status.CORRECT), (Status.AGENT_ERROR, None)] * 3
    assert all(type(s) is Status for s, _ in read) and all(type(b) is Status for _, b in read[::2])
    conn = sqlite3.connect(run / "attempts.sqlite")
    assert conn.execute("SELECT status, best_status, typeof(status) FROM attempts ORDER BY sample").fetchall() == [
        ("correct", "correct", "text"), ("agent_error", None, "text")]
    conn.close()
    assert '"status": "correct"' in (run / "results.jsonl").read_text()


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="'solved' is not a valid Status"):
        Attempt(problem_id="L1/01_x", sample=1, turn=1, status="solved", prompt=[])


def test_an_attempt_is_never_recorded_twice(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "r", CONFIG) as store:
        store.begin_session()
        store.record(attempt())
        with pytest.raises(StoreError, match="already recorded"):
            store.record(attempt(status="correct"))
        assert [a.status for a in store.attempts()] == ["incorrect"]


def test_torn_jsonl_and_missing_code_are_repaired_from_the_database(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt(turn=1))
        store.record(attempt(turn=2))
    good = (run / "results.jsonl").read_text()
    # a crash after the DB commit: the last line is torn and a code file is missing
    (run / "results.jsonl").write_text(good.splitlines(keepends=True)[0] + good.splitlines()[1][:25])
    (run / "code/L1/01_x/1_2.py").unlink()
    with RunStore.open(run, CONFIG):
        pass
    assert (run / "results.jsonl").read_text() == good
    assert (run / "code/L1/01_x/1_2.py").read_text() == "# code 1 2\n"
    # a crash before the jsonl line was written at all: the line is added back
    (run / "results.jsonl").write_text(good.splitlines(keepends=True)[0])
    with RunStore.open(run, CONFIG):
        pass
    assert (run / "results.jsonl").read_text() == good


def test_resume_refuses_a_different_config_but_allows_volatile_keys(tmp_path: Path) -> None:
    run = tmp_path / "r"
    RunStore.open(run, CONFIG, volatile=VOLATILE).close()
    changed_budget = {**CONFIG, "budget": {"max_tokens": 99},
                      "agent": {**CONFIG["agent"], "retry": {"max_attempts": 5}}}  # fmt: skip
    RunStore.open(run, changed_budget, volatile=VOLATILE).close()
    with pytest.raises(StoreError, match=r"different config \(agent.kind differ; only turns, samples and the "):
        RunStore.open(run, {**CONFIG, "agent": {**CONFIG["agent"], "kind": "openai"}}, volatile=VOLATILE)
    with pytest.raises(StoreError, match=r"turns may grow, not shrink: 2 -> 1"):
        RunStore.open(run, {**CONFIG, "turns": 1}, volatile=VOLATILE)


def test_a_run_extends_when_turns_samples_or_problems_grow(tmp_path: Path) -> None:
    """More turns (or samples, or problems holding every attempted one) extend a finished run: its attempts are
    kept and its stored config (database and config.yaml) becomes the grown one."""
    run = tmp_path / "r"
    base = {**CONFIG, "samples": 1, "problems": {"spec": "smoke", "limit": None}}
    with RunStore.open(run, base, volatile=VOLATILE) as store:
        store.begin_session()
        store.record(Attempt(problem_id="L1/13_softmax", sample=1, turn=1, status="correct", prompt=[]))
        store.end_session("finished")
    grown = {**base, "turns": 4, "samples": 2}
    with RunStore.open(run, grown, volatile=VOLATILE) as store:
        assert store.config["turns"] == 4 and len(store.attempts()) == 1
    assert yaml.safe_load((run / "config.yaml").read_text())["turns"] == 4
    RunStore.open(run, grown, volatile=VOLATILE).close()  # and resumes under it
    wider = {**grown, "problems": {"spec": "all", "limit": None}}
    with pytest.raises(StoreError, match=r"leaves out 1 attempted problem\(s\), e.g. L1/13_softmax"):
        RunStore.open(run, wider, volatile=VOLATILE, problem_ids=["L1/16_rms_norm"])
    RunStore.open(run, wider, volatile=VOLATILE, problem_ids=["L1/13_softmax", "L1/16_rms_norm"]).close()


def test_config_differences_names_nested_keys() -> None:
    a = {"x": 1, "agent": {"model": "a", "retry": {"n": 1}}}
    b = {"x": 1, "agent": {"model": "b", "retry": {"n": 2}}, "new": 0}
    assert config_differences(a, b) == ["agent.model", "agent.retry.n", "new"]
    assert config_differences(a, b, ["agent.retry", "new"]) == ["agent.model"]


def test_one_process_at_a_time(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "r", CONFIG):
        with pytest.raises(StoreError, match="in use by another harness process"):
            RunStore.open(tmp_path / "r", CONFIG)


def test_incompatible_schema_version_is_refused_and_untouched(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt())
    conn = sqlite3.connect(run / "attempts.sqlite")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = sha(run / "attempts.sqlite"), sha(run / "results.jsonl")
    with pytest.raises(StoreError, match="schema version 99; this harness reads versions 1, 2"):
        RunStore.open(run, CONFIG)
    assert (sha(run / "attempts.sqlite"), sha(run / "results.jsonl")) == before


@pytest.mark.parametrize("damage", ["garbage", "pages"])
def test_corrupted_database_is_refused_and_untouched(tmp_path: Path, damage: str) -> None:
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        for t in range(1, 40):  # enough rows for several pages
            store.record(attempt(turn=t, feedback="x" * 500))
    db = run / "attempts.sqlite"
    data = bytearray(db.read_bytes())
    if damage == "garbage":
        data[:100] = b"this is not a database" + b"\0" * 78
    else:  # keep the header, scramble the pages behind it
        for i in range(4096 + 200, len(data), 7):
            data[i] = (data[i] * 31 + 7) % 256
    db.write_bytes(bytes(data))
    before = sha(db), sha(run / "results.jsonl")
    with pytest.raises(StoreError, match="corrupted"):
        RunStore.open(run, CONFIG)
    assert (sha(db), sha(run / "results.jsonl")) == before


def test_jsonl_without_database_is_not_overwritten(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "results.jsonl").write_text('{"problem_id": "p"}\n')
    with pytest.raises(StoreError, match="no attempts.sqlite"):
        RunStore.open(run, CONFIG)
    assert (run / "results.jsonl").read_text() == '{"problem_id": "p"}\n'
    assert not (run / "attempts.sqlite").exists()


def test_code_paths_stay_inside_the_run_directory() -> None:
    assert code_path("L1/01_square_matmul", 1, 1) == "code/L1/01_square_matmul/1_1.py"
    for pid in ("../../etc/passwd", "/abs", "a/../../b", "..", "hf:Org/Name 3"):
        parts = code_path(pid, 2, 3).split("/")
        assert parts[0] == "code" and parts[-1] == "2_3.py"
        assert all(p not in ("", ".", "..") and not p.startswith(".") for p in parts)
    assert code_path("a:b", 0, 1) != code_path("a_b", 0, 1)  # sanitised names stay distinct


def test_export_includes_prompts_and_code(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt())
    n = export_jsonl(run, tmp_path / "out.jsonl")
    rec = json.loads((tmp_path / "out.jsonl").read_text())
    assert n == 1 and rec["prompt"] == [{"role": "user", "content": "turn 1"}] and rec["code"] == "# code 1 1\n"


def test_samples_and_turns_count_from_one(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "r", CONFIG) as store:
        store.begin_session()
        for sample, turn in ((0, 1), (1, 0)):
            with pytest.raises(ValueError, match="count from 1"):
                store.record(attempt(sample=sample, turn=turn))
        assert store.attempts() == []


def test_the_attempt_columns_have_one_definition(tmp_path: Path) -> None:
    """Every `Attempt` field is a column, written and read back unchanged; no column is anything else."""
    run = tmp_path / "r"
    full = attempt(status="correct", speedup=2.0, best_turn=1, best_status="correct", best_speedup=2.0,
                   error="e", problem_hash="h", model="m", finish_reason="stop", requests=3, eval_s=0.5,
                   from_cache=True, latency_s=1.5, cached_tokens=2)  # fmt: skip
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(full)
        (back,) = store.attempts()
    assert back == full
    conn = sqlite3.connect(run / "attempts.sqlite")
    columns = [r[1] for r in conn.execute("PRAGMA table_info(attempts)")]
    conn.close()
    assert columns == ["id", "session_id", *(f.name for f in dataclasses.fields(Attempt))]
    line = json.loads((run / "results.jsonl").read_text())
    assert set(line) == {f.name for f in dataclasses.fields(Attempt)} - {"prompt", "code"} | {"correct"}


_V1_ATTEMPTS = """CREATE TABLE attempts (
    id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL REFERENCES sessions(id), problem_id TEXT NOT NULL,
    sample INTEGER NOT NULL, turn INTEGER NOT NULL, status TEXT NOT NULL, speedup REAL, best_turn INTEGER,
    best_status TEXT, best_speedup REAL, problem_hash TEXT NOT NULL, prompt TEXT NOT NULL, reply TEXT NOT NULL,
    code TEXT, code_path TEXT, feedback TEXT NOT NULL, error TEXT NOT NULL, input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, cost_usd REAL, latency_s REAL NOT NULL,
    model TEXT, finish_reason TEXT, requests INTEGER NOT NULL, eval_s REAL NOT NULL, from_cache INTEGER NOT NULL,
    result TEXT, started_at REAL NOT NULL, finished_at REAL NOT NULL, UNIQUE (problem_id, sample, turn))"""


def _version_1_run(run: Path) -> None:
    """A run as harness 0.1.0 wrote it: schema version 1 (its own column order, no check), samples from 0."""
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt(sample=1, turn=1))
        store.record(attempt(sample=2, turn=1))
    conn = sqlite3.connect(run / "attempts.sqlite")
    with conn:
        conn.execute("ALTER TABLE attempts RENAME TO v2")
        conn.execute(_V1_ATTEMPTS)
        columns = ", ".join(r[1] for r in conn.execute("PRAGMA table_info(attempts)"))  # version 1's columns
        conn.execute(f"INSERT INTO attempts ({columns}) SELECT {columns} FROM v2")
        conn.execute("DROP TABLE v2")
        conn.execute("UPDATE attempts SET sample = sample - 1")
    conn.execute("PRAGMA user_version = 1")
    conn.close()


def test_an_old_run_is_read_with_samples_from_one_but_not_resumed(tmp_path: Path) -> None:
    run = tmp_path / "r"
    _version_1_run(run)
    before = sha(run / "attempts.sqlite")
    assert [(a.sample, a.turn) for a in read_run(run).attempts] == [(1, 1), (2, 1)]
    with pytest.raises(StoreError, match="older harness .*samples counted from 0.*`harness report`"):
        RunStore.open(run, CONFIG)
    assert sha(run / "attempts.sqlite") == before


def test_an_empty_database_file_is_called_empty_or_corrupt(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "attempts.sqlite").write_bytes(b"")
    for open_it in (lambda: RunStore.open(run, CONFIG), lambda: read_run(run)):
        with pytest.raises(StoreError) as info:
            open_it()
        assert "is empty or corrupt" in str(info.value) and "schema version 0" not in str(info.value)
    assert (run / "attempts.sqlite").read_bytes() == b""


def test_the_reader_opens_the_database_read_only(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt())
    db = run / "attempts.sqlite"
    db.chmod(0o444)
    run.chmod(0o555)  # nothing may be created next to it either (no -wal/-shm, no journal)
    try:
        record = read_run(run)
    finally:
        run.chmod(0o755)
        db.chmod(0o644)
    assert [a.key for a in record.attempts] == [("L1/01_x", 1, 1)] and record.schema_version == 2


def test_results_jsonl_is_append_only_in_commit_order(tmp_path: Path) -> None:
    """Attempts recorded out of (problem, sample, turn) order, as concurrent trajectories record them: a resume
    leaves the file as it is (same bytes, same inode), and lines lost in a crash are appended in commit order."""
    run = tmp_path / "r"
    order = [("L1/02_y", 1, 1), ("L1/01_x", 2, 1), ("L1/01_x", 1, 1), ("L1/02_y", 1, 2), ("L1/01_x", 1, 2)]
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        for pid, sample, turn in order:
            store.record(attempt(problem=pid, sample=sample, turn=turn))
    path = run / "results.jsonl"
    keys = [(x["problem_id"], x["sample"], x["turn"]) for x in map(json.loads, path.read_text().splitlines())]
    assert keys == order  # commit order, not the database's (problem, sample, turn) order
    before, inode = path.read_bytes(), path.stat().st_ino
    RunStore.open(run, CONFIG).close()
    assert path.read_bytes() == before and path.stat().st_ino == inode  # never rewritten
    lines = before.decode().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1] + lines[2][:10])  # a crash: two lines lost, one torn
    inode = path.stat().st_ino
    RunStore.open(run, CONFIG).close()
    assert path.read_bytes() == before and path.stat().st_ino == inode  # appended in place, in commit order
    assert len(read_run(run).attempts) == len(order)


def _swap(lines: list[str]) -> list[str]:
    return [lines[2], lines[1], lines[0], *lines[3:]]


_DAMAGE = {  # what a disk, an editor or a bad copy can do to results.jsonl; the line count misses all but "extra"
    "garbled": lambda lines: [lines[0].replace('"status": "incorrect"', '"status": "correct"', 1), *lines[1:]],
    "duplicated": lambda lines: [lines[0], lines[1], lines[1], *lines[2:4]],
    "cut": lambda lines: [lines[0], lines[1][:40] + "\n", *lines[2:]],
    "swapped": _swap,
    "extra": lambda lines: [*lines, lines[-1]],
}


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_results_jsonl_is_checked_by_content_and_rewritten_from_the_database(tmp_path: Path, damage: str) -> None:
    """A line of results.jsonl that disagrees with the database (garbled, duplicated, cut, swapped, one too many) is
    found on resume and the file rewritten whole from the database, in commit order, leaving no temporary file."""
    run = tmp_path / "r"
    order = [("L1/02_y", 1, 1), ("L1/01_x", 2, 1), ("L1/01_x", 1, 1), ("L1/02_y", 1, 2), ("L1/01_x", 1, 2)]
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        for pid, sample, turn in order:
            store.record(attempt(problem=pid, sample=sample, turn=turn))
    path = run / "results.jsonl"
    good = path.read_text()
    path.write_text("".join(_DAMAGE[damage](good.splitlines(keepends=True))))
    assert path.read_text() != good
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt(problem="L1/03_z"))  # and the store goes on appending to the rewritten file
    assert path.read_text() == good + path.read_text().splitlines(keepends=True)[-1]
    assert [json.loads(x)["problem_id"] for x in path.read_text().splitlines()][-1] == "L1/03_z"
    assert sorted(p.name for p in run.iterdir()) == [".lock", "attempts.sqlite", "code", "config.yaml", "results.jsonl"]
    RunStore.open(run, CONFIG).close()
    assert path.read_text().startswith(good)


def test_a_run_recorded_before_the_digest_is_checked_once_and_kept(tmp_path: Path) -> None:
    """A database without the file's digest (an older harness) gets it on resume; a file that agrees stays as it is."""
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        store.record(attempt(turn=1))
        store.record(attempt(turn=2))
    conn = sqlite3.connect(run / "attempts.sqlite")
    with conn:
        conn.execute("DELETE FROM meta WHERE key = 'results_sha256'")
    conn.close()
    path = run / "results.jsonl"
    before, inode = path.read_bytes(), path.stat().st_ino
    RunStore.open(run, CONFIG).close()
    assert path.read_bytes() == before and path.stat().st_ino == inode
    conn = sqlite3.connect(run / "attempts.sqlite")
    (digest,) = conn.execute("SELECT value FROM meta WHERE key = 'results_sha256'").fetchone()
    conn.close()
    assert digest == hashlib.sha256(before).hexdigest()


def test_a_damaged_page_is_named_with_what_to_do_by_the_resume_and_the_reader(tmp_path: Path) -> None:
    """A page of the database overwritten with garbage: a resume and every reader refuse it in one line that names
    the file and says how to recover, and change nothing."""
    run = tmp_path / "r"
    with RunStore.open(run, CONFIG) as store:
        store.begin_session()
        for t in range(1, 40):
            store.record(attempt(turn=t, feedback="x" * 500))
    db = run / "attempts.sqlite"
    data = bytearray(db.read_bytes())
    data[4096:8192] = bytes((i * 37 + 11) % 256 for i in range(4096))  # page 2, whole
    db.write_bytes(bytes(data))
    before = sha(db), sha(run / "results.jsonl")
    for open_it in (lambda: RunStore.open(run, CONFIG), lambda: read_run(run, texts=False),
                    lambda: export_jsonl(run, tmp_path / "out.jsonl")):
        with pytest.raises(StoreError) as info:
            open_it()
        message = str(info.value)
        assert "\n" not in message and f"{db} is corrupted" in message and f"`sqlite3 {db} .recover`" in message
    assert (sha(db), sha(run / "results.jsonl")) == before and not (tmp_path / "out.jsonl").exists()


def test_harness_report_names_a_damaged_text_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A prompt whose bytes are no longer UTF-8 (read only for the transcripts): `harness report` ends with one line
    naming the file and what to do, exit 2, never a traceback."""
    from harness.cli import main

    run = tmp_path / "r"
    with RunStore.open(run, {**CONFIG, "problems": {"spec": "L1/13_softmax", "limit": None}}) as store:
        store.begin_session()
        store.record(attempt(problem="L1/13_softmax"))
    conn = sqlite3.connect(run / "attempts.sqlite")
    with conn:
        conn.execute("UPDATE attempts SET prompt = CAST(x'5b7b22ff7d5d' AS TEXT)")
    conn.close()
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    db = run / "attempts.sqlite"
    assert err.count("\n") == 0 and err.startswith(f"error: {db} is corrupted") and ".recover" in err


def test_reopening_results_jsonl_closes_its_descriptor_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store reopens results.jsonl after a repair or a failed write. A descriptor closed twice (by number, then
    through its file object) closes whatever another thread opened under that number in between: here a bystander
    file opened the moment a descriptor is freed stays open, and the store's next line still lands."""
    import os

    bystanders = []
    real_close = os.close

    def close_then_another_thread_opens(fd: int) -> None:
        real_close(fd)
        bystanders.append(open(tmp_path / f"bystander{len(bystanders)}", "wb"))  # noqa: SIM115

    with RunStore.open(tmp_path / "r", CONFIG) as store:
        store.begin_session()
        store.record(attempt(problem="L1/01_x"))
        monkeypatch.setattr(os, "close", close_then_another_thread_opens)
        store._reopen_jsonl()
        monkeypatch.setattr(os, "close", real_close)
        for f in bystanders:
            f.write(b"still mine")
            f.flush()  # EBADF here if the store closed it
        store.record(attempt(problem="L1/02_y"))
    lines = (tmp_path / "r" / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["problem_id"] for x in lines] == ["L1/01_x", "L1/02_y"]
    for f in bystanders:
        f.close()
