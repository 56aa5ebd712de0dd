"""Own kernels are what the candidate's own code built and launched, never what its text names (CPU).

- CUDA kernels come from the host stubs in the build's files (`eval._kernel_symbols`): every name form,
  and not a `__global__ NAME(` that sits in a string.
- A never-launched kernel built under a library kernel's name (cuBLAS's `gemv2T_kernel_val`, which
  `torch.mv` launches) does not make the library's launches the candidate's: the reference launches it.
- Kernels the evaluating worker built at run time (`load_inline` in `__init__`) are read by the parent from the
  worker's own folder, a tmpfs of the worker's mount namespace; a link planted there to a host file is not followed.
- Forged Triton launch records, through the launch entry's closure or through the worker on the stack,
  are rejected naming the forgery (the Triton interpreter; GPU counterparts in tests/eval/test_gpu_kernel_names).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from eval import EvalConfig, Status
from eval.steps import context
from eval.steps import kernel_evidence
from eval.crossing import protocol as p
from eval.builds import Build
from eval._kernel_symbols import built_kernels, kernels_under, pin_folder, stub_kernel, stub_symbols
from eval.result import EvalResult
from eval.process.sandbox import WorkerProcess, sandbox_plan
from eval.static_checks import analyze
from harness.corpus.hostile import FORWARD, GOOD, PROBLEM, variant
from tests.eval.cuda_builds import BUILT

EVALUATOR = {"device": "cpu", "import_timeout_s": 60, "call_timeout_s": 30}
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="builds a shared library with g++")


# -- symbols of what was built ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("symbol, kernel", [
    ("_Z22__device_stub__Z3k_cPfPf", "_Z3k_cPf"),  # extern "C" k_c: the stub is named after the C++ mangling
    ("_ZL32__device_stub__Z6k_tmplILi1EEvPfPf", "_Z6k_tmplILi1EEvPf"),  # a template's stub has internal linkage
    ("_Z34__device_stub__ZN2kh5inner4k_nsEPfPf", "_ZN2kh5inner4k_nsEPf"),
    ("_Z65__device_stub__ZN36_GLOBAL__N__04ec7484_4_k_cu_eb7c69e86k_anonEPfPf",
     "_ZN36_GLOBAL__N__04ec7484_4_k_cu_eb7c69e86k_anonEPf"),
    ("_ZZL32__device_stub__Z6k_tmplILi1EEvPfPfE8__handle", "_Z6k_tmplILi1EEvPf"),  # inlined at -O3: its statics
    ("_ZGVZL32__device_stub__Z6k_tmplILi1EEvPfPfE5__tmp", "_Z6k_tmplILi1EEvPf"),
    ("_Z22__device_stub__Z3k_cPfPf.cold", "_Z3k_cPf"),
    ("_Z7host_fnPf", None), ("k_c", None), ("_Z29__wrapper__device_stub_k_tmplILi1EEvRPf", None),
])
def test_a_kernels_host_stub_names_the_kernel(symbol, kernel):
    assert stub_kernel(symbol) == kernel


def test_files_that_are_not_well_formed_elf_have_no_symbols():
    header = b"\x7fELF\x02\x01" + bytes(0x3A - 6) + struct.pack("<HH", 64, 1000)  # 1000 sections past the end
    for data in (b"not an ELF file", header, b"\x7fELF\x01\x01" + bytes(60), b""):
        assert stub_symbols(data) == []


def _planted_elf(names: list[bytes]) -> bytes:
    """A minimal ELF64 file whose symbol table's strings are `names` (no code: only what the reader looks at)."""
    strings = b"\0" + b"\0".join(names) + b"\0"
    shoff = 64 + len(strings)
    header = b"\x7fELF\x02\x01" + bytes(0x28 - 6) + struct.pack("<Q", shoff) + bytes(0x3A - 0x30) + \
        struct.pack("<HH", 64, 3)
    null = bytes(64)
    strtab = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 64, len(strings), 0, 0, 1, 0)
    symtab = struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, 64, 24, 1, 0, 8, 24)
    return header.ljust(64, b"\0") + strings + null + strtab + symtab


