"""The CUDA kernels a candidate's code built, read by the parent from the built files' ELF symbol tables.

nvcc gives every `__global__` function a host stub named `__device_stub_` + the kernel's mangled name
(`_Z22__device_stub__Z3k_cPfPf` for `extern "C" k_c(float*)`, `_ZL32__device_stub__Z6k_tmplILi1EEvPfPf` for
`k_tmpl<1>`, or the stub's static locals where it was inlined), in the object it compiled and in the library
linked from it. So the kernels a candidate built are read from what it produced, never from its text: a
`__global__ NAME(` in a string builds nothing. Two folders hold what it produced: its build folder, read once the
build worker is gone (`load_inline` at import, and the later calls it could make ahead: `eval.worker.lazy_builds`),
and its evaluating worker's own folder, read while that worker lives (the other calls in `__init__` or a lazy first
`forward`, a `build_directory` beside the candidate). Both
were the candidate's to write, so a planted ELF file can name kernels too, which gives it nothing it could not
have by building kernels of those names (a never-launched kernel under a library's name is dealt with by
`eval.steps.kernel_evidence.own_kernels`).

The worker's own folder is a tmpfs of the worker's mount namespace: the host's folder of that path stays empty.
The parent reaches it through `/proc/PID/root` and pins it (`pin_folder`) once the worker has started and before
any candidate code runs, so that nothing the candidate mounts later changes what the handle shows. What the
candidate leaves there is hostile, and an absolute symlink followed through `/proc/PID/root` resolves in the
*parent's* root, on the host's files: so every component is opened relative to its folder, with `O_NOFOLLOW`;
only regular files and folders of the same file system are read (no FIFO, device or other mount), each file
to a size cap, with caps on the files, folders, depth, bytes and symbols read in all. Nothing is ever mapped
into memory (a file truncated under an `mmap` would kill the parent with SIGBUS).

The reader is a plain parser of ELF64 little-endian files (x86-64, aarch64) that checks every offset
against the file; anything else reads as no symbols.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass

_MAX_FILE_BYTES = 256 << 20  # one library or object (an extension's is a few MB)
_MAX_TOTAL_BYTES = 1 << 30
_MAX_FILES = 256  # libraries and objects read
_MAX_FOLDERS = 4096  # folders listed
_MAX_DEPTH = 16
# stub-like names taken in all, and distinct kernels kept: an extension builds a few, a large one hundreds; a file of a
# million planted stubs once cost the parent 20 s of CPU and a 14 MB result. Past either cap the read stops: it only
# ever loses the candidate its own evidence.
_MAX_SYMBOLS = 1 << 16
MAX_KERNELS = 4096
_SUFFIXES = (".so", ".o")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO opens without blocking
# the stub itself (`_Z`, `_ZL` when internal), or, once the host compiler inlined it (a template's stub at -O3), its
# static locals and their guard (`_ZZL32__device_stub__Z6k_tmplILi1EEvPfPfE8__handle`, `_ZGVZL...`)
_STUB = re.compile(r"^_Z(?:GVZ|Z)?L?(\d+)__device_stub__")
_STUB_MARK = b"__device_stub__"
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11


def built_kernels(folder: str | os.PathLike[str]) -> list[str]:
    """Mangled names of the kernels whose host stubs the libraries and objects under `folder` hold (an `extern "C"`
    kernel's too: its stub is named after the C++ mangling, `_Z3k_cPf`); [] when `folder` cannot be opened."""
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except OSError:
        return []
    try:
        return kernels_under(fd)
    finally:
        os.close(fd)


def pin_folder(pid: int, path: str) -> int | None:
    """A handle on the folder `path` as process `pid`'s root shows it (its mount namespace), every component opened
    without following a link; None if that fails (the process is gone, or a component is not a plain folder)."""
    try:
        root = os.open(f"/proc/{pid}/root", _DIR_FLAGS & ~os.O_NOFOLLOW)  # the magic link itself is followed
    except OSError:
        return None
    parts = tuple(p for p in path.split("/") if p)
    if ".." in parts:
        os.close(root)
        return None
    fd = _open_within(root, parts, None)
    if fd != root:
        os.close(root)
    return fd


def kernels_under(folder_fd: int) -> list[str]:
    """Mangled names of the kernels whose host stubs the libraries and objects under the open folder `folder_fd`
    hold, read within the module's caps, links never followed, nothing of another file system read."""
    budget = _Budget()
    kernels: set[str] = set()
    for data in _built_files(folder_fd, budget):
        for symbol in stub_symbols(data, budget):
            kernel = stub_kernel(symbol)
            if kernel:
                kernels.add(kernel)
                if len(kernels) >= MAX_KERNELS:
                    return sorted(kernels)
    return sorted(kernels)


def stub_kernel(symbol: str) -> str | None:
    """The kernel a host stub symbol stands for: `_Z22__device_stub__Z3k_cPfPf` -> `_Z3k_cPf`; else None."""
    match = _STUB.match(symbol)
    if not match:
        return None
    length = int(match.group(1))
    identifier = symbol[match.end(1):match.end(1) + length]  # `__device_stub_` + the kernel's mangled name
    kernel = identifier[len("__device_stub_"):]
    return kernel if len(kernel) > 2 and kernel.startswith("_Z") else None


@dataclass
class _Budget:
    """What one read may still take, in all: files, folders, bytes and stub-like names."""

    files: int = _MAX_FILES
    folders: int = _MAX_FOLDERS
    bytes: int = _MAX_TOTAL_BYTES
    symbols: int = _MAX_SYMBOLS


def _built_files(root_fd: int, budget: _Budget) -> Iterator[bytes]:
    """The contents of the regular files with a library's or an object's suffix under `root_fd`, in name order,
    depth first; a link, a special file or anything on another file system is skipped. At most two folders are
    open at a time: a folder is reopened from `root_fd` when its turn comes, component by component."""
    device = os.fstat(root_fd).st_dev
    stack: list[tuple[str, ...]] = [()]
    while stack:
        parts = stack.pop()
        budget.folders -= 1
        if budget.folders < 0:
            return
        fd = _open_within(root_fd, parts, device)
        if fd is None:
            continue
        try:
            entries = _entries(fd)
            for name, is_folder in entries:
                if is_folder or not name.endswith(_SUFFIXES):
                    continue
                if budget.files <= 0 or budget.bytes <= 0:
                    return
                data = _read_file(name, fd, device, budget)
                if data is not None:
                    budget.files -= 1
                    yield data
            if len(parts) < _MAX_DEPTH:
                stack.extend(parts + (name,) for name, is_folder in reversed(entries) if is_folder)
        finally:
            if fd != root_fd:
                os.close(fd)


def _entries(fd: int) -> list[tuple[str, bool]]:
    """A folder's entries by name, each with whether it is a folder itself (a link to one is not)."""
    try:
        with os.scandir(fd) as found:
            return sorted((e.name, e.is_dir(follow_symlinks=False)) for e in found)
    except OSError:
        return []


def _open_within(root_fd: int, parts: tuple[str, ...], device: int | None) -> int | None:
    """The folder `parts` below `root_fd`, opened a component at a time without following links, on the file system
    `device` throughout (any, when None); `root_fd` itself for no parts; None if any component fails."""
    fd = root_fd
    for part in parts:
        try:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:  # not a folder, or a link
            inner = None
        if fd != root_fd:
            os.close(fd)
        if inner is None:
            return None
        fd = inner
        if device is not None and os.fstat(fd).st_dev != device:
            os.close(fd)
            return None
    return fd


def _read_file(name: str, parent: int, device: int, budget: _Budget) -> bytes | None:
    """A regular file's bytes, up to the caps (a longer file reads as None); None for anything else."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        limit = min(_MAX_FILE_BYTES, budget.bytes)
        if not stat.S_ISREG(info.st_mode) or info.st_dev != device or info.st_size > limit:
            return None
        chunks, size = [], 0
        while size <= limit:  # the file may grow after fstat: read no further than the cap
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        budget.bytes -= size
        return b"".join(chunks) if size <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def stub_symbols(data: bytes, budget: _Budget | None = None) -> list[str]:
    """Names in the symbol tables (`.symtab`, `.dynsym`) of an ELF64 little-endian file that may be host stubs
    (they hold `__device_stub__`); [] for anything else or a malformed file."""
    try:
        return _stub_symbols(data, budget or _Budget())
    except (struct.error, IndexError, ValueError):
        return []  # truncated or malformed: no symbols


def _stub_symbols(data: bytes, budget: _Budget) -> list[str]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELF64, little-endian
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(data):
        return []
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind not in (_SHT_SYMTAB, _SHT_DYNSYM) or entsize < 24 or link >= shnum:
            continue
        str_offset, str_size = sections[link][4], sections[link][5]
        if offset + size > len(data) or str_offset + str_size > len(data):
            continue
        strings = data[str_offset:str_offset + str_size]
        # the names in the table's strings that hold the mark within their first bytes (`_ZGVZL<length>`), found by
        # bytes.find (C speed) rather than by walking every symbol entry in Python; a planted file can name any
        # kernel either way (see the module's docstring)
        mark = strings.find(_STUB_MARK)
        while mark != -1:
            start = strings.rfind(b"\0", 0, mark) + 1
            end = strings.find(b"\0", mark)
            end = len(strings) if end == -1 else end
            if mark - start <= 32 and start > 0:
                budget.symbols -= 1
                if budget.symbols < 0:
                    return names
                names.append(strings[start:end].decode("ascii", "replace"))
            mark = strings.find(_STUB_MARK, end)
    return names
