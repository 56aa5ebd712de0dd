"""The workers' bytecode (`eval.process._bytecode`): primed by a trusted child, read by workers, never written by them."""

from __future__ import annotations

import importlib.util
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from eval.process import _bytecode
from eval.process._reaper import owner_token
from eval.crossing import protocol as p
from eval.process.confine import _PROJECT_HIDDEN, _PROJECT_PACKAGES, PROJECT_ROOT
from eval.process.sandbox import WorkerProcess
from harness.corpus.hostile import FORWARD, PROBLEM, variant
from tests.machine import MOUNT_NS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a child imports torch; a worker starts


def _cached(folder: Path, source: str) -> Path:
    """Where a worker whose `pycache_prefix` is `folder` reads the bytecode of `source`."""
    return folder / Path(source).resolve().relative_to("/").parent / f"{Path(source).stem}.{sys.implementation.cache_tag}.pyc"


@pytest.fixture(scope="module")
def folder() -> Path:
    primed = _bytecode.primed_folder(None, force=True)
    assert primed is not None
    return primed


def test_an_install_without_bytecode_is_told_apart(tmp_path, monkeypatch):
    package = tmp_path / "kh_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _bytecode.installed_without_bytecode("kh_probe_pkg")
    cached = Path(importlib.util.cache_from_source(str(package / "__init__.py"), optimization=""))
    if sys.pycache_prefix is None:  # compile beside the source, as pip does at install time
        import py_compile

        py_compile.compile(str(package / "__init__.py"), cfile=str(package / "__pycache__" / cached.name))
        assert not _bytecode.installed_without_bytecode("kh_probe_pkg")
    assert not _bytecode.installed_without_bytecode("kh_no_such_package")  # nothing to compile: nothing to prime


def test_the_primed_folder_holds_a_workers_imports_and_only_the_harness_may_write_it(folder):
    import torch

    from eval.worker import serve

    for source in (torch.__file__, serve.__file__):
        assert _cached(folder, source).is_file(), source
    # of the project, only what a worker may read itself (its packages, never the hand-written solutions)
    project = folder / PROJECT_ROOT.resolve().relative_to("/")
    seen = {path.relative_to(project).parts[0] for path in project.rglob("*.pyc")}
    # and the interpreter's own environment where it lives in the project (the README's `.venv`): a worker reads it
    prefix = Path(sys.prefix).resolve()
    env = {prefix.relative_to(PROJECT_ROOT.resolve()).parts[0]} if prefix.is_relative_to(PROJECT_ROOT.resolve()) else set()
    assert seen <= set(_PROJECT_PACKAGES) | env, seen
    assert not [p for hidden in _PROJECT_HIDDEN for p in (project / hidden).rglob("*.pyc")]
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        assert not mode & (stat.S_IWGRP | stat.S_IWOTH), path
        assert mode & stat.S_IROTH, path  # a worker running as another user reads it


def test_a_priming_that_fails_leaves_no_folder_and_workers_compile_as_before(monkeypatch):
    monkeypatch.setattr(_bytecode, "PRIME_TIMEOUT_S", 0.01)  # the child cannot even import torch in time
    mine = f"kh-bytecode-{owner_token()}-*"  # this process's folders (another test process may prime meanwhile)
    before = set(Path(tempfile.gettempdir()).glob(mine))
    assert _bytecode.primed_folder.__wrapped__(None, force=True) is None
    assert set(Path(tempfile.gettempdir()).glob(mine)) == before


def test_no_bytecode_no_flags():
    assert _bytecode.interpreter_flags(None) == []


@pytest.mark.skipif(not MOUNT_NS, reason="mount namespaces are not permitted here")
def test_a_worker_reads_the_primed_bytecode_and_its_candidate_cannot_plant_any(folder):
    """The worker's interpreter reads bytecode from the primed folder, whose files match their sources (so Python
    runs them), and a candidate that tries to plant bytecode there for the next worker cannot."""
    import torch

    planted = _cached(folder, torch.__file__).with_name("kh_planted.pyc")
    candidate = variant(FORWARD, f"""        import os, sys, importlib.util, torch
        assert sys.pycache_prefix == {str(folder)!r}, sys.pycache_prefix
        cached = importlib.util.cache_from_source(torch.__file__)
        header = open(cached, 'rb').read(16)
        source = os.stat(torch.__file__)
        assert header[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(header[8:12], 'little') == int(source.st_mtime) & 0xFFFFFFFF
        assert int.from_bytes(header[12:16], 'little') == source.st_size & 0xFFFFFFFF
        for target in ({str(planted)!r}, cached):
            try:
                open(target, 'ab').write(b'planted')
            except OSError:
                continue
            raise RuntimeError('planted bytecode at ' + target)
""" + FORWARD)
    before = _cached(folder, torch.__file__).read_bytes()
    worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=4096, isolate_network=True, bytecode=folder)
    try:
        hello, _ = worker.request(p.Hello(device="cpu", capture_key=1), timeout=600)
        assert hello.ok, hello.error
        load, _ = worker.request(p.Load(problem_source=PROBLEM, problem_label="<add_relu>", candidate_source=candidate,
                                        weight_seed=1), timeout=600)
        assert load.ok, load.error
        run, _ = worker.request(p.Run(args=[{"t": 0}, {"t": 1}]), [torch.randn(4096), torch.randn(4096)], timeout=60)
        assert run.ok, run.error  # forward ran the checks above
    finally:
        worker.close()
    assert not planted.exists()
    assert _cached(folder, torch.__file__).read_bytes() == before
