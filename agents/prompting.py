"""Prompt rendering: template files in `agents/prompts/` turned into a conversation for an agent.

Templates use `string.Template` placeholders (`$name`; write `$$` for a literal dollar):
- the task template (`triton.md`, `cuda.md`, or your own): $problem_source (without `META`
  and `get_extra_inputs`, see `visible_source`), $hardware,
  $example_reference, $example_solution (the worked example for the backend);
- the feedback template (`feedback.md`): $turn (the attempt evaluated), $feedback;
- the system template (`system.md`): no placeholders.
A template is named in config: a bare name is looked up in `prompts_dir` (if given), then in
`agents/prompts/`; a path to a `.md` file is used as is. Unknown placeholders fail at construction.

Context policy: `full` sends every earlier reply verbatim, up to `MAX_REPLY_CHARS` (a longer one is
cut, and its feedback says so; the run store keeps it whole); `last_k` keeps only the last k turns
and, of those, only the code (the reasoning prose is dropped) plus the feedback, so context stays
bounded over many turns.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from agents.base import Message
from agents._hardware import hardware_facts
from eval import DEFAULT_BACKEND, PROFILE_PROMPT_CHARS, backend_error, cap_profile  # profile (issue 57): the last two
from problems import ProblemError, public_source

PROMPTS_DIR = Path(__file__).parent / "prompts"
EXAMPLES_DIR = PROMPTS_DIR / "examples"
CONTEXT_POLICIES = ("full", "last_k")

_TASK_VARS = frozenset({"problem_source", "hardware", "example_reference", "example_solution"})
_FEEDBACK_VARS = frozenset({"turn", "feedback"})
_NO_CODE = "(This reply contained no usable code block.)"
MAX_REPLY_CHARS = 65536  # of one earlier reply, as a later prompt sends it back


class PromptError(ValueError):
    """A template that cannot be found or rendered, or a bad prompt setting."""


@dataclass(frozen=True)
class TurnRecord:
    """One finished turn as the next prompt sees it.

    reply: the agent's full reply; code: the extracted candidate (None if extraction failed);
    feedback: the text shown to the agent about this turn (evaluator feedback or the
    extraction error).
    """

    turn: int
    reply: str
    code: str | None
    feedback: str


def available_templates(prompts_dir: str | Path | None = None) -> list[str]:
    """Names of the templates that a bare name can select."""
    dirs = [Path(prompts_dir)] if prompts_dir else []
    return sorted({p.stem for d in [*dirs, PROMPTS_DIR] if d.is_dir() for p in d.glob("*.md")})


def load_template(name: str, prompts_dir: str | Path | None = None, *, allowed: frozenset[str] = frozenset()) -> string.Template:
    """Find template `name` and check that it uses only the placeholders in `allowed`."""
    path = _resolve(name, prompts_dir)
    try:
        template = string.Template(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PromptError(f"cannot read prompt template {path} ({exc.strerror or exc})") from None
    used, invalid = _placeholders(template)
    if invalid:
        raise PromptError(f"prompt template {path}: stray '$' at line(s) {', '.join(map(str, invalid))} (write $$ for a dollar)")
    unknown = sorted(used - allowed)
    if unknown:
        valid = ", ".join(f"${v}" for v in sorted(allowed)) or "none"
        raise PromptError(f"prompt template {path}: unknown placeholder(s) {', '.join('$' + u for u in unknown)}; valid: {valid}")
    return template


def visible_source(source: str) -> str:
    """The problem source as the agent sees it (`problems.public_source`: without `META` and `get_extra_inputs`),
    a `PromptError` for one that does not parse."""
    try:
        return public_source(source)
    except ProblemError as exc:
        raise PromptError(str(exc)) from None


def render_hardware(facts: Mapping[str, Any]) -> str:
    """A fact sheet as a Markdown list; an honest note when nothing is known."""
    if not facts:
        return "Not specified. Aim for a modern NVIDIA data-centre GPU."
    lines = []
    for key, value in facts.items():
        if isinstance(value, Mapping):
            value = ", ".join(f"{k}: {v}" for k, v in value.items())
        lines.append(f"- {key}: {value}")
    return "\n".join(lines)


def fenced(code: str) -> str:
    """`code` in a ```python fence (longer fence if the code itself holds ```)."""
    longest = max((len(m) for m in re.findall(r"`{3,}", code)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}python\n{code.rstrip()}\n{fence}"


class PromptBuilder:
    """Builds the conversation for one (problem, sample) at any turn.

    backend: one of `eval.backends.BACKENDS` (also the default task template name); template, system,
    feedback: template names (system=None sends no system message); hardware: facts dict,
    preset name, "auto" or None; context: "full" or "last_k" with last_k >= 1; profile_chars: the most characters
    of an evaluation's profile block a feedback message carries (0: none; `eval.profile`).
    """

    def __init__(
        self,
        backend: str = DEFAULT_BACKEND,
        *,
        template: str | None = None,
        system: str | None = "system",
        feedback: str = "feedback",
        hardware: str | Mapping[str, Any] | None = None,
        context: str = "full",
        last_k: int = 2,
        prompts_dir: str | Path | None = None,
        profile_chars: int = PROFILE_PROMPT_CHARS,
    ) -> None:
        if why := backend_error(backend):
            raise PromptError(why)
        if context not in CONTEXT_POLICIES:
            raise PromptError(f"unknown context policy {context!r}; valid: {', '.join(CONTEXT_POLICIES)}")
        if context == "last_k" and (not isinstance(last_k, int) or last_k < 1):
            raise PromptError(f"last_k must be an integer >= 1, got {last_k!r}")
        if not isinstance(profile_chars, int) or profile_chars < 0:  # profile (issue 57)
            raise PromptError(f"prompt.profile_chars must be an integer >= 0, got {profile_chars!r}")
        self.profile_chars = profile_chars
        self.backend = backend
        self.context = context
        self.last_k = last_k
        self._task = load_template(template or backend, prompts_dir, allowed=_TASK_VARS)
        self._feedback = load_template(feedback, prompts_dir, allowed=_FEEDBACK_VARS)
        self._system = load_template(system, prompts_dir).substitute().strip() if system else None
        try:
            facts = hardware_facts(hardware)
        except ValueError as exc:
            raise PromptError(str(exc)) from None
        self._hardware = render_hardware(facts)
        self._example_reference = (EXAMPLES_DIR / "add_relu_reference.py").read_text().rstrip()
        self._example_solution = (EXAMPLES_DIR / f"add_relu_{backend}.py").read_text().rstrip()

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "PromptBuilder":
        """Build from a config mapping; unknown keys are refused with the list of valid ones."""
        valid = {"backend", "template", "system", "feedback", "hardware", "context", "last_k", "prompts_dir",
                 "profile_chars"}  # profile (issue 57)
        unknown = sorted(set(cfg) - valid)
        if unknown:
            raise PromptError(f"unknown prompt key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
        cfg = dict(cfg)
        if isinstance(cfg.get("hardware"), Mapping):
            cfg["hardware"] = dict(cfg["hardware"])
        return cls(**cfg)

    def first_prompt(self, problem_source: str) -> str:
        """The task prompt of turn 1."""
        return self._task.substitute(
            problem_source=visible_source(problem_source).strip(),
            hardware=self._hardware,
            example_reference=self._example_reference,
            example_solution=self._example_solution,
        )

    def feedback_prompt(self, record: TurnRecord) -> str:
        """The user message that follows turn `record.turn`; under `full` context, it says when that turn's reply
        was cut (`MAX_REPLY_CHARS`)."""
        feedback = cap_profile(record.feedback.strip(), self.profile_chars) or "(no feedback)"  # profile (issue 57)
        if self.context == "full" and len(record.reply) > MAX_REPLY_CHARS:
            feedback += (f"\n\nNote: your reply was {len(record.reply):,} characters long; only its first "
                         f"{MAX_REPLY_CHARS:,} are shown above. Keep replies to the code and a short explanation.")
        return self._feedback.substitute(turn=record.turn, feedback=feedback)

    def messages(self, problem_source: str, history: Sequence[TurnRecord] = ()) -> list[Message]:
        """The conversation for the next turn, after the finished turns in `history` (oldest first)."""
        first = self.first_prompt(problem_source)
        kept = list(history)
        if self.context == "last_k" and len(kept) > self.last_k:
            dropped = len(kept) - self.last_k
            kept = kept[dropped:]
            first += (
                f"\n\n({dropped} earlier attempt(s) are omitted to keep the context short; "
                f"your most recent {len(kept)} follow.)"
            )
        out = [Message("system", self._system)] if self._system else []
        out.append(Message("user", first))
        for record in kept:
            if self.context == "full":
                reply = record.reply[:MAX_REPLY_CHARS] if record.reply.strip() else "(empty reply)"
            else:
                reply = fenced(record.code) if record.code is not None else _NO_CODE
            out.append(Message("assistant", reply))
            out.append(Message("user", self.feedback_prompt(record)))
        return out


def _resolve(name: str, prompts_dir: str | Path | None) -> Path:
    if not name:
        raise PromptError("empty prompt template name")
    as_path = Path(name)
    if as_path.suffix == ".md" and as_path.is_file():
        return as_path
    for d in ([Path(prompts_dir)] if prompts_dir else []) + [PROMPTS_DIR]:
        candidate = d / f"{name}.md"
        if candidate.is_file():
            return candidate
    raise PromptError(f"unknown prompt template {name!r}; valid: {', '.join(available_templates(prompts_dir))} or a path to a .md file")


def _placeholders(template: string.Template) -> tuple[set[str], list[int]]:
    """Named placeholders used, and line numbers of invalid `$` uses."""
    used: set[str] = set()
    invalid: list[int] = []
    for m in template.pattern.finditer(template.template):
        name = m.group("named") or m.group("braced")
        if name:
            used.add(name)
        elif m.group("invalid") is not None:
            invalid.append(template.template.count("\n", 0, m.start()) + 1)
    return used, invalid
