"""One honest kernel and many hostile variants, for the evaluator tests and `harness presets bench`.

The honest kernel is the prompts' worked example (`agents/prompts/examples/add_relu_triton.py`)
on its own problem, relu(a + b) over 1 x 4096 floats. Each hostile candidate is the honest one
with one change at a named anchor (an anchor that is gone fails at import), so a test failure
points at exactly one evaluator check. `kernelbench_gaps` adds a few aimed at exactly the rules
KernelBench leaves out.
"""

import textwrap

from harness.corpus.candidates import EXAMPLE_TRITON, edit, example_problem_source

GOOD = EXAMPLE_TRITON
PROBLEM = example_problem_source(4096)


def variant(old: str, new: str, base: str = GOOD) -> str:
    """The honest candidate with `old` (which must occur exactly once) replaced by `new`."""
    return edit(base, old, new)


TOP = "class ModelNew(nn.Module):"
SIGNATURE = "    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
# the whole body of `forward` (the last thing in the file): `variant(FORWARD, X + FORWARD)` runs X first
FORWARD = GOOD[GOOD.index(SIGNATURE) + len(SIGNATURE):]
RETURN = "        return out\n"  # the last line of `forward`, after the kernel ran
RELU = "tl.maximum(a + b, 0.0)"  # inside the kernel
assert FORWARD.endswith(RETURN) and GOOD.count(SIGNATURE) == 1, "the worked example's forward has changed shape"

# Honest candidates that look like tampering to a careless check: they must be judged correct.
SELF_TIMING = variant("        BLOCK_SIZE = 1024\n", """        if not hasattr(self, "best"):
            times = {block: timed(launch, a, b, out, block) for block in (256, 1024)}
            self.best = min(times, key=times.get)
        BLOCK_SIZE = self.best
""", base=variant(TOP, '''import time
from time import perf_counter


def timed(fn, a, *args):
    """Time one variant the way an autotuning candidate does: events on a GPU, the clock on a CPU."""
    if a.is_cuda:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(a, *args)
        end.record()
        torch.cuda.synchronize()
        elapsed_time = start.elapsed_time(end)
        return elapsed_time
    t = time.perf_counter()
    fn(a, *args)
    elapsed_time = (perf_counter() - t) * 1e3
    return elapsed_time


def launch(a, b, out, block):
    add_relu_kernel[(triton.cdiv(out.numel(), block),)](a, b, out, out.numel(), BLOCK_SIZE=block)


''' + TOP))


def at_import(code: str, base: str = GOOD) -> str:
    """The candidate running `code` at import, before ModelNew is defined."""
    return variant(TOP, code + TOP, base)


def in_forward(code: str, base: str = GOOD) -> str:
    """The candidate running `code` at the start of every forward."""
    return variant(FORWARD, code + FORWARD, base)


_PASSTHROUGH_MODE = '''from torch.overrides import TorchFunctionMode


class {name}(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {{}}))


'''
# switches, a mode and an import used inside forward and left as found: nothing the tamper snapshot may refuse
SCOPED_STATE = variant(FORWARD, """        import torch.backends.xnnpack  # a torch submodule first imported here
        with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=False), \\
                Passthrough():
""" + "".join(f"    {line}\n" for line in FORWARD.splitlines()), base=at_import(_PASSTHROUGH_MODE.format(name="Passthrough")))

HONEST: dict[str, str] = {"self_timing": SELF_TIMING, "scoped_state": SCOPED_STATE}

