"""The build check for CUDA candidates on a machine with no GPU: compile as `load_inline` would, run nothing.

The check is torch's own build, so its flags are torch's (C++ standard, `COMMON_NVCC_FLAGS`, arch flags,
include paths) whatever torch's version: a hand-written nvcc command drifts from them, and then rejects
kernels that build on a GPU (torch 2.14's headers refuse the C++17 that such a command once passed) or
passes kernels that do not. A CUDA build of torch builds, links and imports the extension without a GPU.
A CPU build of torch leaves `CUDA_HOME` unset and lacks the CUDA libraries, so here the toolkit is the
one `nvcc` belongs to (torch's own guess), and a build whose every object compiled and only the link
failed has passed the check. Runs in the sandboxed build worker only, which exists to build.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any, Callable

from torch.utils import cpp_extension

_OBJECT = re.compile(r"^build (\S+): (?:compile|cuda_compile) ", re.MULTILINE)


class CompileOnlyDone(BaseException):
    """Raised after a compile-only build succeeded: there is nothing to load without a GPU. A BaseException, so
    that the light build's fallback (which catches a failed build's Exception) lets a success through."""


def compile_only(load_inline: Callable[..., Any]) -> Callable[..., Any]:
    """`load_inline` that builds as torch does and raises `CompileOnlyDone` once every object compiled."""
    if cpp_extension.CUDA_HOME is None:  # a CPU build of torch: the toolkit torch itself would find (nvcc's)
        cpp_extension.CUDA_HOME = cpp_extension._find_cuda_home()

    def check(name: str, cpp_sources: Any = None, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        try:
            load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)
        except Exception:
            if not _objects_built(_build_folder(name, kwargs)):
                raise  # torch's own error: the compiler's output, as on a GPU machine
        raise CompileOnlyDone()

    return check


def _build_folder(name: str, kwargs: dict[str, Any]) -> Path | None:
    """Where torch builds `name` (a rebuild under a new version, `<name>_v1`, keeps the folder)."""
    if kwargs.get("build_directory"):
        return Path(kwargs["build_directory"])
    root = os.environ.get("TORCH_EXTENSIONS_DIR")  # always set in the build worker
    return Path(root) / name if root else None


def _objects_built(folder: Path | None) -> bool:
    """True when the build file in `folder` names objects and ninja finds every one up to date (so only the link
    failed: a CPU build of torch has no CUDA libraries to link against)."""
    if folder is None:
        return False
    try:
        objects = _OBJECT.findall((folder / "build.ninja").read_text())
    except OSError:
        return False
    if not objects:
        return False
    dry_run = subprocess.run(["ninja", "-C", str(folder), "-n", *objects], capture_output=True, text=True)
    return dry_run.returncode == 0 and "no work to do" in dry_run.stdout
