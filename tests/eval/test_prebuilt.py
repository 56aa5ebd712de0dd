"""Extensions built ahead and loaded read-only (`eval.worker.prebuilt`): what the build worker records, what the
evaluating worker imports from the record, and, end to end with real compilers and sandboxes, that the evaluating
worker loads a candidate's C++ or CUDA extensions without writing any build folder (it sees them read-only)."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import types
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch.utils import cpp_extension

from eval.crossing import protocol as p
from eval.builds import Builder
from eval.process.sandbox import WorkerProcess, sandbox_plan
from eval.crossing import _build_record
from eval.worker import light_build, prebuilt
from eval.worker.compile_only import CompileOnlyDone
from harness.corpus.hostile import PROBLEM

HEAVY = "#include <torch/extension.h>\n__global__ void k(float* x) {}\n"


class _FakeBuild:
    """A `load_inline` that "builds" a Python file standing in for the library (importable as the real one is),
    and fails for light sources when told to, as nvcc does on a file that needs the full torch headers."""

    def __init__(self, folder: Path, light_fails: bool = False):
        self.folder, self.light_fails = folder, light_fails
        self.calls: list[str] = []

    def __call__(self, name, cpp_sources, cuda_sources=None, **kwargs):
        self.calls.append(name)
        sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
        if self.light_fails and not any("extension.h" in s for s in sources):
            raise RuntimeError("Error building extension: torch::nn is not a member of torch")
        library = self.folder / name / f"{name}.py"
        library.parent.mkdir(parents=True, exist_ok=True)
        library.write_text(f"BUILT_AS = {name!r}\n")
        module = types.ModuleType(name)
        module.__file__, module.BUILT_AS = str(library), name
        return module


def _never(*args, **kwargs):
    raise AssertionError("the evaluating worker built a call that the build recorded")


@pytest.fixture
def build_folder(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "ext"
    folder.mkdir()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "own"))  # the evaluating worker's own folder
    return folder


def test_a_recorded_call_imports_the_built_library_and_builds_nothing(build_folder: Path) -> None:
    built = prebuilt.recording(_FakeBuild(build_folder), build_folder)("ext_a", "decl;", "int x;", functions=["k"])
    loaded = prebuilt.loading(_never, build_folder)("ext_a", "decl;", "int x;", functions=["k"])
    assert loaded.BUILT_AS == "ext_a" and Path(loaded.__file__) == Path(built.__file__)


def test_a_failed_light_build_is_not_retried_and_the_sources_as_written_are_loaded(build_folder: Path) -> None:
    build = _FakeBuild(build_folder, light_fails=True)
    light_build.wrap(prebuilt.recording(build, build_folder))("ext_b", "decl;", HEAVY)
    assert build.calls == ["ext_b_kh_light", "ext_b"]
    record = prebuilt.read_record(build_folder)
    assert sorted((e["name"], bool(e.get("failed"))) for e in record.values()) == [("ext_b", False),
                                                                                   ("ext_b_kh_light", True)]
    module = light_build.wrap(prebuilt.loading(_never, build_folder))("ext_b", "decl;", HEAVY)
    assert module.BUILT_AS == "ext_b"


def test_a_successful_light_build_is_what_the_evaluating_worker_loads(build_folder: Path) -> None:
    light_build.wrap(prebuilt.recording(_FakeBuild(build_folder), build_folder))("ext_c", "decl;", HEAVY)
    sys.modules.pop("ext_c")  # the build worker's, in this one test process
    module = light_build.wrap(prebuilt.loading(_never, build_folder))("ext_c", "decl;", HEAVY)
    assert module.BUILT_AS == "ext_c_kh_light" and sys.modules.pop("ext_c") is module


def test_unrecorded_calls_and_libraries_outside_the_build_folder_are_built_in_the_workers_own(build_folder: Path,
                                                                                              tmp_path: Path) -> None:
    prebuilt.recording(_FakeBuild(build_folder), build_folder)("ext_d", "decl;", "int x;")
    own = _FakeBuild(tmp_path / "own")
    assert prebuilt.loading(own, build_folder)("ext_d", "decl;", "int y;").BUILT_AS == "ext_d"  # other sources
    assert own.calls == ["ext_d"]
    # a record (written by candidate code in its build worker) naming a library elsewhere is not followed
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("BUILT_AS = 'elsewhere'\n")
    record = prebuilt.read_record(build_folder)
    for entry in record.values():
        entry["library"] = str(build_folder / ".." / "elsewhere.py")
    (build_folder / _build_record.RECORD).write_text(json.dumps(record))
    assert prebuilt.loading(own, build_folder)("ext_d", "decl;", "int x;").BUILT_AS == "ext_d"
    assert own.calls == ["ext_d", "ext_d"]



class _Stuck(_FakeBuild):
    """A build that never ends on its own, as one cut off by the build worker's time limit: the lazy-build thread is
    still inside it at the deadline, and the process is then killed, leaving the record as it stood."""

    def __init__(self, folder: Path, stuck_on: str, light_fails: bool = False):
        super().__init__(folder, light_fails)
        self.stuck_on, self.entered, self.release = stuck_on, threading.Event(), threading.Event()

    def __call__(self, name, cpp_sources, cuda_sources=None, **kwargs):
        if name != self.stuck_on:
            return super().__call__(name, cpp_sources, cuda_sources, **kwargs)
        self.calls.append(name)
        self.entered.set()
        self.release.wait(60)
        raise RuntimeError("the build worker was killed")


def _cut_off(build: _Stuck, call: Callable[[], object]) -> None:
    """Run `call` in the background until `build` is stuck inside its slow build (what the call does once released
    does not matter: the build worker is killed at that point)."""
    def in_background() -> None:
        try:
            call()
        except RuntimeError:
            pass

    threading.Thread(target=in_background, daemon=True).start()
    assert build.entered.wait(30)


@pytest.mark.parametrize("stuck_on, light_fails, built", [("ext_e_kh_light", False, ["ext_e_kh_light"]),
                                                          ("ext_e", True, ["ext_e_kh_light", "ext_e"])])
def test_a_build_the_time_limit_cut_off_fails_at_once_and_is_never_begun_again(build_folder: Path, stuck_on: str,
                                                                               light_fails: bool, built) -> None:
    """The class of CUDA-L1's L1/10 (a build made in forward, ahead, that ran out the build's time): the record says
    it was still building, and the evaluating worker's call fails at once, naming the limit, whether the light build
    or the sources as written were cut off; it never builds inside a trial's call limit (`_never`)."""
    build = _Stuck(build_folder, stuck_on, light_fails)
    _cut_off(build, lambda: light_build.wrap(prebuilt.recording(build, build_folder))("ext_e", "decl;", HEAVY))
    try:
        assert build.calls == built
        assert [e.get("building") for e in prebuilt.read_record(build_folder).values() if e["name"] == stuck_on] == \
            [True]
        with pytest.raises(prebuilt.UnfinishedBuild, match=r"'ext_e.*still building .*eval\.import_timeout_s"):
            light_build.wrap(prebuilt.loading(_never, build_folder))("ext_e", "decl;", HEAVY)
    finally:
        build.release.set()


