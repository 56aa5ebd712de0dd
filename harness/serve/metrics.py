"""Counters of the service, rendered in Prometheus's text format (`GET /metrics`).

Queue depth and in-flight counts are read from the queues when scraped; the rest is counted here as requests
are answered. Busy share per device: evaluation seconds on that device over (uptime x its workers).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable

RATE_WINDOW_S = 60.0


class Metrics:
    """Thread-safe counters; `render` writes them as Prometheus text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.responses: collections.Counter[int] = collections.Counter()  # HTTP status -> count
        self.verdicts: collections.Counter[str] = collections.Counter()  # answered evaluations by status
        self.evaluations = 0  # evaluator runs (a coalesced or cached answer is not one)
        self.coalesced = 0
        self.cached = 0
        self.cancelled = 0
        self.busy_s: collections.Counter[str] = collections.Counter()  # device label -> evaluation seconds
        self._recent: collections.deque[float] = collections.deque()  # finish times of evaluator runs

    def response(self, code: int) -> None:
        with self._lock:
            self.responses[code] += 1

    def verdict(self, status: str, *, cached: bool) -> None:
        with self._lock:
            self.verdicts[status] += 1
            self.cached += bool(cached)

    def evaluated(self, device: str, seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            self.evaluations += 1
            self.busy_s[device] += seconds
            self._recent.append(now)
            while self._recent and self._recent[0] < now - RATE_WINDOW_S:
                self._recent.popleft()

    def count(self, what: str, n: int = 1) -> None:
        """Add to `coalesced` or `cancelled`."""
        with self._lock:
            setattr(self, what, getattr(self, what) + n)

    def rate(self) -> float:
        """Evaluator runs per second over the last minute (or since start, when younger)."""
        now = time.monotonic()
        with self._lock:
            while self._recent and self._recent[0] < now - RATE_WINDOW_S:
                self._recent.popleft()
            return len(self._recent) / max(1e-9, min(RATE_WINDOW_S, now - self.started))

    def render(self, queued: int, in_flight: int, workers: Callable[[str], int]) -> str:
        """The Prometheus text exposition; `workers(device)` is how many workers that device has."""
        uptime = max(1e-9, time.monotonic() - self.started)
        rate = self.rate()
        with self._lock:
            lines = [
                "# HELP harness_serve_queue_depth Evaluations waiting for a worker.",
                "# TYPE harness_serve_queue_depth gauge", f"harness_serve_queue_depth {queued}",
                "# HELP harness_serve_in_flight Evaluations running now.",
                "# TYPE harness_serve_in_flight gauge", f"harness_serve_in_flight {in_flight}",
                "# HELP harness_serve_evaluations_total Evaluator runs (coalesced and cached answers excluded).",
                "# TYPE harness_serve_evaluations_total counter", f"harness_serve_evaluations_total {self.evaluations}",
                "# HELP harness_serve_evaluations_per_second Evaluator runs per second over the last minute.",
                "# TYPE harness_serve_evaluations_per_second gauge",
                f"harness_serve_evaluations_per_second {rate:.6f}",
                "# HELP harness_serve_coalesced_total Requests answered by an identical evaluation in flight.",
                "# TYPE harness_serve_coalesced_total counter", f"harness_serve_coalesced_total {self.coalesced}",
                "# HELP harness_serve_cached_total Answers from the authenticated result cache.",
                "# TYPE harness_serve_cached_total counter", f"harness_serve_cached_total {self.cached}",
                "# HELP harness_serve_cancelled_total Queued evaluations cancelled because every client left.",
                "# TYPE harness_serve_cancelled_total counter", f"harness_serve_cancelled_total {self.cancelled}",
                "# HELP harness_serve_verdicts_total Answered evaluations by verdict.",
                "# TYPE harness_serve_verdicts_total counter",
                *(f'harness_serve_verdicts_total{{status="{s}"}} {n}' for s, n in sorted(self.verdicts.items())),
                "# HELP harness_serve_responses_total HTTP responses by status code.",
                "# TYPE harness_serve_responses_total counter",
                *(f'harness_serve_responses_total{{code="{c}"}} {n}' for c, n in sorted(self.responses.items())),
                "# HELP harness_serve_device_busy_share Evaluation seconds over uptime x workers, per device.",
                "# TYPE harness_serve_device_busy_share gauge",
                *(f'harness_serve_device_busy_share{{device="{d}"}} {s / (uptime * max(1, workers(d))):.6f}'
                  for d, s in sorted(self.busy_s.items())),
                "# HELP harness_serve_uptime_seconds Seconds since the service started.",
                "# TYPE harness_serve_uptime_seconds gauge", f"harness_serve_uptime_seconds {uptime:.3f}",
            ]
        return "\n".join(lines) + "\n"
