"""The one builder of the project's native code, which both sides load: the worker's timed loop (a C extension of
eval/worker/native/timed_loop.c, built with the system C compiler), its capture kernels (eval/worker/native/capture.cu,
a cubin compiled by NVRTC at run time: no nvcc, no CUDA headers), and the trusted parent's stopwatch (a plain shared
library, `eval.crossing._stopwatch`).

The parent builds them where the project is writable, before any worker starts (`prepare_native`); a confined worker
sees the project read-only and only loads what is there. So this module is part of the crossing (the worker imports
it to load them), and nothing of the parent's imports the worker's code to build them.

A build is keyed by the source, the Python version and the platform, so a changed source or another interpreter gets
its own file; it is written under a temporary name and renamed into place, so processes building at once never load
a half-written library. NVRTC is the library torch loads (`torch.cuda._utils._get_nvrtc_library`), called directly
rather than through `torch.cuda._utils._nvrtc_compile`: that helper needs CUDA_HOME for header paths these kernels
do not use, and registers only one kernel name; all of them here are extern "C".
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

NATIVE = Path(__file__).resolve().parents[1] / "worker" / "native"
LOOP_SOURCE = NATIVE / "timed_loop.c"
CAPTURE_SOURCE = NATIVE / "capture.cu"
BUILD_ROOT = NATIVE / "_build"
MODULE = "kh_timed_loop"
CAPTURE_KERNELS = ("kh_spin", "kh_fill", "kh_copy", "kh_capture_partial", "kh_capture_final")


def prepare_native(capability: tuple[int, int]) -> None:
    """Build the loop's extension and compile its capture kernels for `capability`, where the project is writable
    (the trusted parent, before any worker starts): confined workers see the project read-only and only load them."""
    ensure_built()
    cached_cubin(f"sm_{capability[0]}{capability[1]}")


def _compiler() -> str:
    """$CC, else cc, gcc or clang from PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    raise RuntimeError("no C compiler found ($CC, cc, gcc or clang): the native timing loop (timed_loop.c) "
                       "is built with one at run time")


def ensure_built(source_path: Path = LOOP_SOURCE, name: str = MODULE, extension: bool = True) -> Path:
    """Path of the built library, compiling it first when this source/interpreter has none yet: a Python extension
    module `name`, or (`extension=False`) a plain shared library for ctypes."""
    source = source_path.read_bytes()
    suffix = (sysconfig.get_config_var("EXT_SUFFIX") or ".so") if extension else ".so"
    tag = hashlib.sha256(source + sys.version.encode() + sysconfig.get_platform().encode()
                         + platform.machine().encode() + suffix.encode()).hexdigest()[:16]
    target = BUILD_ROOT / tag / f"{name}{suffix}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    for folder in (BUILD_ROOT, target.parent):
        folder.chmod(0o755)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=suffix, dir=target.parent)
    os.close(fd)
    include = [f"-I{sysconfig.get_paths()['include']}"] if extension else []
    cmd = [_compiler(), "-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall", *include, str(source_path), "-o", tmp, "-ldl"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building {source_path.name} failed ({' '.join(cmd)}):\n{done.stderr}")
        os.chmod(tmp, 0o755)  # mkstemp makes it 0600: the workers load it as another user (uid 65534)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(path: Path) -> ModuleType:
    """Import the extension at `path`; it is not entered in sys.modules, so `import` does not find it."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    if spec is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


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
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), CAPTURE_SOURCE.read_bytes(), b"capture.cu", 0, None, None),
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
    tag = hashlib.sha256(CAPTURE_SOURCE.read_bytes() + arch.encode()).hexdigest()[:16]
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
