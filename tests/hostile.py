"""Candidate sources used by the evaluator tests: one honest kernel and many hostile variants.

Each hostile candidate is the honest one with one change, so a test failure points at exactly
one evaluator check.
"""

from harness.bench.candidates import problem_source

GOOD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0) * scale, mask=mask)


def launch(x, y, scale):
    out = torch.empty_like(x)
    n = x.numel()
    add_relu_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, scale, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return launch(x, y, self.scale)
'''

PROBLEM = problem_source(4096)


def variant(old: str, new: str, base: str = GOOD) -> str:
    """The honest candidate with `old` replaced by `new` (which must occur)."""
    assert old in base, old
    return base.replace(old, new)


FORWARD = "        return launch(x, y, self.scale)"
TOP = "class ModelNew(nn.Module):"

# Honest candidates that look like tampering to a careless check: they must be judged correct.
SELF_TIMING = variant(TOP, '''import time
from time import perf_counter


def timed(fn, x, y, scale):
    """Time one variant the way an autotuning candidate does: events on a GPU, the clock on a CPU."""
    if x.is_cuda:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x, y, scale)
        end.record()
        torch.cuda.synchronize()
        elapsed_time = start.elapsed_time(end)
        return elapsed_time
    t = time.perf_counter()
    fn(x, y, scale)
    elapsed_time = (perf_counter() - t) * 1e3
    return elapsed_time


def launch_small(x, y, scale):
    out = torch.empty_like(x)
    n = x.numel()
    add_relu_kernel[(triton.cdiv(n, 256),)](x, y, out, n, scale, BLOCK=256)
    return out