# Changes to the worker process that outlive the candidate's call (`eval.worker.integrity`): each is rejected, and
# the reason names it. Names a static check would refuse are reached through `__import__`/`getattr`, so the
# run-time snapshot is what catches them.
_SLOW_MUL = """_T = getattr(__import__('torch'), 'Ten' + 'sor')
setattr(_T, '__m' + 'ul__', lambda a, b: torch._C.TensorBase.__mul__(a, b))
"""
_TORCH_FUNCTION = """_T = getattr(__import__('torch'), 'Ten' + 'sor')
_original = vars(_T)['__torch_function__'].__func__
setattr(_T, '__torch_' + 'function__', classmethod(lambda cls, *a, **k: _original(cls, *a, **k)))
"""
_DISPATCH_MODE = """from torch.utils._python_dispatch import TorchDispatchMode


class SlowDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


SlowDispatch().__enter__()
"""
_META_PATH = """import sys


class Finder:
    def find_spec(self, name, path=None, target=None):
        return None


sys.meta_path.insert(0, Finder())
"""
_ATEN_KERNEL = """_lib = torch.library.Library('aten', 'IMPL')
_lib.impl('mul.Tensor', lambda a, b: a, 'CUDA')
"""
_SNEAKY = _PASSTHROUGH_MODE.format(name="Sneaky")
TAMPERING: dict[str, tuple[str, str]] = {
    # name: (source, a phrase the integrity reason must contain)
    "adds_inherited_tensor_method": (at_import(_SLOW_MUL), "added torch.Tensor.__mul__"),
    "adds_functional_name": (at_import("torch.nn.functional.fast_gelu = lambda x: x\n"),
                             "added torch.nn.functional.fast_gelu"),
    "replaces_torch_function": (at_import(_TORCH_FUNCTION), "replaced torch.Tensor.__torch_function__"),
    "function_mode_left_active": (at_import(_SNEAKY + "Sneaky().__enter__()\n"), "torch function modes: [] -> [Sneaky]"),
    "function_mode_entered_in_forward": (in_forward("        Sneaky().__enter__()\n", at_import(_SNEAKY)),
                                         "torch function modes: [] -> [Sneaky]"),
    "dispatch_mode_left_active": (at_import(_DISPATCH_MODE), "torch dispatch modes: [] -> [SlowDispatch]"),
    "cudnn_benchmark": (at_import("torch.backends.cudnn.benchmark = True\n"), "cudnn.benchmark: False -> True"),
    "disables_flash_sdp": (at_import("torch.backends.cuda.enable_flash_sdp(False)\n"), "cuda.flash_sdp: True -> False"),
    "deterministic_at_import": (at_import("torch.use_deterministic_algorithms(True)\n"),
                                "deterministic_algorithms: False -> True"),
    "no_poison_fill": (at_import("torch.utils.deterministic.fill_uninitialized_memory = False\n"),
                       "deterministic.fill_uninitialized_memory: True -> False"),
    "poison_off_in_forward": (in_forward("        torch.use_deterministic_algorithms(False)\n"),
                              "turned off the poisoning of new allocations during the call"),
    "flush_denormal": (at_import("torch.set_flush_denormal(True)\n"), "flush_denormal: False -> True"),
    "default_dtype": (at_import("torch.set_default_dtype(torch.float64)\n"),
                      "default_dtype: torch.float32 -> torch.float64"),
    "num_threads": (at_import("torch.set_num_threads(torch.get_num_threads() + 3)\n"), "num_threads:"),
    "meta_path_finder": (at_import(_META_PATH), "changed the import system (sys.meta_path"),
    "path_hook": (at_import("import sys\nsys.path_hooks.append(lambda path: None)\n"), "sys.path_hooks:"),
    "replaces_sys_modules_entry": (at_import("import sys, types\nsys.modules['json'] = types.ModuleType('json')\n"),
                                   "replaced sys.modules['json']"),
    "settrace": (at_import("import sys\nsys.settrace(lambda *a: None)\n"), "sys.settrace: None -> <lambda>"),
    "setprofile": (at_import("import sys\nsys.setprofile(lambda *a: None)\n"), "sys.setprofile: None -> <lambda>"),
    "gc_callback": (at_import("import gc\ngc.callbacks.append(lambda phase, info: None)\n"),
                    "gc.callbacks: [] -> [<lambda>]"),
    "signal_timer": (at_import("import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\n"
                               "signal.setitimer(signal.ITIMER_REAL, 1000.0)\n"), "signal handler SIGALRM"),
    "global_forward_hook": (at_import("torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)\n"),
                            "torch.nn.modules.module._global_forward_hooks: [] -> [<lambda>]"),
    "aten_kernel": (at_import(_ATEN_KERNEL), "torch.library kernel aten/mul.Tensor/CUDA"),
}