def test_a_file_of_a_million_planted_stubs_is_read_within_the_caps(tmp_path):
    """A million stub names in one planted file once cost the parent 20 s of CPU and a 14 MB result: the names taken
    and the kernels kept are capped (the read stops there, which only loses the candidate its own evidence)."""
    from eval._kernel_symbols import _MAX_SYMBOLS, MAX_KERNELS

    def stub(i: int) -> bytes:  # nvcc's host stub of `__global__ void k<i>(float*)`
        identifier = f"__device_stub__Z{len(f'k{i}')}k{i}Pf"
        return f"_Z{len(identifier)}{identifier}Pf".encode()

    names = [stub(i) for i in range(1_000_000)]
    assert stub_kernel(names[7].decode()) == "_Z2k7Pf"  # each is a well-formed stub
    data = _planted_elf(names)
    assert len(stub_symbols(data)) == _MAX_SYMBOLS
    (tmp_path / "planted.so").write_bytes(data)
    kernels = built_kernels(tmp_path)
    assert len(kernels) == MAX_KERNELS and all(k.startswith("_Z") for k in kernels)
    assert stub_symbols(_planted_elf(names[:3])) == [n.decode() for n in names[:3]]  # a small file: all of them


def _stub_library(path: Path, kernel: str) -> Path:
    """A shared library holding the host stub nvcc writes for `__global__ void <kernel>(float*)` (plain C++)."""
    source = path.with_suffix(".cpp")
    source.write_text(f"void __device_stub__Z{len(kernel)}{kernel}Pf(float* x) {{ x[0] = 1.f; }}\n")
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(path), str(source)], check=True)
    return path


@needs_gxx
def test_only_regular_files_inside_the_folder_are_read(tmp_path):
    """Links (to a file or a folder outside), a FIFO and a planted non-ELF `.so` give nothing; a nested library does."""
    outside, folder = tmp_path / "outside", tmp_path / "built"
    (folder / "deep" / "er").mkdir(parents=True)
    outside.mkdir()
    host = _stub_library(outside / "host.so", "host_only")
    assert set(stub_symbols(host.read_bytes())) == {"_Z28__device_stub__Z9host_onlyPfPf"}  # the trap is real
    _stub_library(folder / "deep" / "er" / "own.so", "own_k")
    (folder / "link.so").symlink_to(host)
    (folder / "linked_folder").symlink_to(outside)
    os.mkfifo(folder / "fifo.so")  # opened without blocking, then skipped: not a regular file
    (folder / "text.so").write_text("not an ELF file")
    assert built_kernels(folder) == ["_Z5own_kPf"]
    assert built_kernels(tmp_path / "missing") == [] and built_kernels(folder / "link.so") == []


@needs_gxx
def test_a_folder_is_pinned_through_a_process_root_without_following_links(tmp_path):
    _stub_library(tmp_path / "own.so", "own_k")
    (tmp_path / "to_folder").symlink_to(tmp_path)
    fd = pin_folder(os.getpid(), str(tmp_path))
    assert fd is not None
    try:
        assert kernels_under(fd) == ["_Z5own_kPf"]
    finally:
        os.close(fd)
    assert pin_folder(os.getpid(), str(tmp_path / "to_folder")) is None  # a link on the way is not followed
    assert pin_folder(os.getpid(), str(tmp_path / "own.so")) is None and pin_folder(1 << 30, "/") is None


# how the profiler names these kernels (the forms recorded on the H100 in test_eval_units)
PROFILED = {"k_tmpl": "void k_tmpl<1>(float*)", "k_ns": "kh::inner::k_ns(float*)",
            "k_anon": "(anonymous namespace)::k_anon(float*)", "k_c": "k_c", "k_lk": "_Z4k_lkPf"}
CUBLAS_GEMV = ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
               "cublasGemvParamsEx<int, float const*, float const*, float*, float const>>(cublasGemvParamsEx<int, "
               "float const*, float const*, float*, float const>, float, float)")


