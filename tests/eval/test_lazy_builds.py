"""Lazy `load_inline` calls (made in forward) are found and made ahead by the build worker (`eval.worker.lazy_builds`).

The GPU test that a published-style lazy candidate is then correct within a short call limit is in
`tests/eval/test_gpu.py` (`test_lazy_build_made_ahead`)."""

from __future__ import annotations

import threading
import time

from eval.worker.lazy_builds import build_lazy, lazy_calls

LAZY = '''
import os
from torch.utils.cpp_extension import load_inline
cuda_source = "__global__ void k() {}"
cpp_source = "void f();"
FLAGS = ["-O3"]

class ModelNew:
    def __init__(self):
        self.ext = None

    def _load(self):
        os.environ["X"] = "1"
        return load_inline(name="lazy_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                           functions=["f"], extra_cuda_cflags=FLAGS, verbose=False)

    def forward(self, x):
        if self.ext is None:
            self.ext = self._load()
        return x
'''


def _names(calls) -> list[str]:
    return [next(k.value.value for k in c.call.keywords if k.arg == "name") for c in calls]


def _namespace(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<candidate>", "exec"), namespace)  # noqa: S102  a test's own fixed source
    return namespace


def test_a_call_in_a_method_is_made_ahead_with_the_module_s_values() -> None:
    made: list[tuple[tuple, dict]] = []
    count = build_lazy(LAZY, _namespace(LAZY), lambda *a, **k: made.append((a, k)), time.monotonic() + 30)
    assert count == 1
    assert made == [((), {"name": "lazy_ext", "cpp_sources": "void f();", "cuda_sources": "__global__ void k() {}",
                          "functions": ["f"], "extra_cuda_cflags": ["-O3"], "verbose": False})]


def test_calls_whose_arguments_are_known_only_when_the_function_runs_are_left_alone() -> None:
    source = '''
from torch.utils import cpp_extension
from torch.utils.cpp_extension import load_inline
SRC = "x"
def by_parameter(src):
    return load_inline(name="a", cpp_sources=src)
def by_local_call():
    src = SRC.upper()
    return load_inline(name="b", cpp_sources=src)
def by_call():
    return load_inline(name=f"c{id(SRC)}", cpp_sources=SRC)
def by_kwargs(**kw):
    return load_inline(**kw)
def outer():
    SRC = "shadow"
    def inner():
        return cpp_extension.load_inline(name="d", cpp_sources=SRC)
    return inner
def knowable():
    return cpp_extension.load_inline(name="e", cpp_sources=[SRC, "z"], cuda_sources=None)
'''
    assert _names(lazy_calls(source)) == ["e"]


def test_a_function_s_own_constants_are_evaluated_in_order_and_the_module_is_left_unchanged() -> None:
    source = '''
from torch.utils.cpp_extension import load_inline
PREFIX = "// kernels "
cuda_source = "global"
class M:
    def _setup(self):
        cuda_source = PREFIX + "__global__ void k() {}"
        flags: list = ["-O3"]
        self.ext = load_inline(name="local_ext", cpp_sources="", cuda_sources=cuda_source, extra_cuda_cflags=flags)
    def twice(self):
        src = "a"
        src += "b"
        return load_inline(name="twice", cpp_sources=src)
    def after(self):
        ext = load_inline(name="after", cpp_sources=late)
        late = "x"
        return ext
    def computed(self):
        src = str(PREFIX)
        return load_inline(name="computed", cpp_sources=src)
    def from_parameter(self, code):
        src = code
        return load_inline(name="from_parameter", cpp_sources=src)
    def in_a_loop(self):
        for src in ("a", "b"):
            load_inline(name="in_a_loop", cpp_sources=src)
'''
    assert _names(lazy_calls(source)) == ["local_ext"]
    namespace = _namespace(source)
    made: list[dict] = []
    assert build_lazy(source, namespace, lambda **k: made.append(k), time.monotonic() + 30) == 1
    assert made == [{"name": "local_ext", "cpp_sources": "", "cuda_sources": "// kernels __global__ void k() {}",
                     "extra_cuda_cflags": ["-O3"]}]
    assert namespace["cuda_source"] == "global"  # the function's constants went to a copy of the module's namespace


def test_module_level_calls_are_the_import_s_own_and_syntax_errors_find_nothing() -> None:
    assert lazy_calls('from torch.utils.cpp_extension import load_inline\next = load_inline(name="m", cpp_sources="")') == []
    assert lazy_calls("def f(:\n") == []


def test_a_failing_or_unknowable_call_is_skipped_and_the_rest_still_built() -> None:
    source = '''
from torch.utils.cpp_extension import load_inline
class M:
    def a(self):
        return load_inline(name="first", cpp_sources=NEVER_SET)
    def b(self):
        return load_inline(name="second", cpp_sources="")
    def c(self):
        return load_inline(name="third", cpp_sources="")
'''
    made: list[str] = []

    def load(**kw):
        made.append(kw["name"])
        if kw["name"] == "second":
            raise RuntimeError("nvcc failed")

    assert build_lazy(source, _namespace(source), load, time.monotonic() + 30) == 2
    assert made == ["second", "third"]


def test_nothing_starts_after_the_deadline_and_a_slow_build_is_not_waited_for() -> None:
    source = '''
from torch.utils.cpp_extension import load_inline
def a():
    return load_inline(name="slow", cpp_sources="")
def b():
    return load_inline(name="never", cpp_sources="")
'''
    made: list[str] = []
    release = threading.Event()

    def slow(**kw):
        made.append(kw["name"])
        release.wait(60)

    build_lazy(source, _namespace(source), slow, time.monotonic() + 0.5)
    still_building = not release.is_set()
    release.set()
    assert still_building and made == ["slow"]  # it returned at the deadline while the build still ran
    assert build_lazy(source, _namespace(source), slow, time.monotonic() - 1) == 0