def test_a_compile_only_success_and_an_unloadable_library_leave_no_record(build_folder: Path) -> None:
    """Nothing the evaluating worker could import: no record, so its call is made there as before (never taken for a
    build still running)."""
    def compiled(*args, **kwargs):
        raise CompileOnlyDone()

    with pytest.raises(CompileOnlyDone):
        prebuilt.recording(compiled, build_folder)("ext_f", "decl;")
    prebuilt.recording(lambda *args, **kwargs: "/bin/ext_g", build_folder)("ext_g", "decl;", is_standalone=True)
    assert prebuilt.read_record(build_folder) == {}

# -- end to end: a real C++ build, then a sandboxed evaluating worker --------------------------------------------
PLANT = '''
# hostile: alter the build (this candidate's and any other's) that evaluating workers load
_outcomes = []
for _folder in pathlib.Path(_built.__file__).parents[2].iterdir():
    try:
        (_folder / "planted").write_text("altered")
        _outcomes.append("written")
    except OSError as _exc:
        _outcomes.append(_exc.strerror)
pathlib.Path("outcome").write_text(";".join(sorted(set(_outcomes))))
'''

CPP_CANDIDATE = r'''
import os, pathlib
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# three forms: a Python module, the same name again with other sources (torch names it kh_test_add_v1), and a
# torch.ops registration (load_inline gives the library's path)
_plain = load_inline("kh_test_add", cpp_sources="torch::Tensor f(torch::Tensor a, torch::Tensor b) { return a + b; }",
                     functions=["f"])
_ext = load_inline("kh_test_add", functions=["f"],
                   cpp_sources="torch::Tensor f(torch::Tensor a, torch::Tensor b) { return torch::relu(a + b); }")
load_inline("kh_test_ops", is_python_module=False, cpp_sources="""
#include <torch/library.h>
torch::Tensor g(torch::Tensor a, torch::Tensor b) { return torch::relu(a) + b; }
TORCH_LIBRARY(kh_test_ops, m) { m.def("g", g); }
""")

_built = _ext
''' + PLANT + r'''

class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = _ext.f(a, b)
        others_work = torch.equal(_plain.f(a, b), a + b) and \
            torch.equal(torch.ops.kh_test_ops.g(torch.zeros_like(a), b), b)  # relu(0) + b is b, exactly
        return out if others_work else torch.full_like(out, float("nan"))
'''


