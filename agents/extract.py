"""Code extraction: find the candidate module in an agent's free-form reply.

The prompt asks for exactly one fenced code block defining `class ModelNew`. Replies drift from
that, so: prose around the code is ignored; fences may lack a language tag, be indented, use
``` or ~~~, or be left unterminated at the end (a truncated reply); CRLF line ends are fine.
Among several blocks the one defining `class ModelNew` wins, the last if several do. Blocks
are never merged: a kernel in one block and `ModelNew` in another fails at import, with a
traceback the agent can act on, instead of being silently glued together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.base import AgentError
from problems import parse_python

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_MODELNEW = re.compile(r"^(?:class[ \t]+ModelNew\b|ModelNew[ \t]*=(?!=))", re.MULTILINE)


class ExtractionError(AgentError):
    """The reply holds no usable code; the message is the reason, worded as feedback for the agent."""


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its info string (language tag), its code, whether its fence was closed."""

    info: str
    code: str
    closed: bool


def code_blocks(text: str) -> list[CodeBlock]:
    """All fenced code blocks of a Markdown-ish text, in order."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"].expandtabs(4))
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            closing = _FENCE.match(lines[i])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence) and not closing["info"].strip():
                closed = True
                i += 1
                break
            body.append(_strip_indent(lines[i], indent))
            i += 1
        blocks.append(CodeBlock(info=opening["info"].strip(), code="\n".join(body).strip("\n") + "\n", closed=closed))
    return blocks


def defines_model_new(code: str) -> bool:
    """True when `code` defines `ModelNew` at top level (`class ModelNew` or `ModelNew = ...`)."""
    return bool(_MODELNEW.search(code))


def extract_code(text: str) -> str:
    """The candidate source in `text`, or `ExtractionError` with a reason the agent can act on."""
    if not text or not text.strip():
        raise ExtractionError("The reply was empty. Reply with exactly one fenced ```python code block defining `class ModelNew`.")
    blocks = code_blocks(text)
    if not blocks:
        unfenced = text.replace("\r\n", "\n").replace("\r", "\n").strip() + "\n"
        if defines_model_new(unfenced) and _parses(unfenced):
            return unfenced
        raise ExtractionError(
            "The reply contains no fenced code block. Reply with exactly one fenced ```python code block "
            "defining `class ModelNew`."
        )
    chosen = [b for b in blocks if defines_model_new(b.code)]
    if not chosen:
        raise ExtractionError(
            f"None of the {len(blocks)} code block(s) in the reply defines `class ModelNew` at top level. "
            "Reply with exactly one fenced ```python code block holding the whole module: imports, kernels and `class ModelNew`."
        )
    return chosen[-1].code


def _strip_indent(line: str, indent: int) -> str:
    """Remove up to `indent` columns of leading whitespace (the fence's own indentation)."""
    removed = 0
    pos = 0
    while pos < len(line) and removed < indent and line[pos] in " \t":
        removed += 4 - removed % 4 if line[pos] == "\t" else 1
        pos += 1
    return line[pos:]


def _parses(source: str) -> bool:
    try:
        parse_python(source)
    except (SyntaxError, ValueError):
        return False
    return True
