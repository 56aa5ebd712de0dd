"""Forged frames on the worker's channel.

The candidate runs inside the worker, so it can find the channel's write end (`sys.argv` of
`python -m eval.worker READ WRITE ...`, or /proc/self/fd) and write anything into it. Whatever
it writes must end as a verdict on the candidate (`crash`, with the reason), the worker must be
replaced, the session must go on, and `harness eval` must print its JSON normally (exit 0).
"""

from __future__ import annotations

import json

import pytest

from eval import EvalConfig, Evaluator, Status
from eval.crossing.wire import PREFIX
from harness.cli import main
from harness.corpus.hostile import FORWARD, GOOD, PROBLEM, RETURN, variant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # every test runs sandboxed evaluator workers


def _frame(header: object) -> bytes:
    raw = json.dumps(header).encode()
    return PREFIX.pack(len(raw), 0) + raw


FORGED: dict[str, tuple[bytes, str]] = {
    # name: (bytes written into the worker's reply pipe during forward, phrase the reason must contain)
    "huge_length_prefix": (PREFIX.pack(0xFFFFFFF0, 0), "exceeds the limit"),
    "garbage_json": (PREFIX.pack(9, 0) + b"{not json", "malformed header"),
    "prefix_disagrees_with_header": (PREFIX.pack(len(b'{"cmd": "run", "ok": true}'), 8) + b'{"cmd": "run", "ok": true}',
                                     "announced 8 tensor bytes on the pipe, its header 0"),
    "not_an_object": (_frame([1, 2, 3]), "not a JSON object"),
    "reply_to_wrong_command": (_frame({"cmd": "load", "ok": True, "tensors": []}), "answered 'load' to 'run'"),
    "ill_typed_field": (_frame({"cmd": "run", "ok": "yes", "tensors": []}), "does not fit"),
    "unknown_field": (_frame({"cmd": "run", "ok": True, "verdict": "correct", "tensors": []}), "unknown field"),
    "bad_tensor_dtype": (_frame({"cmd": "run", "ok": True, "tensors": [
        {"dtype": "object", "shape": [1], "nbytes": 8}]}), "bad tensor spec"),
    "tensor_size_mismatch": (_frame({"cmd": "run", "ok": True, "tensors": [
        {"dtype": "float32", "shape": [4], "nbytes": 8}]}), "does not match its shape"),
    "negative_dimension": (_frame({"cmd": "run", "ok": True, "tensors": [
        {"dtype": "float32", "shape": [-4], "nbytes": 0}]}), "negative dimension"),
    "offset_outside_region": (_frame({"cmd": "run", "ok": True, "tensors": [
        {"dtype": "uint8", "shape": [16], "nbytes": 16, "offset": 1 << 40}]}), "outside the shared region"),
}
# A well-formed reply announcing more tensor bytes than a reply may carry: a verdict naming the count and the setting.
OVERSIZED = (_frame({"cmd": "run", "ok": True, "tensors": [{"dtype": "uint8", "shape": [1 << 40], "nbytes": 1 << 40}]}),
             f"carried {1 << 40} bytes of tensors, over the limit of")


def forging_candidate(payload: bytes, via: str = "argv") -> str:
    """The honest candidate, which first writes `payload` into the worker's reply pipe."""
    find = ("        fd = int(sys.argv[2])\n" if via == "argv" else
            # the write end of the reply pipe: the only write-only pipe past stderr
            "        import stat\n"
            "        for name in os.listdir('/proc/self/fd'):\n"
            "            try:\n"
            "                f = int(name)\n"
            "                flags = open('/proc/self/fdinfo/%d' % f).read().split('flags:')[1].split()[0]\n"
            "                if f > 2 and stat.S_ISFIFO(os.fstat(f).st_mode) and flags.endswith('1'):\n"
            "                    fd = f\n"
            "            except OSError:\n"
            "                pass\n")
    return variant(FORWARD, "        import os, sys\n" + find + f"        os.write(fd, {payload!r})\n" + FORWARD)


# limits an honest candidate (a few CPU-seconds) stays far below on a loaded 2-core machine
LIMITS = dict(import_timeout_s=60, call_timeout_s=30)
EVALUATOR = dict(device="cpu", cache_dir=None, **LIMITS)


def test_the_output_cap_follows_the_references_own_size(problem):
    """An honest candidate whose outputs, like the reference's, exceed `eval.max_output_bytes` is judged as usual
    (KernelBench problems return up to 6.4 GB); a reply beyond the reference's size per forward is still refused."""
    # the reference returns 4096 float32 (16 KB): more than a whole reply of three 4 KB forwards
    with Evaluator(EvalConfig(device="cpu", cache_dir=None, max_output_bytes=4096, **LIMITS)) as ev:
        honest = ev.evaluate(problem, GOOD)
        bloated = ev.evaluate(problem, variant(RETURN, "        return out, torch.zeros(1 << 16)\n"))
    assert honest.status is Status.CORRECT, f"{honest.status}: {honest.reason}"
    assert bloated.status is Status.CRASH, bloated.reason
    # the first forward's reply: the reference's 16 KB plus 64 Ki float32 zeros (256 KB), over the 16 KB cap
    assert f"carried {16384 + (1 << 18)} bytes of tensors, over the limit of 16384 bytes (eval.max_output_bytes" \
        in bloated.reason, bloated.reason


def test_a_forged_oversized_reply_names_the_output_limit(evaluator, problem):
    result = evaluator.evaluate(problem, forging_candidate(OVERSIZED[0]))
    assert result.status is Status.CRASH, f"{result.status.value}: {result.reason}"
    assert OVERSIZED[1] in result.reason and "(eval.max_output_bytes" in result.reason, result.reason


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_frame_is_a_verdict_on_the_candidate(evaluator, problem, name):
    payload, phrase = FORGED[name]
    result = evaluator.evaluate(problem, forging_candidate(payload))
    assert result.status is Status.CRASH, f"{name}: {result.status.value}: {result.reason}"
    assert "broke the protocol" in result.reason and phrase in result.reason, result.reason
    after = evaluator.evaluate(problem, GOOD)  # the worker was replaced; the session goes on
    assert after.status is Status.CORRECT, after.reason + after.error


def test_channel_found_through_proc(evaluator, problem):
    result = evaluator.evaluate(problem, forging_candidate(FORGED["huge_length_prefix"][0], via="proc"))
    assert result.status is Status.CRASH and "exceeds the limit" in result.reason, result.reason + result.error


@pytest.mark.parametrize("name", ["huge_length_prefix", "garbage_json"])
def test_harness_eval_prints_json(tmp_path, capsys, name):
    problem, cand = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(PROBLEM)
    cand.write_text(forging_candidate(FORGED[name][0]))
    code = main(["eval", "--problem", str(problem), "--candidate", str(cand), "--device", "cpu", "--no-cache", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["status"] == "crash" and FORGED[name][1] in out["reason"], out["reason"]
