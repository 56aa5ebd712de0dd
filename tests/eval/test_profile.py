"""Profiles (`eval.profile`, issue 57) on a CPU: ncu's raw CSV read back from fixtures written in its format, the
feedback block and its cap, the stored record, the profiler's bounds and notes, and verdicts that no profile
(failed, forged, garbage, timed out) changes, through the real evaluator."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from agents.prompting import PromptBuilder, TurnRecord
from eval import EvalConfig, EvalResult, Status, render_feedback
from eval.profiling import ncu
from eval.profiling.profiler import Profiler, Subject, attach, read_side
from eval.profile_record import Profile
from eval.profiling.render import HEADER, MAX_CHARS, cap_profile, render_profile, short_name
from harness.corpus.candidates import EXAMPLE_TRITON
from harness.corpus.hostile import PROBLEM
from problems.problem import problem_from_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ncu"
CANDIDATE_BASIC = (FIXTURES / "candidate_basic.csv").read_text()
CANDIDATE_FULL = (FIXTURES / "candidate_full.csv").read_text()
REFERENCE = (FIXTURES / "reference_basic.csv").read_text()
OWN = {"add_relu_kernel"}
EVALUATOR = dict(device="cpu", cache_dir=None, workers_per_gpu=1, profile="basic", import_timeout_s=120,
                 call_timeout_s=60)


class Gate:
    """A `GpuGate` stand-in that records how it was held."""

    def __init__(self) -> None:
        self.holds: list[str] = []

    @contextlib.contextmanager
    def hold(self, access: str) -> Iterator[None]:
        self.holds.append(access)
        yield


def side(text: str, name: str = "candidate") -> Any:
    own = (lambda n: short_name(n) in OWN) if name == "candidate" else (lambda n: False)
    return read_side(name, 0, text, own, 300)


def a_profile(level: str = "full") -> Profile:
    candidate = CANDIDATE_FULL if level == "full" else CANDIDATE_BASIC
    return Profile(level=level, tool="NVIDIA (R) Nsight Compute Command Line Profiler Version 2025.3.1.0",
                   candidate=side(candidate), reference=side(REFERENCE, "reference"), peak_flops_per_s=51e12,
                   peak_bytes_per_s=4.3e12, seconds=9.5)


# -- ncu's raw CSV -------------------------------------------------------------------------------------------------
def test_the_raw_page_is_read_in_base_units_past_the_lines_around_it() -> None:
    launches = ncu.parse_raw_csv(CANDIDATE_BASIC)
    assert [launch["Kernel Name"] for launch in launches][0] == "add_relu_kernel"
    first = launches[0]
    assert first["gpu__time_duration.sum"] == pytest.approx(52_420.0)  # 52.42 usecond
    assert first["dram__bytes_read.sum"] == pytest.approx(134.22e6)  # Mbyte
    assert first["launch__grid_size"] == 16_384  # "16,384": thousands separators
    assert first["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"] == 16_777_216
    assert "," in launches[1]["Kernel Name"] and launches[1]["Kernel Name"].startswith("void at::native::")


def test_launches_of_one_kernel_are_summed_and_weighted() -> None:
    kernels = side(CANDIDATE_FULL).kernels
    own = kernels[0]
    assert own.name == "add_relu_kernel" and own.own and own.launches == 2
    assert own.time_ns == pytest.approx(52_420 + 51_580)
    assert own.share == pytest.approx(104_000 / (104_000 + 17_090))
    assert own.dram_bytes == pytest.approx(2 * (134.22e6 + 67.11e6))
    assert own.flops == pytest.approx(2 * 16_777_216)  # adds count one
    assert own.intensity == pytest.approx(own.flops / own.dram_bytes)
    assert (own.registers, own.shared_bytes, own.spills, own.grid, own.block) == (16, 0, 0, 16_384, 128)
    assert own.dram_pct == pytest.approx(82.51) and own.occupancy_pct == pytest.approx(85.17)
    reasons = [r for r, _ in own.stalls]
    assert reasons == ["long_scoreboard", "lg_throttle", "wait"]  # top three, largest first
    assert sum(s for _, s in own.stalls) == pytest.approx(1.0, abs=1e-3)
    library = kernels[1]
    assert not library.own and library.stalls == [] and library.dram_bytes == pytest.approx(67.16e6)


def test_a_basic_profile_has_no_stalls_and_the_reference_is_never_own() -> None:
    assert all(k.stalls == [] for k in side(CANDIDATE_BASIC).kernels)
    reference = side(REFERENCE, "reference")
    assert [k.own for k in reference.kernels] == [False, False]
    assert reference.kernels[0].time_ns > reference.kernels[1].time_ns


def test_no_table_is_an_error_and_the_side_says_why() -> None:
    with pytest.raises(ValueError):
        ncu.parse_raw_csv("==PROF== Connected to process 1\nsome output\n")
    denied = ("==PROF== Connected to process 7 (/usr/bin/python3)\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
              "permission to access NVIDIA GPU Performance Counters on the target device 0.\n")
    s = read_side("candidate", 1, denied, lambda n: True, 300)
    assert not s.kernels and "ERR_NVGPUCTRPERM" in s.note and "NVreg_RestrictProfilingToAdminUsers=0" in s.note
    s = read_side("candidate", 0, "==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n", lambda n: 1, 300)
    assert s.note == "ncu failed: Failed to initialize the profiler: LibraryNotLoaded"
    s = read_side("candidate", 3, "kh-profile: loading failed (import): SyntaxError\n", lambda n: True, 300)
    assert s.note == "the profiling process loading failed (import): SyntaxError"
    assert "ran out of its 7 s" in read_side("candidate", None, "", lambda n: True, 7).note


def test_unknown_metrics_drop_their_optional_group_once() -> None:
    refused = "==ERROR== Failed to find metric sm__ops_path_tensor_src_fp64.sum\n"
    assert ncu.retry_without(refused, "full", set()) == {"tensor_ops"}
    assert ncu.retry_without("==ERROR== Failed to find metric foo__bar.sum", "full", {"tensor_ops"}) == {"stalls"}
    assert ncu.retry_without(refused, "basic", {"tensor_ops"}) is None  # nothing optional left: no second retry
    assert ncu.retry_without(CANDIDATE_BASIC, "basic", set()) is None
    assert "sm__ops_path_tensor_src_fp64.sum" not in ncu.metrics("basic", {"tensor_ops"})
    assert not any("stalled" in m for m in ncu.metrics("basic"))
    assert any("stalled" in m for m in ncu.metrics("full"))


def test_the_command_profiles_only_the_marked_call_and_leaves_the_clocks_alone() -> None:
    cmd = ncu.command("/opt/ncu/ncu", "basic")
    assert cmd[0] == "/opt/ncu/ncu"
    for pair in (["--profile-from-start", "off"], ["--clock-control", "none"], ["--page", "raw"]):
        assert any(cmd[i:i + 2] == pair for i in range(len(cmd)))
    assert cmd[cmd.index("--metrics") + 1].split(",") == ncu.metrics("basic")


# -- the feedback block ---------------------------------------------------------------------------------------------
def test_the_block_names_what_a_tuner_reads() -> None:
    text = render_profile(a_profile("full"))
    assert text.startswith(HEADER)
    own = next(line for line in text.splitlines() if line.startswith("- add_relu_kernel"))
    for part in ("86% of the call's GPU time", "2 launches", "DRAM 83% of peak", "SM 21%", "occupancy 85%",
                 "16 registers/thread", "0 B shared memory/block", "no spills", "memory-bound against the ridge at 12",
                 "of the measured copy bandwidth", "stalls: long_scoreboard"):
        assert part in own, part
    assert "Library kernels in your call: 14%" in text
    assert "The reference's main kernels (PyTorch):" in text and "at::native::vectorized_elementwise_kernel" in text
    assert "std::array" not in text.split("Library kernels")[0]  # argument lists are left out of names


def test_no_profile_is_a_note_not_a_failure() -> None:
    text = render_profile(Profile(level="basic", note="Nsight Compute (ncu) was not found on PATH"))
    assert text.splitlines()[1] == "Not available: Nsight Compute (ncu) was not found on PATH"


def test_the_block_comes_last_and_the_prompt_cuts_it() -> None:
    result = EvalResult(status=Status.CORRECT, reason="correct", profile=a_profile("full"), flags=["an audit note"])
    feedback = render_feedback(result)
    assert feedback.rfind("Note: an audit note") < feedback.index(HEADER)
    block = feedback[feedback.index(HEADER):]
    assert len(block) <= MAX_CHARS + 80
    cut = cap_profile(feedback, 300)
    assert cut.startswith(feedback[:feedback.index(HEADER)]) and len(cut) < feedback.index(HEADER) + 300 + 80
    assert cut.endswith("(profile cut at 300 characters: prompt.profile_chars)")
    assert HEADER not in cap_profile(feedback, 0) and "Note: an audit note" in cap_profile(feedback, 0)
    assert cap_profile(feedback, 100_000) == feedback
    plain = render_feedback(EvalResult(status=Status.CORRECT, reason="correct"))
    assert HEADER not in plain and cap_profile(plain, 10) == plain


def test_prompt_profile_chars_caps_the_block_in_the_next_turn() -> None:
    feedback = render_feedback(EvalResult(status=Status.CORRECT, reason="correct", profile=a_profile("full")))
    record = TurnRecord(turn=1, reply="r", code="c", feedback=feedback)
    default = PromptBuilder("triton").feedback_prompt(record)
    assert HEADER in default and "add_relu_kernel" in default
    short = PromptBuilder("triton", profile_chars=200).feedback_prompt(record)
    assert "prompt.profile_chars" in short and len(short) < len(default)
    assert HEADER not in PromptBuilder("triton", profile_chars=0).feedback_prompt(record)
    assert PromptBuilder.from_config({"backend": "triton", "profile_chars": 0}).profile_chars == 0
    with pytest.raises(ValueError, match="profile_chars"):
        PromptBuilder("triton", profile_chars=-1)


# -- the stored record ----------------------------------------------------------------------------------------------
def test_a_profile_round_trips_with_its_result_and_old_results_still_read() -> None:
    result = EvalResult(status=Status.CORRECT, reason="correct", profile=a_profile("full"))
    back = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back.profile == result.profile and back.profile.ridge == pytest.approx(51e12 / 4.3e12)
    old = result.to_dict()
    del old["profile"]
    assert EvalResult.from_dict(old).profile is None
    grown = result.to_dict()
    grown["profile"]["a_field_from_later"] = 1
    grown["profile"]["candidate"]["kernels"][0]["another"] = 2
    assert EvalResult.from_dict(grown).profile == result.profile


def test_the_setting_is_checked_and_keys_the_cache_only_when_on() -> None:
    with pytest.raises(ValueError, match="eval.profile must be one of off, basic, full"):
        EvalConfig(profile="everything")
    assert "profile" not in EvalConfig().cache_fields()
    assert EvalConfig(profile="basic").cache_fields()["profile"] == "basic"
    assert "profile_timeout_s" not in EvalConfig(profile="basic").cache_fields()


# -- the profiler, with its processes faked -------------------------------------------------------------------------
SUBJECT = Subject("PROBLEM", "<p>", "CANDIDATE")
REFERENCE_SUBJECT = Subject("PROBLEM", "<p>", None)


def profiler(level: str = "basic") -> Profiler:
    p = Profiler(level, "ncu", 60.0)
    p._ncu = ("/opt/ncu/ncu", "Version 2025.3.1.0")  # found: no `ncu --version` here
    return p


def test_the_reference_is_profiled_once_per_problem_and_the_gate_held_exclusively() -> None:
    calls: list[dict[str, Any]] = []

    def launch(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        request = json.loads(env["KH_PROFILE_REQUEST"])
        calls.append(request)
        return 0, REFERENCE if request["load"]["candidate_source"] is None else CANDIDATE_BASIC

    p, gate = profiler(), Gate()
    first = p.profile(SUBJECT, REFERENCE_SUBJECT, OWN, "float32", ("hash", False), gate, launch)
    second = p.profile(SUBJECT, REFERENCE_SUBJECT, OWN, "float32", ("hash", False), gate, launch)
    assert [c["load"]["subject"] for c in calls] == ["reference", "candidate", "candidate"]
    assert calls[0]["load"]["weight_seed"] != calls[1]["load"]["weight_seed"]  # fresh seeds for every process
    assert gate.holds == ["exclusive", "exclusive"]
    assert first.note == "" and first.candidate.kernels[0].own and second.reference == first.reference
    assert first.tool == "Version 2025.3.1.0" and first.seconds >= 0


def test_metrics_this_ncu_refuses_are_dropped_for_good_after_one_retry() -> None:
    commands: list[list[str]] = []

    def launch(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        commands.append(cmd)
        metrics = cmd[cmd.index("--metrics") + 1]
        if "sm__ops_path_tensor" in metrics:
            return 1, "==ERROR== Failed to find metric sm__ops_path_tensor_src_fp64.sum\n"
        return 0, CANDIDATE_BASIC

    p = profiler()
    assert p.profile(SUBJECT, REFERENCE_SUBJECT, OWN, "float32", ("h", False), Gate(), launch).candidate.kernels
    assert len(commands) == 3  # reference: refused, then without tensor ops; candidate: without them at once


def test_no_ncu_is_a_note_and_no_process() -> None:
    p = Profiler("basic", "surely-no-such-ncu-here", 60.0)

    def launch(*args: Any) -> tuple[int, str]:
        raise AssertionError("no process may start without ncu")

    profile = p.profile(SUBJECT, REFERENCE_SUBJECT, OWN, "float32", ("h", False), Gate(), launch)
    assert "was not found on PATH" in profile.note and profile.candidate is None
    assert render_profile(profile).splitlines()[1].startswith("Not available: Nsight Compute")


def test_sources_too_large_for_the_environment_are_noted() -> None:
    big = Subject("PROBLEM", "<p>", "x" * 200_000)
    profile = profiler().profile(big, REFERENCE_SUBJECT, OWN, "float32", ("h", False), Gate(),
                                 lambda *a: (0, REFERENCE))
    assert "too large" in profile.candidate.note and profile.note


def test_a_profiler_that_raises_leaves_a_note_and_the_result_as_it_was() -> None:
    result = EvalResult(status=Status.CORRECT, reason="correct", speedup=1.5, flags=["x"])
    before = result.to_dict()

    def broken() -> Profile:
        raise RuntimeError("boom")

    attach(result, broken)
    after = result.to_dict()
    assert after.pop("profile")["note"] == "the profiler failed: RuntimeError: boom"
    before.pop("profile")
    assert after == before


# -- the real evaluator: no profile changes a verdict ---------------------------------------------------------------
VERDICT = ("status", "reason", "speedup", "candidate_timing", "reference_timing", "mismatch", "kernels", "flags",
           "trials", "distributions", "workloads", "unscored", "sol_fraction", "error")
FORGED = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum"\n'
          '"","","","","","","","","","","","%","nsecond"\n'
          '"0","1","x","h","add_relu_kernel","1","7","(1,1,1)","(1,1,1)","0","9.0","1e9","-5"\n')
OUTPUTS = {"forged": (0, FORGED), "garbage": (0, "\x00\xff" * 5000 + '"ID",broken'), "timed out": (None, ""),
           "refused": (1, "==ERROR== ERR_NVGPUCTRPERM - no permission\n")}


@pytest.fixture(scope="module")
def add_relu() -> Any:
    return problem_from_source(PROBLEM, name="add_relu")


def _verdict(result: EvalResult) -> dict[str, Any]:
    d = result.to_dict()
    return {k: d[k] for k in VERDICT}


def test_no_profile_changes_the_verdict(evaluator: Any, add_relu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    profiler_on = evaluator._profiler
    evaluator._profiler = None  # eval.profile=off
    try:
        off = evaluator.evaluate(add_relu, EXAMPLE_TRITON)
    finally:
        evaluator._profiler = profiler_on
    assert off.status is Status.CORRECT and off.profile is None
    on = evaluator.evaluate(add_relu, EXAMPLE_TRITON)  # on a CPU: a note, never a failure
    assert _verdict(on) == _verdict(off) and "need a CUDA GPU" in on.profile.note
    assert render_feedback(on).endswith("hardware counters)")
    for name, (code, output) in OUTPUTS.items():
        def evaluation(self: Profiler, problem: Any, source: str, ext: Any, result: EvalResult, gate: Any,
                       launch: Any, code: Any = code, output: str = output) -> Profile:
            self._ncu = ("/opt/ncu/ncu", "forged")
            return self.profile(Subject(problem.source, "<p>", source), Subject(problem.source, "<p>"), OWN,
                                problem.dtype, (name, False), gate, lambda *a: (code, output))

        monkeypatch.setattr(Profiler, "evaluation", evaluation)
        forged = evaluator.evaluate(add_relu, EXAMPLE_TRITON)
        assert _verdict(forged) == _verdict(off), name
        assert forged.profile is not None and (forged.profile.note or name == "forged"), name
        if name == "forged":  # stored as it came, a diagnostic only
            assert forged.profile.candidate.kernels[0].dram_pct == 1e9
        render_feedback(forged)  # renders whatever it holds

    def raising(*args: Any, **kwargs: Any) -> Profile:
        raise OSError("the profiler's process could not start")

    monkeypatch.setattr(Profiler, "evaluation", raising)
    failed = evaluator.evaluate(add_relu, EXAMPLE_TRITON)
    assert _verdict(failed) == _verdict(off) and failed.profile.note.startswith("the profiler failed: OSError")


def test_only_correct_candidates_are_profiled(evaluator: Any, add_relu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(Profiler, "evaluation", lambda self, *a, **k: asked.append("asked") or Profile())
    wrong = evaluator.evaluate(add_relu, EXAMPLE_TRITON.replace("tl.maximum(a + b, 0.0)", "a + b"))
    assert wrong.status is Status.INCORRECT and wrong.profile is None and asked == []


# -- a whole run: the block reaches the next turn's prompt ----------------------------------------------------------
def test_a_run_hands_the_profile_block_to_the_next_turn(base: list[str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU the block says why there is no profile; `tests/eval/test_profile_gpu.py` has the GPU's."""
    from harness.cli import main
    from tests.fakes.llm_server import FakeLLMServer, reply
    from tests.run_fixtures import GOOD, fenced

    monkeypatch.setenv("OPENAI_API_KEY", "sk-profile-cpu-test")
    with FakeLLMServer(api_key="sk-profile-cpu-test") as server:
        server.script(reply(fenced(GOOD)), reply(fenced(GOOD + "\n# again\n")))
        code = main(["run", *base, "agent=openai", f"agent.base_url={server.openai_base_url}", "agent.model=fake",
                     "name=profiled", "turns=2", "samples=1", "eval.profile=basic", "prompt.profile_chars=60"])
        assert code == 0
        turn2 = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "user"][-1]
    assert "Status: correct" in turn2 and HEADER in turn2
    assert "(profile cut at 60 characters: prompt.profile_chars)" in turn2
    stored = [json.loads(line) for line in (tmp_path / "runs" / "profiled" / "results.jsonl").read_text().splitlines()]
    assert all("need a CUDA GPU" in x["result"]["profile"]["note"] for x in stored)
    assert "Not available: profiles need a CUDA GPU" in stored[0]["feedback"]  # stored whole, cut only in prompts


