"""Framed messages between the trusted parent and the untrusted worker.

A frame is a 12-byte prefix (the JSON header's length, then how many tensor bytes follow it on the pipe) and the
header on a pipe; the tensors it describes travel as raw bytes, either on the same pipe after the header or, when the
channel has shared-memory regions, in the sender's region (the header then gives each tensor's offset). A timed
block's reply always carries its tensors in the frame, and the parent reads that frame whole with its stopwatch
(`exchange_timed`, `eval.crossing._stopwatch`). Bulk bytes through a pipe
move at about 0.5 GB/s (measured on the H100 device); through shared memory at memory speed.

No pickle crosses the channel: headers are JSON and tensors are rebuilt from a whitelist of
dtypes, so a hostile child can send wrong data but never run code in the parent. Each
region is written only by its sender; the receiver copies what a frame names out of it at
once, bounds-checked against the region's current size: into its own memory, or, when the
frame is received onto a GPU, straight onto the GPU (a synchronous copy, done before `recv`
returns). Either way the receiver's copy is private; a sender that writes the region during
the copy only chooses other bytes, which it could have written before sending. Regions are
memfds sealed against shrinking, so no side can make the other's mapped reads or writes fault.

On a process that uses CUDA, each side also registers its mappings with the driver
(`cudaHostRegister`, each mapping of at most `PIN_MAX_BYTES`; a larger one stays pageable), so copies between a GPU and a region are DMA
transfers instead of staged pageable copies. Measured on the H100 device for one 256 MB output
from a worker's GPU to the parent's: 81 ms with the receiver's copy on the CPU, 10.9 ms pinned and
copied straight to the GPU (`harness bench eval --part channel`). A mapping is always unregistered
before it is unmapped, so the driver never keeps pages a new mapping at the same address lacks.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import os
import select
import struct
import threading
import time
from typing import Any

import torch

from eval.crossing import _stopwatch as stopwatch

MAX_HEADER_BYTES = 8 << 20
PREFIX = struct.Struct(">IQ")  # header bytes, tensor bytes on the pipe after it
# A timed reply's tensors are its captures (a few KB per repetition and output), read whole into memory before they
# are judged: a frame announcing more is refused before anything is allocated for it.
TIMED_MAX_TENSOR_BYTES = 256 << 20
_F_SETPIPE_SZ = 1031
_F_ADD_SEALS = 1033
_F_SEAL_SEAL, _F_SEAL_SHRINK = 0x0001, 0x0002
_ALIGN = 4096
PIN_MAX_BYTES = 1 << 30  # the largest mapping pinned: a hostile sender's huge frame must not pin the host's RAM

DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
        "uint8", "bool", "complex64", "float8_e4m3fn", "float8_e5m2",
    )
    if hasattr(torch, name)
}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class ChannelClosed(EOFError):
    """The other side closed the channel (usually: the worker died)."""


class ChannelTimeout(TimeoutError):
    """No complete frame arrived before the deadline."""


class ProtocolError(ValueError):
    """The other side sent a frame that does not follow the protocol."""


class PayloadTooLarge(ProtocolError):
    """A frame announced more tensor bytes than the receiver takes (`nbytes` over `limit`); none were read."""

    def __init__(self, nbytes: int, limit: int):
        super().__init__(f"a frame carried {nbytes} bytes of tensors, over the limit of {limit} bytes")
        self.nbytes, self.limit = nbytes, limit


def dtype_name(dtype: torch.dtype) -> str:
    """Wire name of a dtype; raises ProtocolError for dtypes the wire does not carry."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise ProtocolError(f"unsupported dtype {dtype}") from None


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's contents as a flat uint8 tensor on its own device."""
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst[:] = src for flat uint8 tensors. Host to host by one memmove: torch's CPU copies run on its intra-op
    thread pool, and with the parent and several GPU workers each owning a pool as large as the machine, a 0.5 MB
    copy took milliseconds on the H100 device, which blurred the wall time of the timed blocks."""
    if dst.device.type == "cpu" and src.device.type == "cpu":
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.numel())
    else:
        dst.copy_(src)


def new_region_fd() -> int | None:
    """A memfd for one direction of a channel, sealed against shrinking; None where memfds don't exist."""
    if not hasattr(os, "memfd_create"):
        return None
    try:
        fd = os.memfd_create("kh-channel", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        fcntl.fcntl(fd, _F_ADD_SEALS, _F_SEAL_SHRINK | _F_SEAL_SEAL)
    except OSError:
        return None
    return fd


class _Region:
    """A shared-memory file mapped into this process, grown on demand, never shrunk; its mapping is
    registered with CUDA (pinned) once this process has initialised CUDA."""

    def __init__(self, fd: int, pin: bool = True):
        self.fd = fd
        self.pin = pin
        self._map: mmap.mmap | None = None
        self._pinned: int | None = None  # the registered address, while registered
        self._pin_tried = False  # registration was attempted for the current mapping (it may fail: then pageable)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    @property
    def pinned(self) -> bool:
        return self._pinned is not None

    def view(self, end: int) -> mmap.mmap:
        """A mapping covering at least [0, end) of the file (the file must already be that large)."""
        if self._map is None or len(self._map) < end:
            self._close_map()
            self._map = mmap.mmap(self.fd, end)
            self._pin_tried = False
        if self.pin and not self._pin_tried and torch.cuda.is_available() and torch.cuda.is_initialized():
            self._pin()
        return self._map

    def _pin(self) -> None:
        assert self._map is not None
        self._pin_tried = True
        if len(self._map) > PIN_MAX_BYTES:  # whole or not at all: a copy across a registered edge fails (H100)
            return
        anchor = (ctypes.c_char * len(self._map)).from_buffer(self._map)
        address = ctypes.addressof(anchor)
        del anchor  # a live export would stop the mapping from ever closing
        if int(torch.cuda.cudart().cudaHostRegister(address, len(self._map), 0)) == 0:
            self._pinned = address

    def _unpin(self) -> None:
        if self._pinned is not None:
            torch.cuda.cudart().cudaHostUnregister(self._pinned)
            self._pinned = None

    def reserve(self, nbytes: int) -> mmap.mmap:
        """Grow the file to at least nbytes (rounded up) and map it."""
        if self.size() < nbytes:
            os.ftruncate(self.fd, -(-nbytes // (1 << 24)) * (1 << 24))
        return self.view(nbytes)

    def _close_map(self) -> None:
        self._unpin()  # before the unmap, always
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a tensor still views it: leave it to the garbage collector
                pass
            self._map = None

    def close(self) -> None:
        """Idempotent: a second close must never close a descriptor number reused by someone else."""
        self._close_map()
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def _frame_head(header: dict[str, Any], specs: list[dict[str, Any]], pipe_bytes: int) -> bytes:
    """A frame's prefix and JSON header (with its tensor specs); `pipe_bytes` of tensors follow it on the pipe."""
    raw = json.dumps({**header, "tensors": specs}).encode()
    return PREFIX.pack(len(raw), pipe_bytes) + raw


class Channel:
    """One pair of pipes carrying framed messages, with optional shared-memory regions for tensor bytes.

    `send_fd` is the region this side writes, `recv_fd` the one it reads (either may be None).
    `max_payload_bytes` caps the tensor bytes one received frame may carry. `pin=False` leaves the
    regions' mappings pageable (only `harness bench eval --part channel` wants that, to compare).
    """

    def __init__(self, read_fd: int, write_fd: int, *, send_fd: int | None = None, recv_fd: int | None = None,
                 max_payload_bytes: int = 8 << 30, pin: bool = True):
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.max_payload_bytes = max_payload_bytes
        self._send_region = _Region(send_fd, pin) if send_fd is not None else None
        self._recv_region = _Region(recv_fd, pin) if recv_fd is not None else None
        # held while a region is read, written or closed: `close` from another thread (a worker killed
        # mid-reply) must not unregister or unmap a mapping a copy is using
        self._region_lock = threading.RLock()
        for fd in (read_fd, write_fd):  # larger pipe buffers: fewer context switches for big tensors
            try:
                fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
            except OSError:
                pass

    def send(self, header: dict[str, Any], tensors: list[torch.Tensor] | None = None, in_frame: bool = False) -> None:
        """Send a header and tensors (copied out of any device); with `in_frame`, the tensors travel on the pipe even
        where there is a region (a timed block's reply: see `exchange_timed`)."""
        tensors = tensors or []
        blobs = [_as_bytes(t) for t in tensors]
        specs: list[dict[str, Any]] = [
            {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "nbytes": int(b.numel())} for t, b in zip(tensors, blobs)
        ]
        if self._send_region is not None and blobs and not in_frame:
            offset = 0
            for spec in specs:
                spec["offset"] = offset
                offset += -(-spec["nbytes"] // _ALIGN) * _ALIGN
            with self._region_lock:
                view = self._send_region.reserve(max(offset, 1))
                for spec, b in zip(specs, blobs):
                    if spec["nbytes"]:
                        _copy(torch.frombuffer(view, dtype=torch.uint8, count=spec["nbytes"], offset=spec["offset"]), b)
                del view
            blobs = []
        self._write(_frame_head(header, specs, sum(int(b.numel()) for b in blobs)))
        for b in blobs:
            if b.numel():
                self._write(memoryview(b.cpu().numpy()))

    def recv(self, timeout: float | None = None, device: torch.device | str | None = None
             ) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Receive one frame; its tensors are private copies (on `device` if given).

        Raises ChannelTimeout, ChannelClosed or ProtocolError.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        n, in_frame = PREFIX.unpack(self._read(PREFIX.size, deadline))
        if n > MAX_HEADER_BYTES:
            raise ProtocolError(f"header of {n} bytes exceeds the limit of {MAX_HEADER_BYTES}")
        header, specs = self._parse_header(self._read(n, deadline), in_frame)
        tensors = []
        for dtype, shape, nbytes, offset in specs:
            if offset is None:
                tensors.append(self._tensor(self._read_pipe(nbytes, deadline), dtype, shape, device))
                continue
            onto_gpu = device is not None and torch.device(device).type == "cuda"
            with self._region_lock:
                tensors.append(self._tensor(self._read_region(offset, nbytes, private=not onto_gpu), dtype, shape, device))
        return header, tensors

    def exchange_timed(self, header: dict[str, Any], timeout: float | None = None,
                       device: torch.device | str | None = None) -> tuple[dict[str, Any], list[torch.Tensor], float]:
        """Send a frame without tensors and receive the reply whole; with the wall time in ms from the request's
        first byte written to the reply's last byte read, both taken outside the GIL (`eval.crossing._stopwatch`).

        The reply must carry its tensors in the frame: bytes in a region could still change after the instant that
        ends the interval. Raises ChannelTimeout, ChannelClosed or ProtocolError, as `recv` does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        limit = min(self.max_payload_bytes, TIMED_MAX_TENSOR_BYTES)
        try:
            prefix, body, started, finished = stopwatch.exchange(self.write_fd, _frame_head(header, [], 0),
                                                                 self.read_fd, deadline, MAX_HEADER_BYTES, limit)
        except stopwatch.Closed:
            raise ChannelClosed("channel closed by the other side") from None
        except stopwatch.TimedOut:
            raise ChannelTimeout("no reply before the deadline") from None
        except stopwatch.TooLarge:
            raise ProtocolError(f"a timed reply announced over {MAX_HEADER_BYTES} header bytes or over {limit} tensor "
                                "bytes") from None
        n, in_frame = PREFIX.unpack(prefix)
        reply, specs = self._parse_header(body[:n], in_frame)
        tensors, at, view = [], n, memoryview(body)
        for dtype, shape, nbytes, offset in specs:
            if offset is not None:
                raise ProtocolError("a timed reply placed a tensor in the shared region, not in its frame")
            raw = torch.frombuffer(bytearray(view[at:at + nbytes]), dtype=torch.uint8) if nbytes else torch.empty(
                0, dtype=torch.uint8)
            tensors.append(self._tensor(raw, dtype, shape, device))
            at += nbytes
        return reply, tensors, (finished - started) / 1e6

    def _parse_header(self, raw: bytes, in_frame: int) -> tuple[dict[str, Any], list[tuple[torch.dtype, list[int], int, int | None]]]:
        """A frame's header and its tensor specs, checked against the prefix's count of tensor bytes on the pipe and
        against this channel's limit."""
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"malformed header: {exc}") from None
        if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
            raise ProtocolError("header is not a JSON object with a tensor list")
        specs = [self._parse_spec(spec) for spec in header.pop("tensors", [])]
        total = sum(nbytes for _, _, nbytes, _ in specs)
        if total > self.max_payload_bytes:
            raise PayloadTooLarge(total, self.max_payload_bytes)
        on_pipe = sum(nbytes for _, _, nbytes, offset in specs if offset is None)
        if on_pipe != in_frame:
            raise ProtocolError(f"the frame's prefix announced {in_frame} tensor bytes on the pipe, its header {on_pipe}")
        return header, specs

    @staticmethod
    def _tensor(raw: torch.Tensor, dtype: torch.dtype, shape: list[int], device: torch.device | str | None
                ) -> torch.Tensor:
        """Bytes as a tensor of `dtype` and `shape`, on `device` if given (a synchronous copy: private on return)."""
        t = raw.view(dtype).reshape(shape) if raw.numel() else torch.empty(shape, dtype=dtype)
        return t.to(device) if device is not None else t

    def _parse_spec(self, spec: Any) -> tuple[torch.dtype, list[int], int, int | None]:
        try:
            dtype = DTYPES[spec["dtype"]]
            shape = [int(s) for s in spec["shape"]]
            nbytes = int(spec["nbytes"])
            offset = None if spec.get("offset") is None else int(spec["offset"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ProtocolError(f"bad tensor spec {str(spec)[:200]}") from None
        numel = 1
        for s in shape:
            if s < 0:
                raise ProtocolError("negative dimension")
            numel *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if nbytes != numel * itemsize:
            raise ProtocolError("tensor byte count does not match its shape")
        if offset is not None and (offset < 0 or self._recv_region is None):
            raise ProtocolError("tensor offset into a shared region this channel does not have")
        return dtype, shape, nbytes, offset

    def _read_region(self, offset: int, nbytes: int, private: bool = True) -> torch.Tensor:
        """The bytes a frame names: a private copy, or (`private=False`) a view of the region that the
        caller copies elsewhere at once and drops."""
        assert self._recv_region is not None
        if not nbytes:
            return torch.empty(0, dtype=torch.uint8)
        end = offset + nbytes
        if end > self._recv_region.size():
            raise ProtocolError("tensor bytes lie outside the shared region")
        view = self._recv_region.view(end)
        raw = torch.frombuffer(view, dtype=torch.uint8, count=nbytes, offset=offset)
        if not private:
            return raw
        copy = torch.empty(nbytes, dtype=torch.uint8)
        _copy(copy, raw)
        return copy

    def _read_pipe(self, nbytes: int, deadline: float | None) -> torch.Tensor:
        data = bytearray(nbytes)
        if nbytes:
            self._read_into(memoryview(data), deadline)
            return torch.frombuffer(data, dtype=torch.uint8)
        return torch.empty(0, dtype=torch.uint8)

    def _write(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            try:
                n = os.write(self.write_fd, view)
            except BrokenPipeError:
                raise ChannelClosed("channel closed by the other side") from None
            view = view[n:]

    def _read(self, n: int, deadline: float | None) -> bytes:
        buf = bytearray(n)
        self._read_into(memoryview(buf), deadline)
        return bytes(buf)

    def _read_into(self, view: memoryview, deadline: float | None) -> None:
        """Fill `view` from the pipe, honouring the deadline between reads."""
        pos = 0
        while pos < len(view):
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.read_fd], [], [], wait)
            if not ready:
                raise ChannelTimeout("no reply before the deadline")
            n = os.readv(self.read_fd, [view[pos:pos + (1 << 24)]])
            if n == 0:
                raise ChannelClosed("channel closed by the other side")
            pos += n

    def close(self) -> None:
        """Idempotent: a second close must never close a descriptor number reused by someone else."""
        fds, self.read_fd, self.write_fd = (self.read_fd, self.write_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        with self._region_lock:
            for region in (self._send_region, self._recv_region):
                if region is not None:
                    region.close()