CUDA_CANDIDATE = r'''
import pathlib
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor f(torch::Tensor a, torch::Tensor b);"
CU = """
#include <torch/extension.h>
template <int N> __global__ void add_k(const float* a, const float* b, float* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = a[i] + b[i] * N; }
torch::Tensor f(torch::Tensor a, torch::Tensor b) {
  auto o = torch::empty_like(a); int n = a.numel();
  add_k<1><<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), o.data_ptr<float>(), n);
  return o; }
"""
# four forms: the light build of a heavy include; the same name with other sources (torch's _v1); a light build that
# fails (torch::nn needs the full headers), so the sources as written are loaded; a torch.ops registration
_light = load_inline("kh_cu_add", cpp_sources=CPP, cuda_sources=CU, functions=["f"])
_v1 = load_inline("kh_cu_add", cpp_sources=CPP, cuda_sources=CU.replace("add_k<1>", "add_k<2>"), functions=["f"])
_heavy = load_inline("kh_cu_heavy", cpp_sources=CPP, functions=["f"], cuda_sources=CU.replace(
    "auto o = torch::empty_like(a);", "auto o = torch::empty_like(a); (void)torch::nn::ReLU();"))
load_inline("kh_cu_ops", is_python_module=False, cpp_sources="", cuda_sources="""
#include <torch/library.h>
#include <torch/types.h>
__global__ void neg_k(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = -x[i]; }
torch::Tensor g(torch::Tensor a) { auto o = a.clone(); neg_k<<<1, 32>>>(o.data_ptr<float>(), o.numel()); return o; }
TORCH_LIBRARY(kh_cu_ops, m) { m.def("g", g); }
""")
pathlib.Path("loaded").write_text(" ".join(pathlib.Path(m.__file__).name for m in (_light, _v1, _heavy))
                                  + f" ops:{hasattr(torch.ops.kh_cu_ops, 'g')}")

_built = _light
''' + PLANT + r'''

class ModelNew(nn.Module):  # loaded, not run: a CUDA build of torch builds and imports these without a GPU
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b
'''


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(f.relative_to(folder)): (f.stat().st_size, f.stat().st_mtime_ns) for f in folder.rglob("*")}


def _in_worker_folder(worker: WorkerProcess, name: str) -> Path:
    """A file in the worker's own folder. That folder is a tmpfs of the worker's mount namespace (the host's folder
    of that path stays empty), so it is read through the worker process's root, /proc/PID/root (as root)."""
    pid = worker.proc.pid  # `unshare`; the worker is its deepest descendant
    while True:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if not children:
            break
        pid = int(children[0])
    return Path(f"/proc/{pid}/root") / str(worker.workdir).lstrip("/") / name


def _build_then_load(candidate: str, libraries: list[tuple[str, bool]],
                     check_loaded: Callable[[WorkerProcess], None]) -> None:
    """Build `candidate` with the real Builder (as on a GPU machine), check that its record names `libraries`, load
    it in a sandboxed evaluating worker, run `check_loaded`, and check that no build folder changed and that the
    worker compiled nothing."""
    if not sandbox_plan().filesystem:
        pytest.skip("no mount namespace on this machine: the filesystem is not isolated")
    builder = Builder(parallel=1, arch="9.0", gpu_available=True, timeout_s=1200, log_cap_bytes=1 << 16,
                      isolate_network=True, extra_env={}, versions={}, kept_bytes=0)
    worker = None
    try:
        build = builder.claim(candidate).result()  # held: kept_bytes=0 would remove a folder nobody holds
        assert build.ok, build.error
        folder = Path(build.extensions_dir)
        record = prebuilt.read_record(folder).values()
        assert sorted((Path(e["library"]).name, bool(e.get("ops"))) for e in record if "library" in e) == libraries
        before = _tree(builder.root)
        worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=1 << 16, isolate_network=True)
        hello, _ = worker.request(p.Hello(device="cpu"), timeout=120)
        assert hello.info["filesystem_isolated"] is True
        load, _ = worker.request(p.Load(problem_source=PROBLEM, candidate_source=candidate, weight_seed=1,
                                        extensions_dir=str(folder)), timeout=600)
        assert load.ok, load.error
        check_loaded(worker)
        assert _in_worker_folder(worker, "outcome").read_text() == "Read-only file system"
        assert _tree(builder.root) == before  # no lock file, no ninja log, nothing planted
        assert not _in_worker_folder(worker, "torch-extensions").exists()  # imported, not compiled again
    finally:
        if worker is not None:
            worker.close()
        builder.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("ninja")), reason="a C++ build needs g++ and ninja")
