"""Compile capture.cu to a cubin with NVRTC at run time (no nvcc, no CUDA headers).

It calls the NVRTC library torch loads (`torch.cuda._utils._get_nvrtc_library`) directly
rather than `torch.cuda._utils._nvrtc_compile`: that helper needs CUDA_HOME for header paths
these kernels do not use, and registers only one kernel name; all of them here are extern "C".
"""

from __future__ import annotations

import ctypes
from pathlib import Path

SOURCE = Path(__file__).with_name("capture.cu")
KERNELS = ("kh_spin", "kh_fill", "kh_copy", "kh_capture_partial", "kh_capture_final")


def _nvrtc_library() -> ctypes.CDLL:
    """The NVRTC library torch uses, else the one of the nvidia-* wheels next to torch."""
    import torch
    from torch.cuda import _utils

    try:
        return _utils._get_nvrtc_library()
    except OSError:
        major = str(torch.version.cuda).split(".")[0]
        found = sorted(Path(torch.__file__).resolve().parents[1].glob(f"nvidia/**/libnvrtc.so.{major}*"))
        if not found:
            raise
        return ctypes.CDLL(str(found[0]))


def compile_cubin(arch: str, nvrtc: ctypes.CDLL | None = None, defines: dict[str, int] | None = None) -> bytes:
    """The cubin of capture.cu for `arch` (e.g. "sm_90"), with `defines` overriding its tunable macros (benches
    compare variants this way); RuntimeError with NVRTC's log on failure."""
    nvrtc = nvrtc or _nvrtc_library()

    def check(result: int, call: str) -> None:
        if result != 0:
            nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise RuntimeError(f"{call} failed: {nvrtc.nvrtcGetErrorString(result).decode()}")

    prog = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), SOURCE.read_bytes(), b"capture.cu", 0, None, None),
          "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"-default-device",
                *(f"-D{name}={value}".encode() for name, value in (defines or {}).items())]
        result = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        if result != 0:
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC could not compile capture.cu for {arch}:\n{log.value.decode()}")
        size = ctypes.c_size_t()
        check(nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin.raw
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))


def cached_cubin(arch: str) -> bytes:
    """`compile_cubin(arch)`, compiled once per machine and source into the native build folder (the parent does it
    before workers start, so a worker's start reads a file instead of running NVRTC)."""
    import hashlib
    import os
    import tempfile

    from eval.worker.native.build import BUILD_ROOT

    tag = hashlib.sha256(SOURCE.read_bytes() + arch.encode()).hexdigest()[:16]
    path = BUILD_ROOT / f"capture-{arch}-{tag}.cubin"
    if path.exists():
        return path.read_bytes()
    cubin = compile_cubin(arch)
    try:
        BUILD_ROOT.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=BUILD_ROOT, suffix=".cubin")
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:  # a read-only tree (a sandboxed worker): use it without keeping it
        pass
    return cubin
