"""`harness bench imported-memory`: does a kernel run slower on memory another process exported? (GPU)

Observed timing (issue 52) runs both sides' blocks in a second CUDA context on memory the reference process exported
by CUDA IPC (`eval.worker.cuda_ipc`), each repetition on input regions of its own. There, on an H200 (2026-12-04),
fused Triton kernels read 30-60 % over their timing loop's figure (which reads the worker's own memory, the same
addresses every call), and eager kernels less. One suspect is the imported mapping: if its pages are smaller than
the exporter's, each repetition's new addresses miss the GPU's TLB. This times, per call, the honest Triton add
(`harness.corpus.candidates`) and its eager reference (three kernels) in a worker process, each call behind an L2
flush and a GPU lead (so the host has enqueued it before the GPU reaches it: without the lead a call's time is the
host's launch, and two earlier scripts read the same case 24-49 us from round to round), on:

- `own`: the worker's own allocation;
- `ipc`: the exporter's `cuMemAlloc` memory opened by legacy CUDA IPC, as observed timing opens it;
- `vmm`: the exporter's `cuMemCreate` memory at 2 MB granularity, exported as a POSIX file descriptor (a file
  descriptor crosses a sandbox where a legacy handle's pid does not), mapped by the worker;

each with every call on the same addresses (`same`) and with the calls cycling through distinct regions
(`distinct`, as a window's repetitions do). Three rounds, interleaved; the figure is the median of the rounds'
medians.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Callable

import torch

from eval import ExportedBuffer, ImportedBuffer, bytes_at, cycles_per_us
from harness.corpus import candidates

N = 1 << 22  # float32 elements an input
SLOTS = 16
NBYTES = 2 * SLOTS * N * 4
ROUNDS = 3
LEAD_US = 200.0
u64 = ctypes.c_uint64


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE, _RECOMMENDED = 1, 1, 1, 3, 1


@functools.cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _check(rc: int, what: str) -> None:
    if rc:
        raise RuntimeError(f"{what}: CUresult {rc}")


def _prop() -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location.type, prop.location.id = _ON_DEVICE, torch.cuda.current_device()
    return prop


def _vmm_size(nbytes: int) -> int:
    """`nbytes` rounded up to the allocation granularity the driver recommends (at least 2 MB)."""
    granularity = ctypes.c_size_t()
    _check(_driver().cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(_prop()), _RECOMMENDED),
           "cuMemGetAllocationGranularity")
    step = max(granularity.value, 2 << 20)
    return (nbytes + step - 1) // step * step


def _map(handle: ctypes.c_uint64, size: int) -> int:
    """Reserve an address range, map the allocation `handle` there, readable and writable by this device."""
    lib, ptr = _driver(), u64()
    _check(lib.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(2 << 20), u64(0), u64(0)),
           "cuMemAddressReserve")
    _check(lib.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, u64(0)), "cuMemMap")
    access = _AccessDesc()
    access.location.type, access.location.id, access.flags = _ON_DEVICE, torch.cuda.current_device(), _READ_WRITE
    _check(lib.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")
    return ptr.value


def _export_vmm(nbytes: int) -> tuple[int, int]:
    """A `cuMemCreate` allocation of this process, mapped here and exported: (its address, a file descriptor)."""
    lib, handle, size = _driver(), u64(), _vmm_size(nbytes)
    _check(lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(_prop()), u64(0)), "cuMemCreate")
    ptr = _map(handle, size)
    fd = ctypes.c_int(-1)
    _check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), handle, _POSIX_FD, u64(0)),
           "cuMemExportToShareableHandle")
    return ptr, fd.value


def _import_vmm(fd: int, nbytes: int) -> int:
    handle = u64()
    _check(_driver().cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
           "cuMemImportFromShareableHandle")
    return _map(handle, _vmm_size(nbytes))


def _module(folder: str, source: str, name: str) -> Any:
    """`source` imported as a module from a file (Triton reads a kernel's source from its file)."""
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _per_call_us(model: Callable[..., Any], memory: torch.Tensor, distinct: bool, flush: torch.Tensor,
                 lead_cycles: int) -> float:
    """The median of 2 x SLOTS calls' own events (after SLOTS calls to warm up), each behind a flush and a lead."""
    marks = []
    for i in range(3 * SLOTS):
        slot = i % SLOTS if distinct else 0
        flush.zero_()
        torch.cuda._sleep(lead_cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(memory[0, slot], memory[1, slot])
        end.record()
        marks.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1000 for a, b in marks[SLOTS:])


def worker(handle: str, fd: int) -> None:
    """The worker's side: every (kernel, memory, slots) timed per call, ROUNDS rounds; one JSON line out."""
    torch.zeros(1, device="cuda")
    shape = (2, SLOTS, N)
    memories = {"own": torch.randn(*shape, device="cuda"),
                "ipc": ImportedBuffer(handle, NBYTES).tensor.view(torch.float32).view(*shape),
                "vmm": bytes_at(_import_vmm(fd, NBYTES), NBYTES).view(torch.float32).view(*shape)}
    with tempfile.TemporaryDirectory() as folder:
        models = {"triton": _module(folder, candidates.triton_candidate(1024, 4), "bench_candidate").ModelNew(1.5),
                  "eager": _module(folder, candidates.problem_source(N), "bench_reference").Model(1.5)}
        flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
        cycles = int(LEAD_US * cycles_per_us())
        rounds: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            for kernel, model in models.items():
                for where, memory in memories.items():
                    for slots in ("same", "distinct"):
                        rounds.setdefault(f"{kernel}/{where}/{slots}", []).append(
                            _per_call_us(model, memory, slots == "distinct", flush, cycles))
    print(json.dumps(rounds), flush=True)


def main(out_path: str | None = None) -> int:
    if not torch.cuda.is_available():
        print("harness bench imported-memory needs a CUDA GPU")
        return 2
    legacy = ExportedBuffer(NBYTES)
    legacy.tensor.view(torch.float32).normal_()
    ptr, fd = _export_vmm(NBYTES)
    bytes_at(ptr, NBYTES).view(torch.float32).normal_()
    torch.cuda.synchronize()
    run = subprocess.run([sys.executable, "-m", "harness.bench.imported_memory", "worker", legacy.handle, str(fd)],
                         pass_fds=(fd,), capture_output=True, text=True)
    if run.returncode:
        print(run.stderr[-3000:])
        return 1
    rounds = json.loads(run.stdout.strip().splitlines()[-1])
    figures = {key: statistics.median(values) for key, values in rounds.items()}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: us a call, each behind an L2 flush and a "
          f"{LEAD_US:g} us lead; median of {ROUNDS} rounds (each the median of {2 * SLOTS} calls)")
    for kernel in ("triton", "eager"):
        for slots in ("same", "distinct"):
            row = "  ".join(f"{where} {figures[f'{kernel}/{where}/{slots}']:7.2f}" for where in ("own", "ipc", "vmm"))
            print(f"{kernel:6s} {slots:8s} {row}")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "elements": N, "slots": SLOTS,
              "lead_us": LEAD_US, "figures_us": figures, "rounds_us": rounds}
    if out_path:
        with open(out_path, "w") as f:
            json.dump(report, f, indent=1)
    legacy.close()
    return 0


if __name__ == "__main__":  # the worker's side, started by main()
    worker(sys.argv[2], int(sys.argv[3]))
