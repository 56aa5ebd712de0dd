"""The wall time of a timed request, read where the parent's other threads cannot add to it.

The parent bounds what a worker reports by the wall time it observes for each timed block
(`eval.timing.claim_bounds.wall_bound`). Read in Python, that wall time also held every wait of the timing thread for
the GIL: with four evaluations in
flight in one parent, the GIL changed hands late by 2.4 ms at the 99th percentile (and once by 134 ms) on the H100
host, and honest candidates whose every block met such a wait were rejected. Here the request is written and the
whole reply frame read by one native call (`_stopwatch.c`, called through ctypes, which releases the GIL), and the
two instants are taken in that call: the first byte written, the last byte read. A wait for the GIL now comes after
the interval, outside it (only a signal returns to Python inside it, to run its handlers). Everything the parent
then judges (the header, the times, the captures) is in the bytes read by that instant, so nothing a worker does
later can reach the verdict.
"""

from __future__ import annotations

import ctypes
import errno
import threading
import time
from pathlib import Path

_SOURCE = Path(__file__).with_name("_stopwatch.c")
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


class Frame(ctypes.Structure):
    """`kh_frame` in `_stopwatch.c`: one request written and its reply frame read, across calls."""

    _fields_ = [("sent", ctypes.c_uint64), ("started_ns", ctypes.c_int64), ("prefix", ctypes.c_uint8 * 12),
                ("have", ctypes.c_uint64), ("body_len", ctypes.c_uint64), ("body", ctypes.c_void_p),
                ("finished_ns", ctypes.c_int64)]


class Closed(Exception):
    """The other side closed its end (or the descriptor is gone)."""


class TimedOut(Exception):
    """No whole frame before the deadline."""


class TooLarge(Exception):
    """The frame's prefix announced more than the limits."""


def library() -> ctypes.CDLL:
    """The built stopwatch (built on first use; the evaluator asks at start, off any timed path)."""
    global _lib
    with _lock:
        if _lib is None:
            from eval.crossing._native_build import ensure_built  # the one builder of the project's native code
            lib = ctypes.CDLL(str(ensure_built(_SOURCE, "kh_stopwatch", extension=False)))
            lib.kh_exchange.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int,
                                        ctypes.POINTER(Frame), ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64]
            lib.kh_exchange.restype = ctypes.c_int
            lib.kh_free.argtypes = [ctypes.POINTER(Frame)]
            lib.kh_free.restype = None
            _lib = lib
        return _lib


def exchange(write_fd: int, request: bytes, read_fd: int, deadline: float | None, max_header: int,
             max_tensors: int) -> tuple[bytes, bytes, int, int]:
    """Write `request`, then read one whole reply frame: its prefix, its body (header and tensor bytes), and the
    monotonic times in ns just before the request's first byte was written and when the reply's last byte was read.
    `deadline` is on `time.monotonic()`'s clock (CLOCK_MONOTONIC, as in the C code)."""
    lib, frame = library(), Frame()
    deadline_ns = time.monotonic_ns() + 10 ** 18 if deadline is None else int(deadline * 1e9)
    try:
        while True:
            done = lib.kh_exchange(write_fd, request, len(request), read_fd, ctypes.byref(frame), deadline_ns,
                                   max_header, max_tensors)
            if done == 1:
                return (bytes(frame.prefix), ctypes.string_at(frame.body, frame.body_len), int(frame.started_ns),
                        int(frame.finished_ns))
            if done == -errno.EINTR:
                continue  # a signal: back in Python its handlers have run (and may have raised)
            if done == 0:
                raise Closed("closed by the other side")
            if done == -errno.ETIMEDOUT:
                raise TimedOut("no whole reply before the deadline")
            if done == -errno.EMSGSIZE:
                raise TooLarge(bytes(frame.prefix).hex())
            raise Closed(errno.errorcode.get(-done, str(-done)))
    finally:
        lib.kh_free(ctypes.byref(frame))
