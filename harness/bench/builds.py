"""`harness bench eval --part build`: how long one `load_inline` candidate takes to build, one build at a time.

Three ways, each `repeats` times on distinct sources (so nothing is reused), side by side in one run:
the candidate's `load_inline` call as written, in a fresh process with a fresh extensions folder (the
build before the light `.cu`); the same call with `cuda_sources` lightened as `eval.worker.light_build`
does; and the evaluator's own build path (`eval.builds.Builder`: a sandboxed build worker, light first).
Each row gives the median wall time. The candidate is the throughput batch's honest CUDA candidate.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

from eval import Builder, lightened
from harness.corpus import candidates

_DIRECT = '''
import sys
from torch.utils.cpp_extension import load_inline
cpp, cu, name = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
load_inline(name=name, cpp_sources=cpp, cuda_sources=cu, functions=["add_relu_scale"], extra_cuda_cflags=["-O3"])
'''


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability(0)
    return f"{major}.{minor}"


def _direct(tag: str, light: bool) -> float:
    """Seconds for one load_inline build of the bench candidate's sources in a fresh process and folder."""
    source = candidates.cuda_candidate(tag)
    cuda = source.split('cuda_src = r"""', 1)[1].split('"""', 1)[0]
    cpp = source.split('cpp_src = "', 1)[1].split('"\n', 1)[0]
    if light:
        cuda = (lightened(cuda) or [cuda])[0]
    with tempfile.TemporaryDirectory() as folder:
        paths = [os.path.join(folder, n) for n in ("c.cpp", "k.cu", "build.py")]
        for path, text in zip(paths, (cpp, cuda, _DIRECT)):
            with open(path, "w") as f:
                f.write(text)
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=os.path.join(folder, "ext"), TORCH_CUDA_ARCH_LIST=_arch(),
                   MAX_JOBS="2")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, paths[2], paths[0], paths[1], f"bb_{tag}"], env=env,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"the {'light' if light else 'plain'} build failed:\n{done.stderr[-2000:]}")
    return seconds


def _through_builder(tag: str) -> float:
    builder = Builder(parallel=1, arch=_arch(), gpu_available=True, timeout_s=600, log_cap_bytes=1 << 20,
                      isolate_network=True, extra_env={}, versions={"bench": tag}, kept_bytes=0)
    try:
        build = builder.submit(candidates.cuda_candidate(tag)).result()
    finally:
        builder.close()
    if not build.ok:
        raise RuntimeError(f"the evaluator's build failed:\n{build.error[-2000:]}")
    return build.seconds


def run(repeats: int = 3) -> dict[str, Any]:
    """Median build seconds per way, builds one at a time, interleaved so drift hits every way alike."""
    ways: dict[str, list[float]] = {"as written (load_inline)": [], "light .cu (load_inline)": [],
                                    "evaluator's build (sandboxed, light first)": []}
    for k in range(repeats):
        for name, build in (("as written (load_inline)", lambda: _direct(f"plain{k}", light=False)),
                            ("light .cu (load_inline)", lambda: _direct(f"light{k}", light=True)),
                            ("evaluator's build (sandboxed, light first)", lambda: _through_builder(f"ev{k}"))):
            ways[name].append(build())
            print(f"build {k + 1}/{repeats}, {name}: {ways[name][-1]:.1f} s", flush=True)
    rows = {name: {"median_s": round(statistics.median(times), 1), "seconds": [round(t, 1) for t in times]}
            for name, times in ways.items()}
    plain = rows["as written (load_inline)"]["median_s"]
    for row in rows.values():
        row["vs_as_written"] = round(row["median_s"] / plain, 2)
    return {"repeats": repeats, "cpu_cores": os.cpu_count(), "ways": rows}


def print_table(report: dict[str, Any]) -> None:
    print(f"\nbuild: the bench's CUDA candidate, one build at a time, median of {report['repeats']} "
          f"({report['cpu_cores']} CPU cores)")
    for name, row in report["ways"].items():
        print(f"  {name:46s} {row['median_s']:7.1f} s  ({row['vs_as_written']:.2f}x)  {row['seconds']}")