HOSTILE: dict[str, tuple[str, str, str]] = {
    # name: (source, expected status, a phrase the reason or error must contain)
    "no_model_new": (variant(TOP, "class Other(nn.Module):"), "format_error", "ModelNew"),
    "empty": ("", "format_error", "empty"),
    "syntax_error": (variant(RETURN, "        return (out,\n"), "compile_error", "syntax error"),
    "missing_module": ("import not_a_real_module_xyz\n" + GOOD, "compile_error", "not_a_real_module_xyz"),
    "loop_at_import": (variant(TOP, "while True:\n    pass\n\n" + TOP), "timeout", "load"),
    "loop_in_forward": (variant(FORWARD, "        while True:\n            pass\n"), "timeout", "run"),
    "sys_exit_at_import": (variant(TOP, "import sys\nsys.exit(3)\n" + TOP), "compile_error", "sys.exit"),
    "sys_exit_in_forward": (variant(FORWARD, "        import sys\n        sys.exit(0)\n"), "runtime_error", "sys.exit"),
    "os_exit_in_forward": (variant(FORWARD, "        import os\n        os._exit(0)\n"), "crash", "exited with code 0"),
    "segfault": (variant(FORWARD, "        import ctypes\n        ctypes.string_at(0)\n"), "crash", "SIGSEGV"),
    "raises": (variant(FORWARD, "        raise ValueError('boom')\n"), "runtime_error", "boom"),
    "wrong_shape": (variant(RETURN, "        return out[:-1]\n"), "incorrect", "shape"),
    "wrong_dtype": (variant(RETURN, "        return out.double()\n"), "incorrect", "dtype"),
    "wrong_values": (variant(RELU, "(a + b)"), "incorrect", "values differ"),
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
            if isinstance(o, torch.Tensor) and o.shape == a.shape and o is not a and o is not b:
                return o.clone()
        return torch.zeros_like(a)
"""), "incorrect", "values differ"),
    "frame_peek": (variant(FORWARD, "        import sys\n        f = sys._getframe(1)\n" + FORWARD), "rejected",
                   "stack frames"),
    "regenerate_inputs": (variant(FORWARD, """        torch.manual_seed(42)
        a, b = torch.randn(a.shape).to(a.device), torch.randn(b.shape).to(b.device)
""" + FORWARD), "incorrect", "values differ"),
    # the first trial after the warm-up is in the secret's order: a published draw finds the values differ, a hidden
    # workload finds the shape differs; both name the stale output
    "cached_first_output": (variant(FORWARD, """        if hasattr(self, '_cache'):
            return self._cache.clone()
""" + edit(FORWARD, RETURN, "        self._cache = out\n" + RETURN)), "incorrect", "differ"),
    # the inputs of every trial sit at the same addresses with new values: the memo hits at trial 1, always
    "pointer_keyed_memo": (variant(FORWARD, """        key = (a.data_ptr(), b.data_ptr())
        memo = self.__dict__.setdefault('memo', {})
        if key in memo:
            return memo[key].clone()
""" + edit(FORWARD, RETURN, "        memo[key] = out\n" + RETURN)), "incorrect", "values differ beyond"),  # stale at the first trial of shapes seen before
    "zero_inputs": (variant(FORWARD, """        a.zero_()
        b.zero_()
""" + FORWARD), "incorrect", "values differ"),  # the reference ran on its own copies
    # `x` keeps the caller's tensor, whatever `forward` rebinds `a` to
    "mutates_input_after": (variant(FORWARD, "        x = a\n" + edit(FORWARD, RETURN, "        x.zero_()\n" + RETURN)),
                            "incorrect", "modified input"),
    "pytorch_only": ("""
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
""", "rejected", "defines no kernel"),
    "decoy_kernel": (variant(FORWARD, "        return torch.relu(a + b)\n"), "rejected",
                     "none of the candidate's own kernels ran"),
    "fallback_on_error": (variant(FORWARD, """        try:
            add_relu_kernel[(1,)](a, b)
        except Exception:
            pass
        return torch.relu(a + b)
"""), "rejected", "none of the candidate's own kernels ran"),
    "returns_input_view": (variant(FORWARD, "        x = a\n" + edit(FORWARD, RETURN, "        return x.view(x.shape)\n")),
                           "incorrect", "shares memory"),
    "unwritten_output": (variant("        n_elements = out.numel()\n", "        n_elements = out.numel() // 2\n"), "incorrect", "NaN"),
    "starts_thread": (variant(FORWARD, """        import threading, time as _t
        threading.Thread(target=_t.sleep, args=(30,), daemon=True).start()
""" + FORWARD), "rejected", "threads"),
    "enables_tf32": (variant(TOP, "torch.backends.cuda.matmul.allow_tf32 = True\n" + TOP), "rejected", "precision"),
    "tensor_subclass": (variant(RETURN, """        class Lazy(torch.Tensor):
            pass
        return out.as_subclass(Lazy)
"""), "incorrect", "not a torch.Tensor"),
    # the test sets OPENAI_API_KEY and MY_SERVICE_TOKEN in the parent; the candidate reports what it can see
    "reads_api_key": (variant(FORWARD, """        import os
        leaked = [k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'OPENAI' in k]
        values = [k for k, v in os.environ.items() if 'secret' in v]
        if leaked or values or 'PATH' not in os.environ:
            raise RuntimeError('saw secrets: ' + ','.join(leaked + values))
        raise RuntimeError('no secrets among %d variables' % len(os.environ))
"""), "runtime_error", "no secrets among"),
    # the reference returns a tensor: the same tensor in any container is a different output
    "returns_1_tuple": (variant(RETURN, "        return (out,)\n"), "incorrect",
                        "output structure differs: the reference returns a tensor, the candidate a tuple (tensor,)"),
    "returns_list": (variant(RETURN, "        return [out]\n"), "incorrect", "the candidate a list [tensor]"),
    "returns_dict": (variant(RETURN, "        return {'y': (out,)}\n"), "incorrect", "the candidate a dict {'y': (tensor,)}"),
    # 50 MB of output at import: drained and capped, the evaluation goes on (stdout is not part of a correct result)
    "prints_50mb": (variant(TOP, "import sys\nsys.stdout.write('x' * (50 << 20))\nsys.stdout.flush()\n" + TOP), "correct",
                    "correct (CPU interpreter"),
}


# the problem with a hidden workload (`get_extra_inputs`) the agent never saw: a shape other than 1 x 4096
HIDDEN_SHAPES = PROBLEM + '''

def get_extra_inputs():
    return [[torch.randn(1000), torch.randn(1000)]]
'''

# put before the body of `forward`: replaces the inputs `a`, `b` by KernelBench's, redrawn from its public seeds
REGENERATE_PUBLIC_INPUTS = '''        calls = getattr(self, "_calls", 0)
        self._calls = calls + 1
        g = torch.Generator().manual_seed(42)
        seeds = [int(torch.randint(0, 2**32 - 1, (1,), generator=g)) for _ in range(calls + 1)]
        torch.manual_seed(seeds[calls])
        a, b = torch.randn(a.shape).to(a.device), torch.randn(b.shape).to(b.device)
'''


def side_stream(forward: str) -> str:
    """The body `forward` run, on a GPU, on a side stream that first sleeps ~2 ms: it returns before its work is done."""
    body = textwrap.indent(forward, "    ")
    return ("        if not a.is_cuda:\n" + body
            + "        if not hasattr(self, '_side'):\n"
              "            self._side = torch.cuda.Stream()\n"
              "        with torch.cuda.stream(self._side):\n"
              "            torch.cuda._sleep(2_000_000)\n" + body)


def kernelbench_gaps(on_gpu: bool) -> dict[str, tuple[str, str, str]]:
    """name: (problem source, candidate source, verdict under the strict rules) of candidates aimed at the rules
    KernelBench leaves out; `on_gpu` because hidden side-stream work is only hidden on a GPU."""
    return {
        # off by 3e-3 everywhere: inside KernelBench's 1e-2, outside our fp32 1e-4
        "off_by_3e-3": (PROBLEM, variant(RELU, RELU + " + 0.003"), "incorrect"),
        # right only at the shape the agent saw
        "hardcoded_shape": (HIDDEN_SHAPES, variant(FORWARD, "        if a.numel() != 4096:\n"
                                                            "            return torch.zeros_like(a)\n" + FORWARD),
                            "incorrect"),
        # ignores its inputs and recomputes KernelBench's, from the public seed
        "regenerate_public_inputs": (PROBLEM, variant(FORWARD, REGENERATE_PUBLIC_INPUTS + FORWARD), "incorrect"),
        # returns before its side stream has finished (hidden work, GPU only; on a CPU it is honest)
        "side_stream": (PROBLEM, variant(FORWARD, side_stream(FORWARD)), "rejected" if on_gpu else "correct"),
    }
