"""The `command` agent: any CLI model tool. The conversation goes to stdin, stdout is the reply."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from agents.base import AgentError, AgentResponse, Message, RetryableError, UnavailableError, Usage
from agents.settings import CommandSettings

_TAIL = 2000
_NOT_RUNNABLE = {126: "cannot be executed", 127: "was not found"}  # the shell's exit codes


class CommandAgent:
    """Runs `command` once per request (a string goes through /bin/sh, a list is executed directly).

    stdin carries the conversation as text (`### System` / `### User` / `### Assistant` sections)
    or, with input_format="json", as a JSON list of {role, content}. The process also sees
    HARNESS_PROBLEM_ID, HARNESS_SAMPLE and HARNESS_TURN (both from 1). A timeout kills its process
    group and is retryable; a command that cannot be started (or that the shell does not find: exit
    126/127) is an `UnavailableError`; any other non-zero exit is an `AgentError` with the stderr tail.
    """

    def __init__(self, settings: CommandSettings) -> None:
        command, timeout_s, input_format = settings.command, settings.timeout_s, settings.input_format
        if isinstance(command, str):
            if not command.strip():
                raise ValueError("command agent: `command` is empty")
            self._argv = ["/bin/sh", "-c", command]
            label = command
        else:
            self._argv = [str(a) for a in command]
            if not self._argv:
                raise ValueError("command agent: `command` is empty")
            label = shlex.join(self._argv)
        if input_format not in ("text", "json"):
            raise ValueError(f"command agent: input_format must be text or json, got {input_format!r}")
        if timeout_s <= 0:
            raise ValueError(f"command agent: timeout_s must be > 0, got {timeout_s}")
        self.command = label
        self.timeout_s = timeout_s
        self.input_format = input_format
        self.model = settings.model or label.split()[0]
        self.name = f"command:{self.model}"

    def __repr__(self) -> str:
        return f"CommandAgent(command={self.command!r}, timeout_s={self.timeout_s})"

    def respond(self, messages: list[Message], *, problem_id: str, sample: int, turn: int) -> AgentResponse:
        """Run the command on this conversation; stdout (decoded as UTF-8) is the reply."""
        stdin = render_conversation(messages, self.input_format)
        env = {**os.environ, "HARNESS_PROBLEM_ID": str(problem_id), "HARNESS_SAMPLE": str(sample), "HARNESS_TURN": str(turn)}
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, start_new_session=True,
            )
        except OSError as exc:
            raise UnavailableError(f"command agent: cannot start {self.command!r}: {exc.strerror or exc}") from None
        try:
            out, err = proc.communicate(stdin.encode(), timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise RetryableError(f"command agent: {self.command!r} timed out after {self.timeout_s:g}s") from None
        latency = time.perf_counter() - start
        if proc.returncode != 0:
            tail = err.decode(errors="replace")[-_TAIL:].strip() or "(no stderr)"
            if self._argv[:2] == ["/bin/sh", "-c"] and proc.returncode in _NOT_RUNNABLE:
                raise UnavailableError(
                    f"command agent: {self.command!r} {_NOT_RUNNABLE[proc.returncode]} (exit {proc.returncode}): {tail}"
                )
            raise AgentError(f"command agent: {self.command!r} exited with status {proc.returncode}: {tail}")
        return AgentResponse(
            text=out.decode(errors="replace"),
            usage=Usage(),
            cost_usd=None,
            latency_s=latency,
            model=self.model,
        )


def render_conversation(messages: list[Message], input_format: str = "text") -> str:
    """The conversation as one text (role headings) or as a JSON list of {role, content}."""
    if input_format == "json":
        return json.dumps([{"role": m.role, "content": m.content} for m in messages])
    return "\n\n".join(f"### {m.role.capitalize()}\n\n{m.content}" for m in messages) + "\n"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