@pytest.fixture(scope="module")
def forms_build(build_evaluator) -> Build:
    """A real compile-only build (nvcc, no GPU) of every name form, a library-named decoy and a name in a string
    (`tests.eval.cuda_builds.BUILT`, which the compile-only tests build too: joined when they have built it)."""
    if shutil.which("nvcc") is None:
        pytest.skip("the build runs only with nvcc")
    assert "text_only_kernel" in analyze(BUILT).cuda_kernels  # the text names it; the build does not
    return build_evaluator._builder.submit(BUILT).result()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_kernels_are_read_from_what_the_build_produced(forms_build):
    names = {kernel_evidence.kernel_base_name(k) for k in forms_build.kernels}
    assert forms_build.ok, forms_build.error
    assert set(PROFILED) | {"gemv2T_kernel_val"} <= names, names
    assert "text_only_kernel" not in names


class _Ctx:
    """What `kernel_evidence.own_kernels` touches: the worker's and the reference process's Kernels replies."""

    def __init__(self, source: str, build: Build | None, profile: list, reference_profile: list,
                 triton_own: list[str] | None = None, own_folders: list[int] | None = None):
        self.report = analyze(source)
        self.build = build
        self.config = EvalConfig(device="cpu")
        self.result = EvalResult()
        self.lease = SimpleNamespace(worker=SimpleNamespace(own_folders=own_folders or []))  # what it built at run time
        self.session = type("Session", (), {"label": "ref7"})()
        self.replies = {None: p.KernelsReply(triton_own=triton_own or [], profile=profile),
                        self.session: p.KernelsReply(profile=reference_profile)}
        self.sent: list = []

    def request(self, message, tensors=None, timeout=None, worker=None):
        self.sent.append((worker, message))
        return self.replies[worker], []


_LIBRARY_ONLY = '''
import torch
cuda_src = "__global__ void gemv2T_kernel_val(float* y) {}"


class ModelNew(torch.nn.Module):
    def forward(self, a, x):
        return torch.mv(a, x)
'''


def test_a_library_kernel_name_in_the_text_only_is_not_own():
    """The case found: `torch.mv` did the work, cuBLAS's kernel name sat in a string, the share read 100 %."""
    ctx = _Ctx(_LIBRARY_ONLY, None, [(CUBLAS_GEMV, 1.0)], [(CUBLAS_GEMV, 1.0)])
    with pytest.raises(context.Verdict) as verdict:
        kernel_evidence.own_kernels(ctx)
    assert verdict.value.status is Status.REJECTED
    assert "kernels named only in the source text do not count" in verdict.value.reason, verdict.value.reason
    assert ctx.result.kernels.own_kernels_launched == [] and ctx.result.kernels.own_time_fraction == 0.0


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_a_built_kernel_under_a_library_name_does_not_make_the_librarys_launches_own(forms_build):
    ctx = _Ctx(_LIBRARY_ONLY, forms_build, [(CUBLAS_GEMV, 1.0)], [(CUBLAS_GEMV, 1.0)])
    with pytest.raises(context.Verdict) as verdict:
        kernel_evidence.own_kernels(ctx)
    reason = verdict.value.reason
    assert verdict.value.status is Status.REJECTED and "none of the candidate's own kernels ran" in reason, reason
    assert "named like a library's, gemv2T_kernel_val" in reason, reason
    assert ctx.sent[1] == (ctx.session, p.Kernels(subject="ref7"))  # the reference's own kernels were asked for
    assert ctx.result.kernels.own_time_fraction == 0.0


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("form", sorted(PROFILED))
def test_a_built_kernel_of_each_form_is_own_beside_the_librarys(forms_build, form):
    profile = [(PROFILED[form], 3.0), (CUBLAS_GEMV, 1.0)]
    ctx = _Ctx(_LIBRARY_ONLY, forms_build, profile, [(CUBLAS_GEMV, 1.0)])
    kernel_evidence.own_kernels(ctx)
    assert ctx.result.kernels.own_kernels_launched == [form]
    assert ctx.result.kernels.own_time_fraction == pytest.approx(0.75)


