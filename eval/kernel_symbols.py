"""The CUDA kernels a candidate's build defined, read by the parent from the built files' ELF symbol tables.

nvcc gives every `__global__` function a host stub named `__device_stub_` + the kernel's mangled name
(`_Z22__device_stub__Z3k_cPfPf` for `extern "C" k_c(float*)`, `_ZL32__device_stub__Z6k_tmplILi1EEvPfPf` for
`k_tmpl<1>`, or the stub's static locals where it was inlined), in the object it compiled and in the library linked from it. So the kernels a build
defined are read from what it produced, never from the candidate's text: a `__global__ NAME(` in a
string builds nothing. The parent reads the build folder after the build worker is gone; the folder was
the candidate's to write, so a planted ELF file can name kernels too, which gives it nothing it could
not have by building kernels of those names (a never-launched kernel under a library's name is dealt
with by `eval.checks.own_kernels`).

The reader is a plain parser of ELF64 little-endian files (x86-64, aarch64) that checks every offset
against the file; anything else, a symlink or a file past the size cap reads as no symbols.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

_MAX_FILE_BYTES = 1 << 30
_MAX_FILES = 256
_SUFFIXES = (".so", ".o")
# the stub itself (`_Z`, `_ZL` when internal), or, once the host compiler inlined it (a template's stub at -O3), its
# static locals and their guard (`_ZZL32__device_stub__Z6k_tmplILi1EEvPfPfE8__handle`, `_ZGVZL...`)
_STUB = re.compile(r"^_Z(?:GVZ|Z)?L?(\d+)__device_stub__")
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11


def built_kernels(folder: str | Path) -> list[str]:
    """Mangled names of the kernels whose host stubs the files under `folder` hold (an `extern "C"` kernel's too:
    its stub is named after the C++ mangling, `_Z3k_cPf`)."""
    kernels: set[str] = set()
    for path in _built_files(Path(folder)):
        for symbol in elf_symbols(path):
            kernel = stub_kernel(symbol)
            if kernel:
                kernels.add(kernel)
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


def _built_files(folder: Path) -> list[Path]:
    """Regular files with a library's or an object's suffix under `folder`, links never followed."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if name.endswith(_SUFFIXES) and path.is_file() and not path.is_symlink():
                found.append(path)
                if len(found) >= _MAX_FILES:
                    return found
    return found


def elf_symbols(path: Path) -> list[str]:
    """Names in the symbol tables (`.symtab`, `.dynsym`) of an ELF64 little-endian file; [] for anything else."""
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    try:
        return _symbols(data)
    except (struct.error, IndexError, ValueError):
        return []  # truncated or malformed: no symbols


def _symbols(data: bytes) -> list[str]:
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
        for entry in range(offset, offset + size - entsize + 1, entsize):
            name_at, = struct.unpack_from("<I", data, entry)
            end = strings.find(b"\0", name_at)
            if 0 < name_at < len(strings) and end > name_at:
                names.append(strings[name_at:end].decode("ascii", "replace"))
    return names
