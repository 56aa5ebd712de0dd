"""A lighter `.cu` for every `load_inline` build: the candidate's `torch/extension.h` include, lightened.

`load_inline` writes `cuda_sources` into a `.cu` file after its own `#include <torch/types.h>`; a
candidate's `#include <torch/extension.h>` (or `<torch/torch.h>`) on top of that makes nvcc's three
front ends (cudafe++, cicc, the host compiler) parse the whole C++ frontend and pybind11, which a
kernel file rarely uses. Measured with `nvcc --time` on the bench's CUDA candidate: 77-89 s as
written, 33 s with that include dropped (`docs/benchmarks.md`). The `.cu` is the critical path of
a build (the `.cpp` with the bindings compiles beside it), so a build takes about as long as it.

So each `load_inline` call first builds the `.cu` with those includes replaced by `torch/types.h`,
under its own extension name (`<name>_kh_light`, so torch's in-process versioner never renames the
call as written), and falls back to the sources as written when that fails. The evaluating worker makes
the same calls (it installs the same wrapper before importing the candidate), and `eval.worker.prebuilt`
answers each from the build's record: the light library where it was built, an immediate failure where
it was not, so the fallback takes the library built from the sources as written. Only builds into the
evaluator's build folders (`TORCH_EXTENSIONS_DIR`) are lightened; a candidate that passes its own
`build_directory`, or positional arguments past `cuda_sources`, is built as written. Without a GPU the
compile-only check (`eval.worker.compile_only`) goes the same way, light first.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable

from eval.worker.prebuilt import UnfinishedBuild

LIGHT_SUFFIX = "_kh_light"
_HEAVY_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<torch/(extension|torch)\.h>[ \t]*$", re.MULTILINE)


def lightened(cuda_sources: Any) -> list[str] | None:
    """`cuda_sources` with every heavy torch include replaced by `torch/types.h`, or None if it has none."""
    if cuda_sources is None:
        return None
    sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources)
    if not all(isinstance(s, str) for s in sources) or not any(_HEAVY_INCLUDE.search(s) for s in sources):
        return None
    return [_HEAVY_INCLUDE.sub("#include <torch/types.h>", s) for s in sources]


def wrap(load_inline: Callable[..., Any]) -> Callable[..., Any]:
    """`load_inline` that tries the light `.cu` first and falls back to the sources as written."""

    def light_first(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        light = lightened(cuda_sources)
        if light is None or args or kwargs.get("build_directory") or not os.environ.get("TORCH_EXTENSIONS_DIR"):
            return load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)
        try:
            module = load_inline(f"{name}{LIGHT_SUFFIX}", cpp_sources, light, **kwargs)
        except UnfinishedBuild:  # the build's time ran out here: the sources as written were never built either
            raise
        except Exception:  # noqa: BLE001  the sources as written decide: their error is the one reported
            return load_inline(name, cpp_sources, cuda_sources, **kwargs)
        sys.modules.setdefault(name, module)
        return module

    return light_first