@needs_gxx
def test_a_kernel_built_at_run_time_counts_as_own_and_one_never_launched_does_not(tmp_path):
    """No build at all (`load_inline` in `__init__`): the kernels come from the worker's own folder alone."""
    _stub_library(tmp_path / "k_body.so", "k_body")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ctx = _Ctx(_LIBRARY_ONLY, None, [("k_body(float*)", 3.0), (CUBLAS_GEMV, 1.0)], [(CUBLAS_GEMV, 1.0)],
                   own_folders=[fd])
        kernel_evidence.own_kernels(ctx)
        assert ctx.result.kernels.own_kernels_launched == ["k_body"]
        assert ctx.result.kernels.own_kernels_defined == ["k_body"]
        assert ctx.result.kernels.own_time_fraction == pytest.approx(0.75)
        decoy = _Ctx(_LIBRARY_ONLY, None, [(CUBLAS_GEMV, 1.0)], [(CUBLAS_GEMV, 1.0)], own_folders=[fd])
        with pytest.raises(context.Verdict) as verdict:
            kernel_evidence.own_kernels(decoy)
        assert "none of the candidate's own kernels ran during forward (defined: k_body)" in verdict.value.reason
    finally:
        os.close(fd)


# -- what the evaluating worker built at run time ----------------------------------------------------------------------
# `load_inline` in `__init__`: the build worker only imports the candidate, so this extension is built in the
# evaluating worker, into its private /tmp (a `build_directory` there, as many of CUDA-L1's kernels give). Its C++ defines what nvcc writes for `__global__ void k_body(float*)`: the
# host stub (a CPU has no CUDA build to run). It also plants links to host files, which the worker's view does not
# show but which a parent following them through /proc/PID/root would read (they resolve in the parent's root).
RUN_TIME = '''
import os, pathlib
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = """
void __device_stub__Z6k_bodyPf(float* x) { x[0] = 1.f; }
torch::Tensor f(torch::Tensor a, torch::Tensor b) { return torch::relu(a + b); }
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        os.makedirs("/tmp/kh_build")  # where CUDA-L1's kernels build: the worker's private /tmp
        self.ext = load_inline("kh_run_time", cpp_sources=CPP, functions=["f"], build_directory="/tmp/kh_build")
        folder = pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "planted.so").symlink_to(HOST_FILE)
        (folder / "planted_folder").symlink_to(HOST_FOLDER)
        pathlib.Path("/tmp/kh_build/replaced.so").symlink_to(HOST_FILE)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.ext.f(a, b)
'''


@pytest.mark.slow
@pytest.mark.timeout(1800)
@needs_gxx
@pytest.mark.skipif(shutil.which("ninja") is None, reason="load_inline builds with ninja")
def test_kernels_built_at_run_time_are_read_from_the_workers_folder_and_planted_links_are_not_followed(tmp_path):
    if not sandbox_plan().filesystem:
        pytest.skip("no mount namespace on this machine: the worker's folder is the host's")
    host_folder = tmp_path / "host"
    host_folder.mkdir()
    host_file = _stub_library(host_folder / "host.so", "host_only")
    source = f"HOST_FILE, HOST_FOLDER = {str(host_file)!r}, {str(host_folder)!r}\n" + RUN_TIME
    worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=1 << 16, isolate_network=True)
    try:
        hello, _ = worker.request(p.Hello(device="cpu"), timeout=300)
        assert hello.ok and hello.info["filesystem_isolated"] is True, hello.error
        worker.pin_own_folders()
        own, tmp, shm = worker.own_folders  # its own folder, its private /tmp and /dev/shm
        assert [kernels_under(fd) for fd in (own, tmp, shm)] == [[], [], []]
        load, _ = worker.request(p.Load(problem_source=PROBLEM, candidate_source=source, weight_seed=1),
                                 timeout=1500)
        assert load.ok, load.error
        a, b = torch.randn(1, 4096), torch.randn(1, 4096)
        run, out = worker.request(p.Run(args=[{"t": 0}, {"t": 1}]), [a, b], timeout=120)
        assert run.ok and torch.equal(out[0], torch.relu(a + b)), run.error
        assert not any(Path(worker.workdir).iterdir())  # the host's folder of that path shows none of it
        # the trap: through the worker's root, the planted link leads to the host's file
        planted = Path(f"/proc/{worker.proc.pid}/root{os.path.realpath(worker.workdir)}/torch-extensions/planted.so")
        assert "_Z28__device_stub__Z9host_onlyPfPf" in stub_symbols(planted.read_bytes())
        assert [kernels_under(fd) for fd in (own, tmp, shm)] == [[], ["_Z6k_bodyPf"], []]
        assert not Path("/tmp/kh_build").exists()  # the host's /tmp shows none of it
    finally:
        worker.close()
    assert worker.own_folders == []  # closed with the worker: a handle would keep its tmpfs alive


