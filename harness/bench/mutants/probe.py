"""The values a solution's shape reads take at the published sizes, for `hardcoded-size` (`rules.probe_source`).

Run as `python -m harness.bench.mutants.probe FILE` (FILE: `{"problem": source, "candidate": source}`), in a
process of its own with the Triton interpreter on: the model and inputs are built on PyTorch's `meta` device at the
published sizes and every kernel launch is a no-op, so no memory is touched and no GPU is needed. It prints
`{"__r": {"line:col": value, ...}}`. Our own solutions only: the probe imports the candidate.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from typing import Any

from harness.bench.mutants.rules import PROBE, probe_source


def probe(problem_source: str, candidate_source: str) -> dict[str, Any]:
    import torch
    from triton.runtime.interpreter import InterpretedFunction

    from problems import load_source

    seen: dict[str, Any] = {}

    def record(site: str, value: Any) -> Any:
        if site not in seen:
            seen[site] = list(value) if isinstance(value, torch.Size) else value
        return value

    InterpretedFunction.run = lambda self, *a, **k: None  # type: ignore[method-assign]
    module = load_source(problem_source, "<probe problem>")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "probed.py")
        with open(path, "w") as fh:
            fh.write(probe_source(candidate_source))
        spec = importlib.util.spec_from_file_location("_kh_probed", path)
        assert spec is not None and spec.loader is not None
        candidate = importlib.util.module_from_spec(spec)
        setattr(candidate, PROBE, record)
        spec.loader.exec_module(candidate)
        with torch.device("meta"), torch.no_grad():
            model = candidate.ModelNew(*module.get_init_inputs())
            model(*module.get_inputs())
    return {k: v for k, v in seen.items() if isinstance(v, int) or isinstance(v, list)}


def published_values(problem_source: str, candidate_source: str, timeout: float = 120) -> dict[str, Any]:
    """`probe` in a child process with the interpreter on; {} when the probe fails (no `hardcoded-size` mutants)."""
    import subprocess

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"problem": problem_source, "candidate": candidate_source}, fh)
    try:
        proc = subprocess.run([sys.executable, "-m", __name__, fh.name], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "TRITON_INTERPRET": "1"})
    except subprocess.TimeoutExpired:
        return {}
    finally:
        os.unlink(fh.name)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"__r"')]
    return json.loads(lines[-1])["__r"] if lines else {}


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        job = json.load(fh)
    print(json.dumps({"__r": probe(job["problem"], job["candidate"])}))