# -- the profiling process's sandbox --------------------------------------------------------------------------------
_SANDBOX_CHECK = r"""
import fcntl, json, os, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0)))[1]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
client = socket.create_connection(server.getsockname(), timeout=5)
conn, _ = server.accept()
client.sendall(b"ok")
devices = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
print("KHCHECK " + json.dumps({"up": bool(flags & 1), "tcp": conn.recv(2).decode(), "devices": devices,
                               "bound": os.listdir(sys.argv[1]), "writable": os.access(sys.argv[1], os.W_OK),
                               "command": sys.argv[2:]}))
"""


def test_a_profiling_process_has_its_loopback_its_tool_read_only_and_no_network(tmp_path: Path) -> None:
    """What ncu needs in the sandbox (its front end reaches its target over loopback; its installation), and no
    more: the network namespace holds loopback alone, and the tool's folder is read-only."""
    import sys

    from eval import WorkerProcess, sandbox_plan
    from eval.profiling.profiler import wait_for

    if not sandbox_plan().filesystem:
        pytest.skip(f"no sandbox here: {sandbox_plan().note}")
    tool = tmp_path / "nsight-compute"
    tool.mkdir()
    (tool / "ncu").write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=1 << 16, isolate_network=True,
                           wrapper=[sys.executable, "-c", _SANDBOX_CHECK, str(tool)],
                           module="eval.worker.profile_target", extra_binds=[str(tool)])
    code, output = wait_for(worker, 120)
    line = next((x for x in output.splitlines() if x.startswith("KHCHECK ")), None)
    assert code == 0 and line is not None, output
    seen = json.loads(line[len("KHCHECK "):])
    assert seen["up"] and seen["tcp"] == "ok" and seen["devices"] == ["lo"], seen
    assert seen["bound"] == ["ncu"] and not seen["writable"], seen
    command = seen["command"]  # the profiled command follows the wrapper
    assert command[0] == sys.executable and command[command.index("-m") + 1] == "eval.worker.profile_target", seen


