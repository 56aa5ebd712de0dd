"""On a GPU (`pytest -m gpu`): every worker runs on its parent's GPU, also when the parent sees the machine's
GPUs through CUDA_VISIBLE_DEVICES (a Ray actor for GPU 1 sees it as its GPU 0; a worker given "0" ran on
the machine's GPU 0, beside another actor's timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from eval import EvalConfig, Evaluator
from tests.paths import REPO as ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

_PROBE = """
import json, torch
from eval import EvalConfig, Evaluator
from harness.corpus import candidates
with Evaluator(EvalConfig(device="cuda", gpus=[0], workers_per_gpu=1, cache_dir=None)) as ev:
    assert ev.wait_warm(300)
    result = ev.evaluate(candidates.problem(1 << 16), candidates.triton_candidate())
    uuids = [w.info.get("device_uuid") for w in list(ev._pool._live)]
print(json.dumps({"parent": str(torch.cuda.get_device_properties(0).uuid), "workers": uuids,
                  "status": result.status.value}))
"""


def _physical_uuids() -> list[str]:
    return [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]


def test_workers_report_their_parents_gpu():
    with Evaluator(EvalConfig(device="cuda", workers_per_gpu=1, cache_dir=None)) as ev:
        assert ev.wait_warm(300)
        workers = list(ev._pool._live)
        assert workers
        for worker in workers:
            assert worker.info["device_uuid"] == str(torch.cuda.get_device_properties(worker.gpu_index).uuid)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_parent_that_sees_only_the_last_gpu_puts_its_workers_there():
    last = torch.cuda.device_count() - 1
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(last), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    physical = _physical_uuids()
    assert probe["parent"] == physical[last]
    assert probe["workers"] and all(u == physical[last] for u in probe["workers"])
    assert probe["status"] == "correct"
