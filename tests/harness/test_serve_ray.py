"""`harness serve executor=ray`: the served evaluations run on Ray evaluator actors (a local Ray instance here),
with the same verdicts as the local pool."""

from __future__ import annotations

import pytest

from harness.client import EvalClient
from harness.corpus.hostile import GOOD, HOSTILE, PROBLEM
from tests.serve_fixtures import Server, cpu_overrides, reply

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def test_served_through_ray_actors(tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.fail('the ray extra is not installed: pip install -e ".[cpu,test,ray,rl]" (the README test command)')
    args = [*cpu_overrides(tmp_path, workers=1, cache=False), "executor=ray", "executor.num_actors=1", "--name", "ray"]
    with Server(args) as server:
        client = EvalClient(server.url)
        health = client.health()
        assert health["presets"]["default"]["device"].startswith("ray: cpu")
        custom = {"source": PROBLEM, "name": "add_relu"}
        good, wrong = client.evaluate_batch([{"problem": custom, "code": reply(GOOD)},
                                             {"problem": custom, "code": HOSTILE["wrong_values"][0]}])
        assert good["status"] == "correct" and wrong["status"] == "incorrect"
        assert good["result"]["node"]  # stamped by the actor that evaluated it
        assert server.metrics()["harness_serve_evaluations_total"] == 2
