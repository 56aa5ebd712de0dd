"""Request ids bound to their request's content: an id is an idempotency key, so it must name one request.

The first request that uses an id binds it to a fingerprint of its content (`fingerprint`); the same content again
gets the answer that id was given, while other content under that id is refused (`IdConflict`, HTTP 409): it is
never answered with another request's verdict. The last `kept` ids are remembered by this server process.
"""

from __future__ import annotations

import collections
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any


class IdConflict(Exception):
    """A request id already bound to a request of other content: HTTP 409 naming `field`."""

    def __init__(self, field: str, rid: str):
        super().__init__(f"{field}: the id {rid!r} was already used by a request of other content (another problem, "
                         "code, backend, preset, reward or turn); give each distinct request an id of its own")
        self.field = field


def fingerprint(*parts: Any) -> str:
    """A digest of a request's content (every part that shapes its answer)."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass
class _Bound:
    fingerprint: str
    answer: dict[str, Any] | None = None  # None until the request is answered


class RequestIds:
    """See the module docstring. Thread-safe."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._lock = threading.Lock()
        self._ids: collections.OrderedDict[str, _Bound] = collections.OrderedDict()

    def bind(self, rid: str, digest: str, field: str = "id") -> dict[str, Any] | None:
        """Bind `rid` to `digest` if it is new; the answer it already has (None: none yet). `IdConflict` when it is
        bound to other content."""
        with self._lock:
            bound = self._ids.setdefault(rid, _Bound(digest))
            self._trim()
        if bound.fingerprint != digest:
            raise IdConflict(field, rid)
        return bound.answer

    def keep(self, rid: str, digest: str, answer: dict[str, Any], field: str = "id") -> dict[str, Any]:
        """Record `answer` for `rid`, unless it has one already: the answer the id keeps, which every later request of
        this content gets. `IdConflict` when the id is bound to other content."""
        with self._lock:
            bound = self._ids.setdefault(rid, _Bound(digest))
            if bound.fingerprint == digest and bound.answer is None:
                bound.answer = answer
            self._trim()
        if bound.fingerprint != digest or bound.answer is None:
            raise IdConflict(field, rid)
        return bound.answer

    def _trim(self) -> None:
        while len(self._ids) > self._kept:
            self._ids.popitem(last=False)