''' + TOP).replace(FORWARD, """        if not hasattr(self, "best"):
            variants = [launch, launch_small]
            times = [timed(fn, x, y, self.scale) for fn in variants]
            self.best = variants[times.index(min(times))]
        return self.best(x, y, self.scale)""")

HONEST: dict[str, str] = {"self_timing": SELF_TIMING}

HOSTILE: dict[str, tuple[str, str, str]] = {
    # name: (source, expected status, a phrase the reason or error must contain)
    "no_model_new": (GOOD.replace("class ModelNew", "class Other"), "format_error", "ModelNew"),
    "empty": ("", "format_error", "empty"),
    "syntax_error": (variant(FORWARD, "        return launch(x, y,"), "compile_error", "syntax error"),
    "missing_module": ("import not_a_real_module_xyz\n" + GOOD, "compile_error", "not_a_real_module_xyz"),
    "loop_at_import": (variant(TOP, "while True:\n    pass\n\n" + TOP), "timeout", "load"),
    "loop_in_forward": (variant(FORWARD, "        while True:\n            pass"), "timeout", "run"),
    "sys_exit_at_import": (variant(TOP, "import sys\nsys.exit(3)\n" + TOP), "compile_error", "sys.exit"),
    "sys_exit_in_forward": (variant(FORWARD, "        import sys\n        sys.exit(0)"), "runtime_error", "sys.exit"),
    "os_exit_in_forward": (variant(FORWARD, "        import os\n        os._exit(0)"), "crash", "exited with code 0"),
    "segfault": (variant(FORWARD, "        import ctypes\n        ctypes.string_at(0)"), "crash", "SIGSEGV"),
    "raises": (variant(FORWARD, "        raise ValueError('boom')"), "runtime_error", "boom"),
    "wrong_shape": (variant(FORWARD, "        return launch(x, y, self.scale)[:-1]"), "incorrect", "shape"),
    "wrong_dtype": (variant(FORWARD, "        return launch(x, y, self.scale).double()"), "incorrect", "dtype"),
    "wrong_values": (variant("tl.maximum(x + y, 0.0)", "(x + y)"), "incorrect", "values differ"),
    "patch_allclose": (variant(TOP, "torch.allclose = lambda *a, **k: True\n" + TOP), "rejected", "replaces a comparison"),
    "patch_assert_close": (variant(TOP, "torch.testing.assert_close = lambda *a, **k: None\n" + TOP), "rejected",
                           "replaces a comparison"),
    "patch_allclose_vars": (variant(TOP, "vars(torch)['all' + 'close'] = lambda *a, **k: True\n" + TOP), "rejected",
                            "replaces a comparison"),
    # the `*_disguised` forms hide the module or the name from the static check: the run-time snapshot catches them
    "patch_allclose_disguised": (variant(TOP, "_m = __import__('tor' + 'ch')\nvars(_m)['all' + 'close'] = lambda *a, **k: True\n"
                                         + TOP), "rejected", "replaced torch.allclose"),
    "patch_assert_close_setattr_disguised": (variant(TOP, "_t = getattr(__import__('torch'), 'test' + 'ing')\n"
                                                     "setattr(_t, 'assert_' + 'close', lambda *a, **k: None)\n" + TOP),
                                             "rejected", "replaced torch.testing.assert_close"),
    "patch_sync_in_forward_disguised": (variant(FORWARD, "        setattr(getattr(torch, 'cu' + 'da'), 'synchro' + 'nize', "
                                                "lambda *a: None)\n" + FORWARD), "rejected", "replaced torch.cuda.synchronize"),
    "patch_timer": (variant(TOP, "import time\ntime.perf_counter = lambda: 0.0\n" + TOP), "rejected", "timing function"),
    "patch_timer_disguised": (variant(TOP, "_t = __import__('ti' + 'me')\nvars(_t)['perf_' + 'counter'] = lambda: 0.0\n" + TOP),
                              "rejected", "replaced time.perf_counter"),
    "patch_event_disguised": (variant(TOP, "vars(getattr(torch, 'cu' + 'da'))['Ev' + 'ent'] = object\n" + TOP), "rejected",
                              "replaced torch.cuda.Event"),
    "gc_scan": (variant(FORWARD, "        import gc\n        for o in gc.get_objects():\n            pass\n" + FORWARD),
                "rejected", "garbage collector"),
    "gc_scan_disguised": (variant(FORWARD, """        g = __import__('g' + 'c')
        for o in getattr(g, 'get_' + 'objects')():
            if isinstance(o, torch.Tensor) and o.shape == x.shape and o is not x and o is not y:
                return o.clone()
        return torch.zeros_like(x)"""), "incorrect", "values differ"),
    "frame_peek": (variant(FORWARD, "        import sys\n        f = sys._getframe(1)\n" + FORWARD), "rejected",
                   "stack frames"),
    "regenerate_inputs": (variant(FORWARD, """        torch.manual_seed(42)
        gx, gy = torch.randn(x.numel()), torch.randn(y.numel())
        return launch(gx.to(x.device), gy.to(y.device), self.scale)"""), "incorrect", "values differ"),
    "cached_first_output": (variant(FORWARD, """        if not hasattr(self, '_cache'):
            self._cache = launch(x, y, self.scale)
        return self._cache.clone()"""), "incorrect", "values differ"),
    "zero_inputs": (variant(FORWARD, """        x.zero_()
        y.zero_()
        return launch(x, y, self.scale)"""), "incorrect", "values differ"),  # the reference ran on its own copies
    "mutates_input_after": (variant(FORWARD, """        out = launch(x, y, self.scale)
        x.zero_()
        return out"""), "incorrect", "modified input"),
    "pytorch_only": ("""
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x + y) * self.scale
""", "rejected", "defines no kernel"),
    "decoy_kernel": (variant(FORWARD, "        return torch.relu(x + y) * self.scale"), "rejected", "none of the candidate's own kernels ran"),
    "fallback_on_error": (variant(FORWARD, """        try:
            add_relu_kernel[(1,)](x, y)
        except Exception:
            pass
        return torch.relu(x + y) * self.scale"""), "rejected", "none of the candidate's own kernels ran"),
    "returns_input_view": (variant(FORWARD, """        launch(x, y, self.scale)
        return x.view(-1)"""), "incorrect", "shares memory"),
    "unwritten_output": (variant("    out = torch.empty_like(x)\n    n = x.numel()",
                                 "    out = torch.empty_like(x)\n    n = x.numel() // 2"), "incorrect", "NaN"),
    "starts_thread": (variant(FORWARD, """        import threading, time as _t
        threading.Thread(target=_t.sleep, args=(30,), daemon=True).start()
        return launch(x, y, self.scale)"""), "rejected", "threads"),
    "enables_tf32": (variant(TOP, "torch.backends.cuda.matmul.allow_tf32 = True\n" + TOP), "rejected", "precision"),
    "tensor_subclass": (variant(FORWARD, """        class Lazy(torch.Tensor):
            pass
        return launch(x, y, self.scale).as_subclass(Lazy)"""), "incorrect", "not a torch.Tensor"),
    # the test sets OPENAI_API_KEY and MY_SERVICE_TOKEN in the parent; the candidate reports what it can see
    "reads_api_key": (variant(FORWARD, """        import os
        leaked = [k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'OPENAI' in k]
        values = [k for k, v in os.environ.items() if 'secret' in v]
        if leaked or values or 'PATH' not in os.environ:
            raise RuntimeError('saw secrets: ' + ','.join(leaked + values))
        raise RuntimeError('no secrets among %d variables' % len(os.environ))"""), "runtime_error", "no secrets among"),
    # 50 MB of output at import: drained and capped, the evaluation goes on (stdout is not part of a correct result)
    "prints_50mb": (variant(TOP, "import sys\nsys.stdout.write('x' * (50 << 20))\nsys.stdout.flush()\n" + TOP), "correct",
                    "correct (CPU interpreter"),
}
