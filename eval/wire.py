"""Framed messages between the trusted parent and the untrusted worker.

A frame is a 4-byte length, a JSON header, then raw tensor bytes described by the header.
No pickle crosses the channel: the parent only ever parses JSON and rebuilds tensors from a
whitelist of dtypes, so a hostile child can send wrong data but never run code in the parent.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import time
from typing import Any

import torch

MAX_HEADER_BYTES = 8 << 20
_F_SETPIPE_SZ = 1031

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


def dtype_name(dtype: torch.dtype) -> str:
    """Wire name of a dtype; raises ProtocolError for dtypes the wire does not carry."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise ProtocolError(f"unsupported dtype {dtype}") from None


def _tensor_bytes(t: torch.Tensor) -> memoryview:
    """A view of the tensor's bytes on the CPU (no copy when it is already a contiguous CPU tensor)."""
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


class Channel:
    """One direction-pair of pipes carrying framed messages."""

    def __init__(self, read_fd: int, write_fd: int, max_payload_bytes: int = 8 << 30):
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.max_payload_bytes = max_payload_bytes
        for fd in (read_fd, write_fd):  # larger pipe buffers: fewer context switches for big tensors
            try:
                fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
            except OSError:
                pass

    def send(self, header: dict[str, Any], tensors: list[torch.Tensor] | None = None) -> None:
        """Send a header and tensors (moved to CPU)."""
        tensors = tensors or []
        blobs = [_tensor_bytes(t) for t in tensors]
        header = dict(header)
        header["tensors"] = [
            {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "nbytes": len(b)} for t, b in zip(tensors, blobs)
        ]
        raw = json.dumps(header).encode()
        self._write(struct.pack(">I", len(raw)) + raw)
        for b in blobs:
            self._write(b)

    def recv(self, timeout: float | None = None) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """Receive one frame; raises ChannelTimeout, ChannelClosed or ProtocolError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        (n,) = struct.unpack(">I", self._read(4, deadline))
        if n > MAX_HEADER_BYTES:
            raise ProtocolError(f"header of {n} bytes exceeds the limit")
        try:
            header = json.loads(self._read(n, deadline))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"malformed header: {exc}") from None
        if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
            raise ProtocolError("header is not a JSON object with a tensor list")
        specs = header.pop("tensors", [])
        total = 0
        tensors = []
        for spec in specs:
            tensors.append(self._read_tensor(spec, deadline))
            total += tensors[-1].numel() * tensors[-1].element_size()
            if total > self.max_payload_bytes:
                raise ProtocolError("payload exceeds the output size limit")
        return header, tensors

    def _read_tensor(self, spec: Any, deadline: float | None) -> torch.Tensor:
        try:
            dtype = DTYPES[spec["dtype"]]
            shape = [int(s) for s in spec["shape"]]
            nbytes = int(spec["nbytes"])
        except (KeyError, TypeError, ValueError):
            raise ProtocolError(f"bad tensor spec {str(spec)[:200]}") from None
        numel = 1
        for s in shape:
            if s < 0:
                raise ProtocolError("negative dimension")
            numel *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if nbytes != numel * itemsize or nbytes > self.max_payload_bytes:
            raise ProtocolError("tensor byte count does not match its shape")
        if not nbytes:
            return torch.empty(shape, dtype=dtype)
        data = bytearray(nbytes)
        self._read_into(memoryview(data), deadline)
        return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)

    def _write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
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
        """Fill `view` from the channel, honouring the deadline between reads."""
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
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