def test_the_evaluating_worker_loads_the_build_read_only_and_compiles_nothing() -> None:
    def runs_all_three_forms(worker: WorkerProcess) -> None:
        a, b = torch.randn(1, 4096), torch.randn(1, 4096)
        run, out = worker.request(p.Run(args=[{"t": 0}, {"t": 1}]), [a, b], timeout=120)
        assert run.ok, run.error
        assert torch.equal(out[0], torch.relu(a + b))

    _build_then_load(CPP_CANDIDATE, [("kh_test_add.so", False), ("kh_test_add_v1.so", False),
                                     ("kh_test_ops.so", True)], runs_all_three_forms)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not (torch.version.cuda and cpp_extension.CUDA_HOME and shutil.which("ninja")),
                    reason="needs a CUDA build of torch, nvcc (CUDA_HOME) and ninja; not a GPU")
def test_cuda_extensions_load_read_only_in_every_form() -> None:
    def imported_every_form(worker: WorkerProcess) -> None:
        assert _in_worker_folder(worker, "loaded").read_text() == \
            "kh_cu_add_kh_light.so kh_cu_add_kh_light_v1.so kh_cu_heavy.so ops:True"

    _build_then_load(CUDA_CANDIDATE, [("kh_cu_add_kh_light.so", False), ("kh_cu_add_kh_light_v1.so", False),
                                      ("kh_cu_heavy.so", False), ("kh_cu_ops.so", True)], imported_every_form)


NEVER_ENDING_LAZY_BUILD = r'''
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# a build that never ends: its source includes a FIFO nobody writes to. /tmp is each worker's own (a private tmpfs),
# so the path, and with it the call's fingerprint, is the same in the build worker and in the evaluating worker
HANG = "/tmp/kh_never_written.h"
if not os.path.exists(HANG):
    os.mkfifo(HANG)
SOURCE = '#include "' + HANG + '"\ntorch::Tensor f(torch::Tensor a, torch::Tensor b) { return a + b; }'


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = None

    def spare(self):  # never called; its build, made ahead, fails at once (g++ refuses the flag)
        return load_inline(name="kh_bad_flag", cpp_sources="int x;", extra_cflags=["--kh-no-such-flag"])

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.ext is None:  # built in the first call, so the build worker makes it ahead
            self.ext = load_inline(name="kh_never_built", cpp_sources=SOURCE, functions=["f"])
        return self.ext.f(a, b)
'''


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("ninja")), reason="a C++ build needs g++ and ninja")
def test_a_build_in_forward_that_outlasts_the_build_limit_fails_its_first_call_at_once_naming_the_limit() -> None:
    """End to end, real compiler and sandboxes: a build made in forward that the build's limit cuts off is not begun
    again inside the first trial's call limit (which ended CUDA-L1's L1/10 as "no answer to 'run' within 60 s"): the
    build's note and the call's error both name the limit, and the call fails at once. A build made in forward
    that failed is in the note as well."""
    if not sandbox_plan().filesystem:
        pytest.skip("no mount namespace on this machine: /tmp is not each worker's own")
    limit = 60.0
    builder = Builder(parallel=1, arch="9.0", gpu_available=True, timeout_s=limit, log_cap_bytes=1 << 16,
                      isolate_network=True, extra_env={}, versions={}, kept_bytes=0)
    worker = None
    try:
        build = builder.claim(NEVER_ENDING_LAZY_BUILD).result()
        assert build.ok, build.error  # the import itself builds nothing
        assert "load_inline('kh_never_built'), made in forward" in build.note
        assert f"limit of {limit:.0f} s ran out (eval.import_timeout_s)" in build.note
        assert "a load_inline build made in forward, built ahead, failed" in build.note
        assert "'kh_bad_flag'" in build.note
        worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=1 << 16, isolate_network=True)
        load, _ = worker.request(p.Load(problem_source=PROBLEM, candidate_source=NEVER_ENDING_LAZY_BUILD,
                                        weight_seed=1, extensions_dir=build.extensions_dir), timeout=600)
        assert load.ok, load.error
        a, b = torch.randn(1, 4096), torch.randn(1, 4096)
        run, _ = worker.request(p.Run(args=[{"t": 0}, {"t": 1}]), [a, b], timeout=120)  # building would hang here
        assert not run.ok and "'kh_never_built') was still building" in run.error
        assert "eval.import_timeout_s" in run.error
    finally:
        if worker is not None:
            worker.close()
        builder.close()
