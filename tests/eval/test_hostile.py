"""The evaluator against honest and hostile candidates, on CPU through the Triton interpreter.

One evaluator session serves every case, so each test also shows that the session survives
the previous candidate and evaluates the next one normally.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from eval import Status
from harness.corpus.hostile import GOOD, HONEST, HOSTILE, TAMPERING
from tests.machine import MOUNT_NS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # every test runs sandboxed evaluator workers


# limits an honest candidate stays far below on a loaded 2-core machine (its slowest load here took 3.4 s at a load
# average of 3.5: the import limit is nine times that); the two looping candidates spend them whole
EVALUATOR = dict(device="cpu", cache_dir=None, import_timeout_s=30, call_timeout_s=30)


@pytest.fixture(scope="module", autouse=True)
def parent_secrets() -> Iterator[None]:
    """Secrets in the parent's environment that no candidate may read; autouse, so set before the evaluator starts."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", "sk-test-secret-must-not-leak")
        env.setenv("MY_SERVICE_TOKEN", "tok-secret")
        yield


def test_honest_candidate_is_correct(evaluator, problem):
    result = evaluator.evaluate(problem, GOOD)
    assert result.status is Status.CORRECT, result.reason + result.error
    assert result.kernels.own_kernels_launched == ["add_relu_kernel"]
    assert result.trials >= 5
    assert result.speedup is None and not result.timing_meaningful
    assert result.network_isolated is True  # `unshare -n` works here and in CI (as root, or with -r otherwise)
    assert result.filesystem_isolated is MOUNT_NS


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_lookalike_is_correct(evaluator, problem, name):
    """Honest candidates that resemble tampering (e.g. timing their own variants) are never refused."""
    result = evaluator.evaluate(problem, HONEST[name])
    assert result.status is Status.CORRECT, f"{name}: {result.reason} {result.error}"


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidate(evaluator, problem, name):
    source, expected, phrase = HOSTILE[name]
    result = evaluator.evaluate(problem, source)
    text = f"{result.reason}\n{result.error}\n{result.stdout_tail}"
    assert result.status.value == expected, f"{name}: got {result.status.value}: {text[-2000:]}"
    assert phrase and phrase in text, f"{name}: reason lacks {phrase!r}: {text[-2000:]}"
    # the session still evaluates an honest candidate normally afterwards
    after = evaluator.evaluate(problem, GOOD)
    assert after.status is Status.CORRECT, f"after {name}: {after.reason} {after.error}"


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_tampering_is_rejected_naming_the_change(evaluator, problem, name):
    """A change to the worker process that outlives the candidate's call is rejected by the tamper snapshot."""
    source, phrase = TAMPERING[name]
    result = evaluator.evaluate(problem, source)
    assert result.status is Status.REJECTED, f"{name}: got {result.status.value}: {result.reason} {result.error[-1500:]}"
    assert result.reason.startswith("integrity: ") and phrase in result.reason, f"{name}: {result.reason}"
    after = evaluator.evaluate(problem, GOOD)
    assert after.status is Status.CORRECT, f"after {name}: {after.reason} {after.error}"


def test_large_output_is_capped(evaluator, problem):
    source = HOSTILE["os_exit_in_forward"][0].replace("import os", "import os, sys\n        sys.stdout.write('y' * (50 << 20)); sys.stdout.flush()")
    result = evaluator.evaluate(problem, source)
    assert result.status is Status.CRASH
    assert len(result.stdout_tail) < 10_000
    assert "output dropped" in result.stdout_tail or "characters trimmed" in result.stdout_tail
    # the verdict names the log's size and its setting
    took = re.search(r"its log took (\d+) bytes, over the limit of twice eval.log_cap_bytes \(16384\)", result.reason)
    assert took and int(took.group(1)) >= 50 << 20, result.reason


def test_running_out_of_memory_is_retried_alone_then_a_verdict_naming_the_step(evaluator, problem):
    """Out of memory beside other evaluations is not the candidate's fault: it is evaluated again alone, in a new
    worker; running out alone too is a runtime_error that says so (here the candidate raises it itself)."""
    source = HOSTILE["raises"][0].replace("raise ValueError('boom')", "raise torch.OutOfMemoryError('kh-oom')")
    result = evaluator.evaluate(problem, source)
    assert result.status is Status.RUNTIME_ERROR, f"{result.status}: {result.reason}"
    assert "ran out of memory in the 'run' step with this evaluation alone" in result.reason, result.reason
    assert "kh-oom" in result.reason, result.reason
    assert any("evaluated again alone" in f for f in result.flags), result.flags
    after = evaluator.evaluate(problem, GOOD)
    assert after.status is Status.CORRECT, f"{after.reason} {after.error}"
