"""What the agent reads of a result (`eval.feedback`)."""

from __future__ import annotations


def test_the_agent_sees_no_harness_frames_and_no_host_paths():
    """Feedback tracebacks leave out the harness's own frames and absolute host paths (the researcher keeps the
    whole text in `EvalResult.error`)."""
    from eval import EvalResult, Status
    from eval.feedback import render_feedback
    from eval.sandbox import PROJECT_ROOT

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
