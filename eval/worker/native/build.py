"""Build native code with the system C compiler: the worker's kh_timed_loop extension (timed_loop.c), and the plain
shared libraries of the trusted parent (its stopwatch, `eval._stopwatch`).

A build is keyed by the source, the Python version and the platform, so a changed source or
another interpreter gets its own file; it is written under a temporary name and renamed into
place, so processes building at once never load a half-written library.
"""

from __future__ import annotations

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

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "timed_loop.c"
BUILD_ROOT = HERE / "_build"
MODULE = "kh_timed_loop"


def _compiler() -> str:
    """$CC, else cc, gcc or clang from PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    raise RuntimeError("no C compiler found ($CC, cc, gcc or clang): the native timing loop (timed_loop.c) "
                       "is built with one at run time")


def ensure_built(source_path: Path = SOURCE, name: str = MODULE, extension: bool = True) -> Path:
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
