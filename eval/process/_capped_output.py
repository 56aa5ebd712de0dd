"""A worker's output: its pipe drained on a thread of the parent, the first and last bytes kept.

A worker writes what it likes to its stdout and stderr (one pipe); the parent must keep reading it, or a worker
that fills the pipe blocks, and must not hold all of it, or a worker that writes without end fills the parent's
memory. `CappedOutput` keeps the first and last `cap` bytes and counts the rest, for a verdict's log and its note.
"""

from __future__ import annotations

import os
import threading


class CappedOutput:
    """Drains a pipe on a thread, keeping the first and last `cap` bytes."""

    def __init__(self, fd: int, cap: int):
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._cap = cap
        self._fd = fd
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self.total += len(chunk)
            if len(self.head) < self._cap:
                room = self._cap - len(self.head)
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail += chunk
            if len(self.tail) > self._cap:
                del self.tail[: len(self.tail) - self._cap]
        os.close(self._fd)

    def join(self, timeout: float | None = None) -> None:
        """Wait (at most `timeout` seconds) until the pipe is drained to its end: its writers have closed it."""
        self._thread.join(timeout=timeout)

    def over_cap(self) -> str:
        """A sentence naming the log's limit when the worker wrote more than it keeps (or "")."""
        if self.total <= 2 * self._cap:
            return ""
        return (f"its log took {self.total} bytes, over the limit of twice eval.log_cap_bytes ({self._cap}): "
                f"the first and last {self._cap} bytes are kept")

    def text(self) -> str:
        head = self.head.decode(errors="replace")
        if not self.tail:
            return head
        skipped = self.total - len(self.head) - len(self.tail)
        gap = (f"\n... [{skipped} of {self.total} bytes of output dropped: a worker's log keeps its first and last "
               f"eval.log_cap_bytes ({self._cap}) bytes] ...\n") if skipped > 0 else ""
        return head + gap + self.tail.decode(errors="replace")
