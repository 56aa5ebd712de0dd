"""Extensions built ahead by the build worker, loaded read-only by the evaluating worker.

The build worker runs each `load_inline` call of a candidate for real, in the candidate's own build
folder, and records there, per call, a fingerprint of its arguments and the library it built (or that it
failed). The evaluating worker makes the same calls: a call with a recorded library imports that file
directly, without taking torch's lock file or running ninja in the build folder, which it sees
read-only; a recorded failure fails at once (the light build's fallback then takes the sources as
written, `eval.worker.light_build`); a call the build never made (its arguments depend on the GPU, say)
is built into the evaluating worker's own folder. So no evaluating worker can write any build folder,
its own candidate's included, and one candidate cannot alter what another loads.

The record is written by candidate code's process and so is trusted only as far as the candidate is:
a library outside the candidate's build folder is never imported from it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import types
from pathlib import Path
from typing import Any, Callable

from eval.crossing._build_record import read_record, write_record


class UnfinishedBuild(RuntimeError):
    """A call whose build the build worker began but had not finished when its time ran out."""


def fingerprint(name: str, cpp_sources: Any, cuda_sources: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Identifies one `load_inline` call by everything that shapes its library (not `verbose`)."""
    shaping = sorted((k, repr(v)) for k, v in kwargs.items() if k != "verbose")
    return hashlib.sha256(repr((name, cpp_sources, cuda_sources, args, shaping)).encode()).hexdigest()


def recording(load_inline: Callable[..., Any], folder: Path) -> Callable[..., Any]:
    """`load_inline` that records, in `folder`, what each call built or that it failed (the build worker)."""
    record = read_record(folder)

    def record_call(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        key = fingerprint(name, cpp_sources, cuda_sources, args, kwargs)
        _save(folder, record, key, {"name": name, "building": True})  # what stays if the build's time runs out
        try:
            module = load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)
        except Exception:
            _save(folder, record, key, {"name": name, "failed": True})
            raise
        except BaseException:  # a compile-only build's success (`CompileOnlyDone`): nothing was built to load
            _forget(folder, record, key)
            raise
        if isinstance(module, types.ModuleType) and getattr(module, "__file__", None):
            _save(folder, record, key, {"name": name, "library": module.__file__})
        elif _loads_ops(kwargs) and isinstance(module, str):  # torch.ops registrations: load_inline gives the path
            _save(folder, record, key, {"name": name, "library": module, "ops": True})
        else:  # nothing the evaluating worker can import from the record (a standalone executable): made there
            _forget(folder, record, key)
        return module

    return record_call


def loading(load_inline: Callable[..., Any], folder: Path) -> Callable[..., Any]:
    """`load_inline` that imports what the build recorded in `folder`, and builds only what it did not."""
    records = read_record(folder)
    root = folder.resolve()

    def load_or_build(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        entry = records.get(fingerprint(name, cpp_sources, cuda_sources, args, kwargs), {})
        if entry.get("failed"):
            raise RuntimeError(f"load_inline({name!r}) failed when the candidate was built")
        if entry.get("building"):
            raise UnfinishedBuild(f"load_inline({name!r}) was still building when the build's time limit ran out "
                                  f"(eval.import_timeout_s, which covers the builds made in forward as well)")
        library = Path(str(entry["library"])).resolve() if entry.get("library") else None
        if library and library.is_relative_to(root) and library.is_file():
            if entry.get("ops") and _loads_ops(kwargs):
                import torch

                torch.ops.load_library(str(library))
                return str(library)
            return _import_library(library)
        return load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)  # into this worker's own folder

    return load_or_build


def _save(folder: Path, record: dict[str, dict[str, Any]], key: str, entry: dict[str, Any]) -> None:
    record[key] = entry
    write_record(folder, record)


def _forget(folder: Path, record: dict[str, dict[str, Any]], key: str) -> None:
    record.pop(key, None)
    write_record(folder, record)


def _loads_ops(kwargs: dict[str, Any]) -> bool:
    return kwargs.get("is_python_module", True) is False and not kwargs.get("is_standalone", False)


def _import_library(library: Path) -> types.ModuleType:
    """Import a built extension as torch does after a build: the module's name is the library's stem."""
    name = library.name.split(".")[0]
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the built extension {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
