"""A scripted LLM provider on 127.0.0.1, speaking OpenAI Chat Completions and Anthropic Messages.

Tests talk to it with the real SDK clients. Each request takes the next scripted action, in
order: a reply, an HTTP error (optionally with Retry-After), a slow reply (to trip client
timeouts) or a raw body (malformed replies). Requests with a wrong API key get a 401 before
any action is taken; an exhausted script answers 400, so a test that makes more requests
than it scripted fails loudly instead of hanging.

    with FakeLLMServer(api_key="sk-test") as server:
        server.script(reply("hello"), error(429, retry_after=0.01), reply("again"))
        OpenAI(base_url=server.openai_base_url, api_key="sk-test") ...
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Action:
    """What the server does for one request."""

    status: int = 200
    text: str | None = None  # reply text (status 200, unless `raw` is set)
    message: str = ""  # error message (status != 200)
    raw: bytes | None = None  # send these bytes as the body instead
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    input_tokens: int | None = None  # None: estimated from the request
    output_tokens: int | None = None
    cached_tokens: int = 0
    finish_reason: str | None = None
    thinking: str | None = None  # Anthropic: a thinking block before the text
    usage: bool = True  # False: the reply carries no `usage` (some OpenAI-compatible servers send none)


def reply(text: str, **kwargs: Any) -> Action:
    """A successful reply with `text` (usage counts optional)."""
    return Action(text=text, **kwargs)


def error(status: int, message: str = "scripted error", *, retry_after: float | None = None) -> Action:
    """An HTTP error in the provider's error format; Retry-After in seconds if given."""
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    return Action(status=status, message=message, headers=headers)


def slow(delay_s: float, text: str = "too late") -> Action:
    """A reply sent only after `delay_s` seconds."""
    return Action(text=text, delay_s=delay_s)


def raw(body: bytes, status: int = 200, content_type: str = "application/json") -> Action:
    """Send `body` verbatim (malformed replies)."""
    return Action(status=status, raw=body, headers={"content-type": content_type})


@dataclass
class Recorded:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: Any


class FakeLLMServer:
    """The server; use as a context manager. `api_key=None` accepts any key."""

    def __init__(self, *, api_key: str | None = "sk-test-key") -> None:
        self.api_key = api_key
        self.requests: list[Recorded] = []
        self._actions: deque[Action] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def script(self, *actions: Action) -> None:
        """Queue actions for the next requests, in order."""
        with self._lock:
            self._actions.extend(actions)

    @property
    def pending(self) -> int:
        """Scripted actions not used yet."""
        with self._lock:
            return len(self._actions)

    def __enter__(self) -> "FakeLLMServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    # --- request handling (called from handler threads) ---

    def _next_action(self) -> Action | None:
        with self._lock:
            return self._actions.popleft() if self._actions else None

    def _respond(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append(Recorded(path, headers, body))
        endpoint = path.split("?")[0].rstrip("/")  # served at the root only, as the real APIs are
        anthropic = endpoint == "/v1/messages"
        if not anthropic and endpoint != "/v1/chat/completions":
            return _error_body(anthropic, 404, f"fake server: no endpoint {path}")
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        given = (headers.get("x-api-key") or bearer) if anthropic else bearer
        if self.api_key is not None and given != self.api_key:
            return _error_body(anthropic, 401, f"Incorrect API key provided: {given}")
        action = self._next_action()
        if action is None:
            return _error_body(anthropic, 400, "fake server: script exhausted")
        if action.delay_s and self._stopping.wait(action.delay_s):
            return _error_body(anthropic, 503, "fake server: shutting down")
        if action.raw is not None:
            return action.status, action.headers, action.raw
        if action.status != 200:
            status, hdrs, payload = _error_body(anthropic, action.status, action.message)
            return status, {**hdrs, **action.headers}, payload
        make = _anthropic_message if anthropic else _openai_completion
        return 200, {"content-type": "application/json", **action.headers}, json.dumps(make(action, body, next(self._ids))).encode()


def _estimate_input(body: Any) -> int:
    if not isinstance(body, dict):
        return 1
    chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) + len(str(body.get("system", "")))
    return max(chars // 4, 1)


def _openai_completion(action: Action, body: Any, n: int) -> dict[str, Any]:
    prompt = action.input_tokens if action.input_tokens is not None else _estimate_input(body)
    completion = action.output_tokens if action.output_tokens is not None else max(len(action.text or "") // 4, 1)
    out = {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": action.text},
            "finish_reason": action.finish_reason or "stop",
        }],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": action.cached_tokens},
        },
    }
    if not action.usage:
        del out["usage"]
    return out


def _anthropic_message(action: Action, body: Any, n: int) -> dict[str, Any]:
    total_in = action.input_tokens if action.input_tokens is not None else _estimate_input(body)
    output = action.output_tokens if action.output_tokens is not None else max(len(action.text or "") // 4, 1)
    content: list[dict[str, Any]] = []
    if action.thinking is not None:
        content.append({"type": "thinking", "thinking": action.thinking, "signature": "fake-signature"})
    content.append({"type": "text", "text": action.text or ""})
    return {
        "id": f"msg_fake_{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake-model"),
        "content": content,
        "stop_reason": action.finish_reason or "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": total_in - action.cached_tokens,
            "output_tokens": output,
            "cache_read_input_tokens": action.cached_tokens,
            "cache_creation_input_tokens": 0,
        },
    }


def _error_body(anthropic: bool, status: int, message: str) -> tuple[int, dict[str, str], bytes]:
    if anthropic:
        kind = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}.get(status, "api_error")
        payload = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        payload = {"error": {"message": message, "type": "fake_error", "code": status}}
    return status, {"content-type": "application/json"}, json.dumps(payload).encode()


def _make_handler(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            length = int(self.headers.get("content-length", 0))
            data = self.rfile.read(length) if length else b""
            try:
                body = json.loads(data) if data else None
            except json.JSONDecodeError:
                body = data.decode(errors="replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, out_headers, payload = server._respond(self.path, headers, body)
            try:
                self.send_response(status)
                for k, v in out_headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout); nothing to deliver

        def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
            return

    return Handler
