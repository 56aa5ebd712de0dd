"""Static checks: a real rebinding of a comparison or timing function is refused from the source,
while local names that merely share a protected name never are.

The static check is a first line only; disguised rebinding is caught at run time by the identity
snapshot (see the `*_dynamic` cases in harness/corpus/hostile.py, evaluated end to end).
"""

from __future__ import annotations

import pytest

from eval.result import Status
from eval.static_checks import analyze
from harness.corpus.hostile import GOOD, SELF_TIMING, TOP, variant

HONEST = {
    "self_timing": SELF_TIMING,  # from harness.corpus.hostile: also run end to end there
    "local_names": variant(TOP, '''def helper(x):
    allclose = torch.allclose(x, x)
    equal, isclose = torch.equal(x, x), torch.isclose(x, x)
    time = 0.0
    synchronize = None
    Event = dict
    elapsed_time: float = 1.0
    elapsed_time += 2.0
    return allclose, equal, isclose, time, synchronize, Event, elapsed_time


''' + TOP),
    "instance_attributes": variant("        super().__init__()\n", '''        super().__init__()
        self.time = 0.0
        self.elapsed_time = None
        self.allclose = True
        self.stream = None
        self.events = {}
        self.events["elapsed_time"] = 0.0
'''),
    "setting_switches": variant(TOP, '''torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = False
setattr(torch.backends.cudnn, "deterministic", False)
import triton.language as tl2
cfg = {}
cfg["allclose"] = 1
''' + TOP),
    "comparison_call_not_assignment": variant(TOP, "assert torch.allclose(torch.ones(2), torch.ones(2))\n" + TOP),
    "equality_test": variant(TOP, "flag = time_check = (torch.equal == torch.equal)\n" + TOP),
}

HOSTILE = {
    "module_attribute": "torch.allclose = lambda *a, **k: True",
    "nested_module": "torch.testing.assert_close = lambda *a, **k: None",
    "timer": "import time\ntime.perf_counter = lambda: 0.0",
    "timer_alias": "import time as _t\n_t.monotonic = lambda: 0.0",
    "from_import_module": "from torch import testing\ntesting.assert_close = print",
    "from_import_class": "from torch.cuda import Event\nEvent.elapsed_time = lambda self, other: 0.001",
    "class_attribute": "torch.cuda.Event.elapsed_time = lambda self, other: 0.001",
    "alias_of_module": "T = torch\nT.equal = lambda a, b: True",
    "alias_of_class": "Ev = torch.cuda.Event\nEv.record = lambda self, s=None: None",
    "inside_function": "def patch():\n    torch.cuda.synchronize = lambda *a: None\npatch()",
    "tuple_target": "torch.isclose, x = (lambda *a, **k: True), 1",
    "augmented": "time_ns = 0\nimport time\ntime.time_ns += 0",
    "delete": "del torch.allclose",
    "setattr_literal": "setattr(torch, 'allclose', lambda *a, **k: True)",
    "setattr_computed": "setattr(torch, 'all' + 'close', lambda *a, **k: True)",
    "setattr_nested_module": "import time\nsetattr(time, 'perf_counter', lambda: 0.0)",
    "delattr": "delattr(torch.testing, 'assert_close')",
    "vars_literal": "vars(torch)['allclose'] = lambda *a, **k: True",
    "vars_computed": "vars(torch)['all' + 'close'] = lambda *a, **k: True",
    "dunder_dict": "torch.cuda.__dict__['synchronize'] = lambda *a: None",
    "dunder_dict_computed": "import time\ntime.__dict__['perf_' + 'counter'] = lambda: 0.0",
    "dunder_method": "torch.nn.Module.__call__ = lambda self, *a: None",
    "triton_bench": "import triton.testing\ntriton.testing.do_bench = lambda *a, **k: 0.001",
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_source_is_not_flagged(name):
    report = analyze(HONEST[name])
    assert report.status is None, f"{name}: {report.reason}"
    assert report.triton_kernels == ["add_relu_kernel"]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_rebinding_is_refused(name):
    report = analyze(variant(TOP, HOSTILE[name] + "\n" + TOP))
    assert report.status is Status.REJECTED, name
    assert "replaces a comparison or timing function" in report.reason, report.reason


def test_reason_names_the_line_and_the_target():
    report = analyze(variant(TOP, "import time\n\n\ntime.perf_counter = lambda: 0.0\n" + TOP))
    line = variant(TOP, "import time\n\n\ntime.perf_counter = lambda: 0.0\n" + TOP).splitlines().index(
        "time.perf_counter = lambda: 0.0") + 1
    assert f"line {line}" in report.reason and "time.perf_counter" in report.reason


@pytest.mark.parametrize("form", [
    "_m = __import__('tor' + 'ch')\nvars(_m)['all' + 'close'] = lambda *a, **k: True",
    "t = getattr(__import__('torch'), 'test' + 'ing')\nsetattr(t, 'assert_' + 'close', print)",
])
def test_dynamic_forms_pass_the_static_check(form):
    """What the source hides is left to the run-time snapshot (harness/corpus/hostile.py evaluates these end to end)."""
    assert analyze(variant(TOP, form + "\n" + TOP)).status is None


def test_honest_good_candidate():
    assert analyze(GOOD).status is None


def test_a_source_over_the_size_limit_is_a_format_error_naming_it():
    """A valid 24 MB candidate (mostly comments) used to end as "crash: worker exited with code 0": its frame
    exceeded the channel's header limit inside the worker. Now it is refused before any worker, naming the limit;
    one just under the limit is analysed as usual."""
    from eval.static_checks import MAX_SOURCE_BYTES, analyze

    padding = "# " + "x" * 98 + "\n"
    big = analyze(GOOD + "\n" + padding * ((24 << 20) // len(padding)))
    assert big.status is Status.FORMAT_ERROR and "over the limit of 4 MiB" in big.reason, big.reason
    fits = analyze(GOOD + "\n" + padding * ((MAX_SOURCE_BYTES - 2 * len(GOOD)) // (len(padding) + 1)))
    assert fits.status is None, fits.reason


@pytest.mark.parametrize("form", ["self.f = torch.compile(self._f)", "from torch import compile as c\nf = c(g)",
                                  "import torch._dynamo\ntorch._dynamo.optimize()(g)",
                                  "from torch._inductor import config"])
def test_a_torch_compile_candidate_is_refused_for_that_reason(form):
    """torch.compile's kernels are generated by PyTorch's compiler, not written by the candidate: the refusal says
    so, instead of the generic "defines no kernel of its own"."""
    from eval.static_checks import refusal

    source = "import torch\nimport torch.nn as nn\n" + form + "\nclass ModelNew(nn.Module):\n    pass\n"
    status, reason = refusal(analyze(source), "reject")
    assert status is Status.REJECTED and "torch.compile" in reason and "not the candidate's own" in reason, reason
    plain = refusal(analyze("import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n"), "reject")
    assert plain is not None and "torch.compile" not in plain[1]
