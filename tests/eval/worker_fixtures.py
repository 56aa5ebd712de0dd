"""A sandboxed CPU worker with a subject loaded and a timing input set staged: the tests of what the parent does to a
worker around timing blocks (stopping it, probing the GPU) drive real workers through it."""

from __future__ import annotations

import torch

from eval.crossing import protocol as p
from eval._reference import Reference, encode_args
from eval.process.sandbox import WorkerProcess
from harness.corpus.hostile import PROBLEM
from problems.problem import problem_from_source


def staged_worker(subject: str, candidate: str | None) -> WorkerProcess:
    """A sandboxed CPU worker with `subject` loaded (the candidate, or the reference without one) and its timing
    input set staged."""
    worker = WorkerProcess(device="cpu", gpu_index=None, log_cap_bytes=1 << 16, isolate_network=True)
    try:
        hello, _ = worker.request(p.Hello(device="cpu", capture_key=1), timeout=600)
        assert hello.ok, hello.error
        load, _ = worker.request(p.Load(subject=subject, problem_source=PROBLEM, problem_label="<add_relu>",
                                        candidate_source=candidate, weight_seed=1), timeout=600)
        assert load.ok, load.error
        problem = problem_from_source(PROBLEM, name="add_relu")
        spec, tensors = encode_args(Reference(problem, 1, torch.device("cpu")).inputs(2))
        staged, _ = worker.request(p.Stage(subject=subject, args=spec, n_inputs=len(tensors), sets=1), tensors,
                                   timeout=600)
        assert staged.ok, staged.error
    except BaseException:
        worker.kill()
        raise
    return worker