def test_the_profiling_process_loads_and_runs_each_subject_in_the_sandbox(evaluator: Any, problem: Any,
                                                                          tmp_path: Path) -> None:
    """The whole launcher on a CPU: the evaluator's sandboxed process under a fake ncu (which runs the profiled
    command, then prints a fixture table), `eval.worker.profile_target` loading the candidate (or the reference)
    from its request and calling forward under the Triton interpreter, and the parent reading the table."""
    import sys
    from functools import partial

    from problems import public_source

    tool = tmp_path / "fake-ncu"
    tool.mkdir()
    (tool / "candidate.csv").write_text(CANDIDATE_BASIC)
    (tool / "reference.csv").write_text(REFERENCE)
    script = tool / "ncu"
    script.write_text(
        "#!/bin/sh\n"
        f'while [ "$#" -gt 0 ] && [ "$1" != "{sys.executable}" ]; do shift; done\n'
        '"$@" || exit $?\n'  # the profiled command: it must load and run its subject
        f"case \"$KH_PROFILE_REQUEST\" in *'\"candidate_source\": null'*) cat {tool}/reference.csv;; "
        f"*) cat {tool}/candidate.csv;; esac\n")
    script.chmod(0o755)
    tool.chmod(0o755)
    p = Profiler("basic", str(script), 120.0)
    label = f"<{problem.id}>"
    candidate = Subject(public_source(problem.source), label, EXAMPLE_TRITON)
    profile = p.profile(candidate, Subject(problem.source, label), OWN, problem.dtype, ("launcher", False), Gate(),
                        partial(evaluator._run_profiling, None))
    assert profile.note == "", profile.note
    assert [k.name for k in profile.candidate.kernels if k.own] == ["add_relu_kernel"]
    assert profile.reference.kernels[0].name.startswith("void at::native::vectorized_elementwise_kernel")
    broken = Subject(public_source(problem.source), label, "this is not python")
    failed = p.profile(broken, Subject(problem.source, label), OWN, problem.dtype, ("launcher", False), Gate(),
                       partial(evaluator._run_profiling, None))
    assert failed.candidate.note.startswith("the profiling process loading failed (import)"), failed.candidate.note