# -- forged Triton launch records (the interpreter) ------------------------------------------------------------------
# Each forgery adds a launch of the decoy kernel to whatever the tracer keeps (a counter or a list), so it passed
# against the tracer before it was sealed. The names are spelled so that the source check cannot see them.
_FORGE = '''

def _forge(store, name="add_relu_kernel"):
    from collections import Counter
    if isinstance(store, Counter):
        store[("kh_candidate", name)] += 1
    elif isinstance(store, list):
        store.append(("kh_candidate", name))


def _through_the_closure():
    from triton.runtime.interpreter import InterpretedFunction
    for cell in getattr(InterpretedFunction.run, "__clo" + "sure__") or ():
        state = getattr(cell, "cell_con" + "tents")
        for store in (state, getattr(state, "launches", None)):
            _forge(store)


def _through_the_stack():
    import sys
    frame = getattr(sys, "_get" + "frame")(0)
    while frame is not None:
        tracer = getattr(getattr(frame, "f_lo" + "cals").get("self"), "tracer", None)
        for store in (getattr(tracer, "launches", None), getattr(tracer, "_log", None)):
            _forge(store)
        frame = getattr(frame, "f_ba" + "ck")


class ModelNew'''
_DECOY_FORWARD = "        {forge}()\n        return torch.relu(a + b)\n"  # the kernel is defined, never launched


def _forger(forge: str) -> str:
    return variant(FORWARD, _DECOY_FORWARD.format(forge=forge), base=GOOD.replace("\nclass ModelNew", _FORGE, 1))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("forge", ["_through_the_closure", "_through_the_stack"])
def test_a_forged_triton_launch_record_is_rejected_naming_the_forgery(evaluator, problem, forge):
    result = evaluator.evaluate(problem, _forger(forge))
    assert result.status is Status.REJECTED, f"{result.status}: {result.reason} {result.error[-1500:]}"
    assert result.reason.startswith("integrity: forged the record of Triton launches: launch records were added or "
                                    "changed outside Triton's launch entry"), result.reason


@pytest.mark.parametrize("spelled, why", [
    ("InterpretedFunction.run.__closure__[1].cell_contents", "reads the state inside another function's closure"),
    ("sys.exc_info()[2].tb_frame", "inspects the caller's stack frames"),
])
def test_the_forgeries_spelled_plainly_are_refused_from_the_source(spelled, why):
    report = analyze(GOOD + f"\n\ndef _never_called():\n    return {spelled}\n")
    assert report.status is Status.REJECTED and why in report.reason, report.reason


def test_the_tracer_rejects_records_it_did_not_make(monkeypatch):
    """The seal alone, in this process: a record appended, or a tracer that never installed an entry, is refused."""
    from eval.worker import tracing

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from triton.runtime.interpreter import InterpretedFunction

    original = InterpretedFunction.run
    tracer = tracing.TritonLaunchTracer()
    tracer.install()
    try:
        assert tracer.own_launches("kh_candidate") == []
        tracer._log.append(("kh_candidate", "k"))
        with pytest.raises(tracing.TracerTampered, match="added or changed outside Triton's launch entry"):
            tracer.own_launches("kh_candidate")
    finally:
        InterpretedFunction.run = original
    stray = tracing.TritonLaunchTracer()
    stray._log.append(("kh_candidate", "k"))
    with pytest.raises(tracing.TracerTampered, match="never installed"):
        stray.own_launches("kh_candidate")
