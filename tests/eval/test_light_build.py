"""The light `.cu` of `load_inline` builds (`eval.worker.light_build`): which sources are lightened, the light
build's own name, and the fallback to the sources as written (how the evaluating worker skips a light build that
failed is `eval.worker.prebuilt`'s record: tests/eval/test_prebuilt.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from eval.worker import light_build

HEAVY = "#include <torch/extension.h>\n__global__ void k(float* x) {}\n"


def test_only_heavy_torch_includes_are_lightened() -> None:
    assert light_build.lightened(HEAVY) == ["#include <torch/types.h>\n__global__ void k(float* x) {}\n"]
    assert light_build.lightened(["  #  include <torch/torch.h>  ", "int x;"]) == ["#include <torch/types.h>", "int x;"]
    assert light_build.lightened("#include <torch/types.h>\n") is None  # nothing to lighten: built as written
    assert light_build.lightened('// #include <torch/extension.h> in a comment\n') is None
    assert light_build.lightened(None) is None


class _FakeLoadInline:
    """Records every call; fails for the light sources when told to, as nvcc would on a file that needs more."""

    def __init__(self, light_fails: bool):
        self.calls: list[tuple[str, list[str]]] = []
        self.light_fails = light_fails

    def __call__(self, name, cpp_sources, cuda_sources=None, **kwargs):
        sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
        self.calls.append((name, sources))
        if self.light_fails and not any("extension.h" in s for s in sources):
            raise RuntimeError("Error building extension: torch::nn is not a member of torch")
        return types.SimpleNamespace(name=name)


@pytest.fixture
def extensions(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    return tmp_path


def test_the_light_build_has_its_own_name_and_is_what_the_candidate_gets(extensions: Path) -> None:
    fake = _FakeLoadInline(light_fails=False)
    module = light_build.wrap(fake)("ext_a", "decl;", HEAVY, functions=["k"])
    assert fake.calls == [("ext_a_kh_light", light_build.lightened(HEAVY))]
    assert module.name == "ext_a_kh_light" and sys.modules.pop("ext_a") is module


def test_a_failed_light_build_falls_back_to_the_sources_as_written(extensions: Path) -> None:
    fake = _FakeLoadInline(light_fails=True)
    module = light_build.wrap(fake)("ext_b", "decl;", HEAVY)
    assert [name for name, _ in fake.calls] == ["ext_b_kh_light", "ext_b"]
    assert fake.calls[1][1] == [HEAVY] and module.name == "ext_b"  # the sources as written, under their name


def test_when_both_fail_the_error_of_the_sources_as_written_is_raised(extensions: Path) -> None:
    def always_fails(name, cpp_sources, cuda_sources=None, **kwargs):
        raise RuntimeError(f"nvcc failed for {name}")

    with pytest.raises(RuntimeError, match="nvcc failed for ext_c$"):
        light_build.wrap(always_fails)("ext_c", "decl;", HEAVY)


@pytest.mark.parametrize("kwargs", [{"build_directory": "/somewhere"}, {}])
def test_own_build_folders_and_unset_extension_dirs_are_built_as_written(kwargs, monkeypatch, tmp_path) -> None:
    if kwargs:
        monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    else:
        monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    fake = _FakeLoadInline(light_fails=False)
    light_build.wrap(fake)("ext_d", "decl;", HEAVY, **kwargs)
    assert fake.calls == [("ext_d", [HEAVY])]
