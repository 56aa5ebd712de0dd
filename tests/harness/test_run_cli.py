"""`harness run` and the `harness` command as a new user meets them: a wrong or unreachable
agent, binary files, documented examples run as written, clear refusals, pipes, the summary."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from harness.cli import main
from tests.fakes.llm_server import FakeLLMServer, error, reply
from tests.paths import REPO
from tests.run_fixtures import BROKEN, fenced, rows

FAST_RETRY = ["agent.retry.initial_delay_s=0.01", "agent.retry.max_delay_s=0.05", "agent.retry.max_attempts=2"]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(api_key=None) as srv:
        yield srv


def local_openai(base_url: str, name: str) -> list[str]:
    return ["agent=openai", f"agent.base_url={base_url}", "agent.model=x", "agent.api_key_env=null", f"name={name}",
            *FAST_RETRY]  # fmt: skip


# --- defect 1: an agent that cannot be reached never counts as finished ----------------------------------
def test_an_unreachable_endpoint_stops_the_run_and_a_resume_tries_again(base, tmp_path, capsys) -> None:
    args = [*base, *local_openai("http://127.0.0.1:9/v1", "down"), "samples=3", "turns=2"]
    assert main(["run", *args]) == 5
    err = capsys.readouterr().err
    assert "stopped: unreachable: the agent could not be reached: openai: connection error" in err
    assert "gave up after 2 attempt(s)" in err and "Traceback" not in err
    assert rows(tmp_path / "runs" / "down") == []  # no attempt recorded as finished
    assert main(["run", *args]) == 5  # a resume asks again instead of "0 this session"
    assert "openai: connection error" in capsys.readouterr().err


def test_a_base_url_without_v1_stops_at_the_first_404(server, base, tmp_path, capsys) -> None:
    assert main(["run", *base, *local_openai(server.url, "nov1"), "samples=3", "max_concurrency=1"]) == 5
    err = capsys.readouterr().err
    assert "openai HTTP 404: fake server: no endpoint /chat/completions (is agent.base_url right?)" in err
    assert len(server.requests) == 1 and rows(tmp_path / "runs" / "nov1") == []


def test_a_missing_command_stops_the_run_with_the_shell_message(base, tmp_path, capsys) -> None:
    args = [*base, "agent=command", "agent.command=nonexistent-llm-cli-7f3a", "name=nocmd", "samples=2"]
    assert main(["run", *args]) == 5
    err = capsys.readouterr().err
    assert "'nonexistent-llm-cli-7f3a' was not found (exit 127)" in err and "not found" in err
    assert rows(tmp_path / "runs" / "nocmd") == []


def test_the_summary_shows_the_first_error_of_each_kind_and_the_usage_line_once(server, base, tmp_path,
                                                                                capsys) -> None:  # fmt: skip
    server.script(reply(fenced(BROKEN)), reply("no code here"), error(500, "down"), error(500, "still down"))
    args = [*base, *local_openai(server.openai_base_url, "sum"), "samples=3", "max_concurrency=1", "quiet=false"]
    assert main(["run", *args]) == 5
    captured = capsys.readouterr()
    out = captured.out
    assert "first error of each kind:" in out
    assert re.search(r"compile_error \(1\): .*syntax error", out)
    assert re.search(r"format_error \(1\): .*no fenced code block", out)
    assert "agent unavailable (1): openai HTTP 500: still down (gave up after 2 attempt(s))" in out
    assert "(sample 1)" in out or "(sample 2)" in out  # samples count from 1, like turns
    usage_lines = [x for x in (captured.out + captured.err).splitlines() if x.startswith("tokens ")]
    assert len(usage_lines) == 1, usage_lines


# --- defect 2: a binary problem file -----------------------------------------------------------------------
def test_a_binary_problem_file_is_a_one_line_error(tmp_path, capsys) -> None:
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\xff\xfe\x00\x01 not text")
    assert main(["run", f"runs_dir={tmp_path / 'runs'}", f"problems.spec=file:{binary}", "quiet=true"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {binary}: not a text file (not UTF-8: byte 0xff at offset 0)"


# --- defect 4: the --help example for a local server runs as written -------------------------------------
def test_the_help_example_for_a_local_server_works_as_written(server, base, tmp_path, capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    (example,) = [x.strip() for x in capsys.readouterr().out.splitlines() if "agent.base_url=http://localhost" in x]
    words = example.split()[2:]  # after `harness run`
    words = [w.replace("http://localhost:8000/v1", server.openai_base_url) for w in words]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.script(*[reply("no code yet")] * 3)
    assert main(["run", *words, *base, "name=help-example"]) == 0, capsys.readouterr().err
    assert len(rows(tmp_path / "runs" / "help-example")) == 3


# --- defect 5: an empty database file ----------------------------------------------------------------------
def test_an_empty_database_is_called_empty_or_corrupt(base, tmp_path, capsys) -> None:
    run = tmp_path / "runs" / "empty"
    run.mkdir(parents=True)
    (run / "attempts.sqlite").write_bytes(b"")
    assert main(["run", *base, "name=empty"]) == 2
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("is empty or corrupt: it is not a run-store database") == 2 and "version 0" not in err
    assert (run / "attempts.sqlite").read_bytes() == b""


# --- defect 7: an unquoted comma ---------------------------------------------------------------------------
def test_an_unquoted_comma_is_bad_input_with_a_quoting_hint(tmp_path, capsys) -> None:
    assert main(["run", f"runs_dir={tmp_path}", "problems.spec=L1/13_softmax,L1/16_rms_norm"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "quote it: \"problems.spec='L1/13_softmax,L1/16_rms_norm'\"" in err
    # quoted as the hint says, the value reaches the selection (then problems.limit=0 stops it before any work)
    quoted = "problems.spec='L1/13_softmax,L1/16_rms_norm'"
    assert main(["run", f"runs_dir={tmp_path}", quoted, "problems.limit=0"]) == 2
    assert "problems.limit must be >= 1" in capsys.readouterr().err


# --- defect 8: a reader that closes the pipe early ---------------------------------------------------------
@pytest.mark.parametrize("args", [["problems", "list"], ["run", "--help"]])
def test_a_closed_pipe_ends_the_command_quietly(args) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # as `| head` does once it has enough; here before the first write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""


# --- defect 10: a version ----------------------------------------------------------------------------------
@pytest.mark.slow  # over 10 s on 2 cores: out of the quick subset
@pytest.mark.parametrize(("workers", "cap", "in_flight"), [(5, None, 5), (1, None, 4), (5, 2, 2)])
def test_trajectories_in_flight_default_to_the_evaluators_worker_count(base, tmp_path, capsys, workers, cap,
                                                                       in_flight) -> None:
    """Left null, `max_concurrency` keeps every worker busy (all GPUs' pools), and at least 4; a number caps it."""
    args = [*base, "agent=reference", f"eval.workers_per_gpu={workers}", "quiet=false", f"name=conc-{workers}-{cap}"]
    if cap is not None:
        args.append(f"max_concurrency={cap}")
    assert main(["run", *args]) == 0
    assert f"{workers} evaluator worker(s); up to {in_flight} trajectories in flight" in capsys.readouterr().err


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"harness {importlib.metadata.version('kernel-harness')}"


def test_a_resume_with_nothing_left_starts_no_evaluator(base, tmp_path, capsys) -> None:
    """A finished run resumed: the evaluator is not started (it would take seconds), the summary is the same; a run
    extended by a turn starts it again."""
    args = [*base, "agent=reference", "quiet=false", "name=done"]
    assert main(["run", *args]) == 0
    first = capsys.readouterr().err
    assert "evaluator worker(s)" in first and "nothing left to run" not in first
    assert main(["run", *args]) == 0
    out, again = capsys.readouterr()
    assert "nothing left to run: the evaluator is not started" in again and "evaluator worker(s)" not in again
    assert "resuming" in again and "stopped: finished" in out
    assert main(["run", *args, "turns=2"]) == 0  # more turns: work left, an evaluator again
    assert "evaluator worker(s)" in capsys.readouterr().err


HEAVY = ("torch", "triton", "ray", "eval.evaluator")  # what takes `harness run` seconds to import


def _heavy_imports(*args: str) -> tuple[int, list[str], str]:
    """`harness run ARGS` in a fresh interpreter: its exit code, the `HEAVY` modules it imported, its stderr."""
    probe = ("import atexit, sys\n"
             f"atexit.register(lambda: print('heavy:', *[m for m in {HEAVY!r} if m in sys.modules]))\n"
             "from harness.cli import main\n"
             "sys.exit(main(['run', *sys.argv[1:]]))\n")  # --help exits inside: the hook reports at exit
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("heavy:")]
    return done.returncode, line.split()[1:], done.stderr


def test_a_config_error_and_help_load_no_torch(tmp_path) -> None:
    """A typo, a value of the wrong type and `--help` are answered before the evaluator (torch, Triton, Ray) is
    imported: about a second, not the 15-40 s a loaded machine took (docs/benchmarks.md)."""
    for args in (["turnz=3"], ["turns=many"], [f"runs_dir={tmp_path}", "agent=openai", "agent.modle=x"]):
        code, heavy, err = _heavy_imports(*args)
        assert code == 2 and "error:" in err and heavy == [], (args, heavy, err)
    code, heavy, _ = _heavy_imports("--help")
    assert code == 0 and heavy == [], heavy


def test_a_resume_with_nothing_left_loads_no_torch(base, tmp_path) -> None:
    """Nothing left to run: no evaluator, and no GPU probe for the prompts' hardware facts (no prompt is sent)."""
    args = [*base, "agent=reference", "name=idle", "prompt.hardware=auto"]
    assert main(["run", *args]) == 0
    code, heavy, err = _heavy_imports(*args, "quiet=false")
    assert code == 0 and "nothing left to run" in err and heavy == [], (heavy, err)
