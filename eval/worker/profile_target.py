"""`python -m eval.worker.profile_target FD...`: one short run of a subject for Nsight Compute (`eval.profiling`).

It runs in the sandbox a worker runs in, started by `ncu --profile-from-start off` (the descriptors it is handed are
the worker's, unused here). Its request is in `KH_PROFILE_REQUEST` (JSON, `eval.crossing.protocol.PROFILE_REQUEST_ENV`):
a `Load` for the worker's own loader (the candidate's ModelNew, or the problem's reference in a process that holds no
candidate code), an input seed and the
warm-up calls. It calls forward to compile and warm up, then once between cudaProfilerStart and cudaProfilerStop,
which is all ncu profiles. It reports nothing: the parent reads ncu's output, a diagnostic that no verdict reads.
"""

from __future__ import annotations

import json
import os
import sys

from eval.crossing.protocol import PROFILE_REQUEST_ENV


def _drop_privileges() -> None:
    """As `python -m eval.worker` does: started as root with KH_DROP_UID set (no mount namespace), become that user."""
    uid = os.environ.pop("KH_DROP_UID", None)
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(int(uid))
    os.setuid(int(uid))


def main() -> int:
    """Load, warm up, run one profiled forward; the exit code says how far it got (0: profiled)."""
    request = json.loads(os.environ.pop(PROFILE_REQUEST_ENV))
    import torch

    from eval.crossing import protocol as p
    from eval.worker.serve import Worker
    from problems import draw_inputs

    gpu = torch.cuda.is_available()  # on a CPU (the tests' fake ncu), the Triton interpreter and no profiler range
    device = torch.device("cuda:0" if gpu else "cpu")
    if gpu:
        torch.cuda.set_device(device)
    worker = Worker(channel=None)  # type: ignore[arg-type]  # commands called directly: no channel
    worker.device = device
    load = p.Load(**request["load"])
    reply, _ = worker.cmd_load(load, [])
    if not reply.ok:
        print(f"kh-profile: loading failed ({reply.stage}): {reply.error[-1500:]}", file=sys.stderr, flush=True)
        return 3
    subject = worker.subjects[load.subject]
    inputs = draw_inputs(subject.problem, int(request["input_seed"]), device, None, bool(request.get("on_cpu")))
    with torch.no_grad():
        for _ in range(int(request["warmup_calls"])):  # JIT compiles and autotuning happen here, unprofiled
            subject.model(*inputs)
        if gpu:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        subject.model(*inputs)
        if gpu:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    print("kh-profile: profiled", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    _drop_privileges()
    sys.exit(main())  # a normal exit: ncu's injection may still hand its last results over at exit
