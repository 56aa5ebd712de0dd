"""What the agent reads of a result (`eval.feedback`)."""

from __future__ import annotations


def test_the_agent_sees_no_harness_frames_and_no_host_paths():
    """Feedback tracebacks leave out the harness's own frames and absolute host paths (the researcher keeps the
    whole text in `EvalResult.error`)."""
    from eval import EvalResult, Status
    from eval.feedback import render_feedback
    from eval.process.confine import PROJECT_ROOT

    error = (f'Traceback (most recent call last):\n  File "{PROJECT_ROOT}/eval/worker/serve.py", line 414, in serve\n'
             "    reply, out = handlers[msg.cmd](msg, tensors)\n                 ^^^^^^^^^^^^^^^^^^\n"
             '  File "/tmp/kh-worker-1.2-abc/kh_candidate_7.py", line 30, in forward\n'
             "    add_relu_kernel[grid](a, b, out, n)\n"
             '  File "/opt/venv/lib/python3.12/site-packages/triton/runtime/jit.py", line 370, in <lambda>\n'
             "    return lambda *args: self.run(*args)\nValueError: bad grid\n")
    text = render_feedback(EvalResult(status=Status.RUNTIME_ERROR, reason="forward raised", error=error))
    assert "serve.py" not in text and "handlers[msg.cmd]" not in text and str(PROJECT_ROOT) not in text
    assert "/tmp/" not in text and "/opt/" not in text
    assert 'File "kh_candidate_7.py", line 30, in forward' in text and 'File "triton/runtime/jit.py"' in text
    assert "ValueError: bad grid" in text


def test_a_verdict_other_than_correct_carries_no_speedup_stored_or_new():
    """The status decides the evidence (`EvalResult.settle`, applied to every verdict and every result read back):
    a speedup left by a step that rejected after timing reaches neither feedback nor the store."""
    from eval import EvalResult, Status, Timing
    from eval.feedback import render_feedback

    timing = Timing(median_ms=0.08, iqr_ms=0.001, n=64, rel_stderr=0.01, min_ms=0.079)
    for status in (Status.REJECTED, Status.INCORRECT, Status.RUNTIME_ERROR):
        result = EvalResult(status=status, reason="after timing", candidate_timing=timing, reference_timing=timing,
                            speedup=185.0, speedup_compile=3.0, sol_fraction=0.9).settle()
        assert (result.speedup, result.speedup_compile, result.sol_fraction) == (None, None, None), status
        assert result.candidate_timing == timing  # the times stay as the rejection's evidence
        assert "185" not in render_feedback(result) and "Speed-of-light" not in render_feedback(result)
        stored = dict(EvalResult(status=status).to_dict(), speedup=185.0)  # as an older store may hold it
        assert EvalResult.from_dict(stored).speedup is None
    correct = EvalResult(status=Status.CORRECT, candidate_timing=timing, reference_timing=timing, speedup=1.5)
    assert correct.settle().speedup == 1.5 and EvalResult.from_dict(correct.to_dict()).speedup == 1.5


def test_a_result_timed_then_rejected_renders_its_times_without_a_speedup():
    """A candidate rejected after its timing keeps both sides' times and has no speedup: the service rendered its
    feedback with a 500 (`format` of None) on the H100, 2026-11-26."""
    from eval import EvalResult, Status, Timing
    from eval.feedback import render_feedback

    timing = Timing(median_ms=0.08, iqr_ms=0.001, n=64, rel_stderr=0.01, min_ms=0.079)
    result = EvalResult(status=Status.REJECTED, reason="integrity: the wall bound", candidate_timing=timing,
                        reference_timing=timing, speedup=None)
    text = render_feedback(result)
    assert "candidate 80.0 us" in text and "PyTorch eager 80.0 us" in text and "speedup" not in text
