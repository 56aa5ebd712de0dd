"""`harness run` against replies, stores and settings that are broken in ways a real provider, disk or user has
shown: each is that attempt's verdict or one clear error, never a harness failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from harness.cli import main
from tests.fakes.llm_server import FakeLLMServer, raw, reply
from tests.run_fixtures import rows

KEY = "sk-faults-test-5a4b3c2d1e"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeLLMServer(api_key=KEY) as srv:
        yield srv


def openai_args(server: FakeLLMServer, name: str, **extra: object) -> list[str]:
    args = ["agent=openai", f"agent.base_url={server.openai_base_url}", "agent.model=fake-coder", f"name={name}",
            "agent.retry.initial_delay_s=0.01", "agent.retry.max_delay_s=0.05", "agent.retry.max_attempts=3"]
    return args + [f"{k}={v}" for k, v in extra.items()]


def completion(content: Any) -> bytes:
    """A Chat Completions body whose message content is `content` (any JSON value)."""
    return json.dumps({"id": "chatcmpl-odd", "object": "chat.completion", "created": 1, "model": "fake-coder",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()


def test_malformed_replies_are_their_attempts_verdicts_and_the_run_goes_on(server, base, tmp_path) -> None:
    """A content that is a number, a body that is not UTF-8 and a lone surrogate are each recorded for their own
    attempt; the run finishes, and a resume repeats none of them."""
    not_utf8 = completion("I wrote it: \u00ff").replace(b"\\u00ff", b"\xff")
    surrogate = completion("No code yet SURROGATE.").replace(b"SURROGATE", b"\\ud800")
    server.script(reply("No code yet."), raw(completion(42)), raw(not_utf8), raw(surrogate))
    args = [*base, *openai_args(server, "odd", samples=4, max_concurrency=1)]
    assert main(["run", *args]) == 0
    got = rows(tmp_path / "runs" / "odd", "sample, status, error, reply")
    assert [(s, st) for s, st, _, _ in got] == [(1, "format_error"), (2, "agent_error"), (3, "agent_error"),
                                               (4, "format_error")]
    assert "not a string" in got[1][2] and "int" in got[1][2]
    assert "not valid UTF-8" in got[2][2]
    assert got[3][3] == "No code yet \ufffd."
    assert main(["run", *args]) == 0 and len(server.requests) == 4


@pytest.mark.parametrize("override, named", [
    ("target_speedup=nan", "target_speedup must be > 0 or null, got nan"),
    ("budget.max_cost_usd=nan", "budget.max_cost_usd must be >= 0 or null, got nan"),
    ("agent.timeout_s=0", "timeout_s must be a number of seconds > 0"),
    ("agent.base_url=notaurl", "base_url must be an http:// or https:// URL"),
])
def test_settings_that_would_do_nothing_are_refused_in_one_line(server, base, tmp_path, capsys, override,
                                                                named) -> None:
    args = [*base, *openai_args(server, "idle", model="gpt-4o"), override]
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1, err
    assert not server.requests and not (tmp_path / "runs" / "idle").exists()


def test_a_huge_reply_is_stored_whole_but_sent_back_cut_and_the_feedback_says_so(server, base, tmp_path) -> None:
    huge = "Thinking aloud. " * 655_360  # about 10 MB of prose, no code
    server.script(reply(huge), reply("No code yet."))
    assert main(["run", *base, *openai_args(server, "huge", turns=2)]) == 0
    ((stored,), _) = rows(tmp_path / "runs" / "huge", "reply")
    assert stored == huge
    second = server.requests[1].body["messages"]
    sent_back = next(m["content"] for m in second if m["role"] == "assistant")
    assert huge.startswith(sent_back) and len(sent_back) < len(huge) // 100
    assert f"your reply was {len(huge):,} characters long" in second[-1]["content"]
