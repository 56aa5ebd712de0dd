"""CUDA IPC memory and stream memory flags, through the driver API, for observed timing (`eval.worker.observed`).

Why the driver API and not torch's events: an interprocess CUDA event lives in POSIX shared memory, and each
sandboxed process has a private `/dev/shm` (`cudaErrorMapBufferObjectFailed` or "invalid device context" across
two sandboxes, H200, 2026-12-02). Device memory exported with `cuIpcGetMemHandle` crosses the sandbox when its
exporter runs in the host's PID namespace under the importer's uid (the handle names its exporter by the pid the
exporter sees), and a flag word in that memory, written and awaited on the GPU by `cuStreamWriteValue32` and
`cuStreamWaitValue32`, does what an interprocess event would: the awaiting stream waits on the GPU, whenever the
write was enqueued. What either side writes is only ever checked by the exporter (the trusted reference process).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

HANDLE_BYTES = 64
ALIGN = 256  # every region of a buffer starts at this alignment (what cudaMalloc gives)
_WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ
_LAZY_PEER_ACCESS = 0x1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
_NON_BLOCKING = 0x1  # CU_STREAM_NON_BLOCKING


class IpcError(RuntimeError):
    """A CUDA driver call for IPC memory or stream flags failed."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


@functools.cache
def _driver() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    u64, p_u64 = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)
    lib.cuMemAlloc_v2.argtypes = [p_u64, ctypes.c_size_t]
    lib.cuMemFree_v2.argtypes = [u64]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), u64]
    lib.cuIpcOpenMemHandle_v2.argtypes = [p_u64, _Handle, ctypes.c_uint]
    lib.cuIpcCloseMemHandle.argtypes = [u64]
    lib.cuStreamWriteValue32_v2.argtypes = [ctypes.c_void_p, u64, ctypes.c_uint32, ctypes.c_uint]
    lib.cuStreamWaitValue32_v2.argtypes = [ctypes.c_void_p, u64, ctypes.c_uint32, ctypes.c_uint]
    lib.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    lib.cuStreamDestroy_v2.argtypes = [ctypes.c_void_p]
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise IpcError(f"{what} failed: CUresult {rc}")


class _Array:
    """What `torch.as_tensor` needs to wrap raw device memory (no copy)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def bytes_at(ptr: int, nbytes: int) -> torch.Tensor:
    """A uint8 CUDA tensor over `nbytes` of device memory at `ptr` (the memory is not owned by the tensor)."""
    return torch.as_tensor(_Array(ptr, nbytes), device="cuda")


def view(base: torch.Tensor, offset: int, dtype: torch.dtype, size: list[int], stride: list[int]) -> torch.Tensor:
    """A tensor of `dtype`, `size`, `stride` whose storage starts `offset` bytes into the uint8 tensor `base`."""
    item = torch.empty((), dtype=dtype).element_size()
    if offset % item:
        raise ValueError("a region's offset must be a multiple of its element size")
    typed = base[offset:].view(dtype)
    return torch.as_strided(typed, size, stride)


class ExportedBuffer:
    """Device memory this process allocated and exports (freed on close)."""

    def __init__(self, nbytes: int):
        torch.zeros(1, device="cuda")  # the primary context is current
        ptr = ctypes.c_uint64()
        _check(_driver().cuMemAlloc_v2(ctypes.byref(ptr), max(ALIGN, nbytes)), "cuMemAlloc")
        self.ptr, self.nbytes = ptr.value, nbytes
        handle = _Handle()
        _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), self.ptr), "cuIpcGetMemHandle")
        self.handle = bytes(handle).hex()  # the whole struct: `.reserved` would stop at its first NUL byte
        self.tensor = bytes_at(self.ptr, max(ALIGN, nbytes))

    def close(self) -> None:
        if self.ptr:
            torch.cuda.synchronize()
            _driver().cuMemFree_v2(self.ptr)
            self.ptr = 0


class ImportedBuffer:
    """Another process's exported memory, opened here."""

    def __init__(self, handle_hex: str, nbytes: int):
        raw = bytes.fromhex(handle_hex)
        if len(raw) != HANDLE_BYTES:
            raise IpcError("an IPC memory handle is 64 bytes")
        torch.zeros(1, device="cuda")
        ptr = ctypes.c_uint64()
        _check(_driver().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), _Handle.from_buffer_copy(raw), _LAZY_PEER_ACCESS),
               "cuIpcOpenMemHandle")
        self.ptr, self.nbytes = ptr.value, nbytes
        self.tensor = bytes_at(self.ptr, max(ALIGN, nbytes))

    def close(self) -> None:
        if self.ptr:
            torch.cuda.synchronize()
            _driver().cuIpcCloseMemHandle(self.ptr)
            self.ptr = 0


def write_flag(stream: torch.cuda.Stream, ptr: int, value: int) -> None:
    """Enqueue on `stream`: the 32-bit word at `ptr` becomes `value`."""
    _check(_driver().cuStreamWriteValue32_v2(ctypes.c_void_p(stream.cuda_stream), ptr, value, 0),
           "cuStreamWriteValue32")


def wait_flag(stream: torch.cuda.Stream, ptr: int, value: int) -> None:
    """Enqueue on `stream`: wait until the 32-bit word at `ptr` is at least `value` (unsigned, wrapping)."""
    _check(_driver().cuStreamWaitValue32_v2(ctypes.c_void_p(stream.cuda_stream), ptr, value, _WAIT_GEQ),
           "cuStreamWaitValue32")


def release_flag(ptr: int, value: int) -> None:
    """Write `value` at `ptr` now, on a stream of its own (unblocks a stream waiting on it whatever else waits)."""
    stream = ctypes.c_void_p()
    _check(_driver().cuStreamCreate(ctypes.byref(stream), _NON_BLOCKING), "cuStreamCreate")
    try:
        _check(_driver().cuStreamWriteValue32_v2(stream, ptr, value, 0), "cuStreamWriteValue32")
        _check(_driver().cuStreamSynchronize(stream), "cuStreamSynchronize")
    finally:
        _driver().cuStreamDestroy_v2(stream)
