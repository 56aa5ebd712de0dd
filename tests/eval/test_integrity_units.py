"""Units of the tamper snapshot (`eval.worker.integrity`) and of the output-structure check, in this process.

The end-to-end cases (a real worker, hostile candidates) are in `tests/eval/test_hostile.py`; here each
probe is shown to see a change and to see nothing once the change is undone.
"""

from __future__ import annotations

import sys
import types
from collections import OrderedDict, namedtuple
from collections.abc import Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode

from eval.crossing import protocol as p
from eval.crossing.wire import ProtocolError
from eval.worker import call_inputs, integrity, observed_commands, serve  # imported before any snapshot, as in a worker
from eval.worker.trial_tools import poisoned_memory as _poisoned_memory
from problems import compare_structure
from problems.runtime import output_structure

T = torch.zeros(2)


@pytest.mark.parametrize("out, text", [
    (T, "tensor"),
    ((T,), "(tensor,)"),
    ((T, T), "(tensor, tensor)"),
    ([T], "[tensor]"),
    ({"y": (T,)}, "{'y': (tensor,)}"),
    ({1: T, "b": [T, None]}, "{1: tensor, 'b': [tensor, None]}"),
    ((), "()"),
    (3, "<int>"),
    (None, "None"),
    (namedtuple("Pair", "a b")(T, T), "(tensor, tensor)"),  # subclasses are their base container
    (OrderedDict(y=T), "{'y': tensor}"),
])
def test_output_structure_is_the_containers_as_python_writes_them(out, text):
    assert output_structure(out) == text


def test_structure_mismatch_says_what_each_side_returns():
    assert compare_structure("tensor", "tensor") is None
    mismatch = compare_structure("tensor", "{'y': (tensor,)}", trial=2)
    assert mismatch is not None and mismatch.output == -1 and mismatch.trial == 2
    assert mismatch.reason == "output structure differs: the reference returns a tensor, the candidate a dict {'y': (tensor,)}"
    assert compare_structure("tensor", "(tensor,)") is not None  # strict: a 1-tuple is not the tensor
    assert compare_structure("(tensor, tensor)", "[tensor, tensor]") is not None
    assert compare_structure("{'a': tensor, 'b': tensor}", "{'b': tensor, 'a': tensor}") is not None  # flattened in order


def test_run_reply_carries_the_structure_as_text_only():
    reply = p.RunReply(output_structure="(tensor,)")
    assert p.decode_reply(p.Run(), p.encode(reply, "run")) == reply
    with pytest.raises(ProtocolError, match="does not fit"):
        p.decode_reply(p.Run(), {"cmd": "run", "output_structure": ["tensor"]})


@pytest.fixture
def snapshot() -> Iterator[integrity.Snapshot]:
    torch.use_deterministic_algorithms(False)  # as the worker's load does: the first call imports torch._dynamo
    snap = integrity.Snapshot()
    assert snap.violations() == []
    yield snap
    assert snap.violations() == [], "a test left its change in place"


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_an_attribute_added_to_tensor_is_seen_until_removed(snapshot):
    torch.Tensor.__mul__ = torch._C.TensorBase.__mul__  # shadows the inherited one
    try:
        assert snapshot.violations() == ["added torch.Tensor.__mul__"]
    finally:
        del torch.Tensor.__mul__


def test_replaced_and_deleted_functions_and_methods_are_named_by_their_own_homes(snapshot):
    """Module functions, owned classes' methods (by the class's own name, once however many watched modules
    hold the class) and every attribute of `torch.Tensor`, non-callable ones included."""
    allclose, cuda_event = torch.allclose, torch.cuda.Event
    record, doc = torch.cuda.Event.record, torch.Tensor.__dict__["__doc__"]
    torch.allclose = 0  # replaced by something not callable at all: still a replacement
    del torch.cuda.Event.record  # Event lives in torch.cuda.streams; torch.cuda holds it too
    torch.Tensor.__doc__ = "patched"
    try:
        assert snapshot.violations() == [
            "replaced torch.Tensor.__doc__, torch.allclose", "deleted torch.cuda.streams.Event.record"]
    finally:
        torch.allclose, torch.cuda.Event.record, torch.Tensor.__doc__ = allclose, record, doc
    assert torch.cuda.Event is cuda_event


def test_a_watched_original_is_held_so_its_id_cannot_pass_to_a_replacement(snapshot):
    """Ids alone would let a replacement that reuses a freed original's address pass as unchanged: the snapshot
    keeps the originals alive, so a replacement is never the same object."""
    original = torch.testing.assert_close
    assert any(original is value for space in snapshot.spaces for value in space.values)
    torch.testing.assert_close = lambda *a, **k: None
    try:
        assert snapshot.violations() == ["replaced torch.testing.assert_close"]
    finally:
        torch.testing.assert_close = original


def test_patched_comparison_builtins_do_not_blind_the_snapshot(snapshot):
    """A candidate that makes `all`, `operator.is_` and `sorted` say "unchanged" (neither `builtins` nor
    `operator` is a watched module) still has its replacement seen: the comparison bound them at import."""
    import builtins
    import operator

    originals = builtins.all, builtins.sorted, operator.is_, torch.allclose
    torch.allclose = lambda *a, **k: True
    builtins.all, builtins.sorted, operator.is_ = (lambda it: True), (lambda it, **k: []), (lambda a, b: True)
    try:
        seen = snapshot.violations()
    finally:
        builtins.all, builtins.sorted, operator.is_, torch.allclose = originals
    assert seen == ["replaced torch.allclose"]


def test_a_mode_left_on_the_stack_is_seen(snapshot):
    mode = _Mode()
    mode.__enter__()
    try:
        (reason,) = snapshot.violations()
        assert reason == "left torch modes active (torch function modes: [] -> [_Mode])"
    finally:
        mode.__exit__(None, None, None)
    with _Mode():
        torch.ones(1)
    assert snapshot.violations() == []


def test_a_switch_flipped_is_seen(snapshot):
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = not before
    try:
        (reason,) = snapshot.violations()
        assert reason == f"changed numeric precision or backend switches (cudnn.benchmark: {before} -> {not before})"
    finally:
        torch.backends.cudnn.benchmark = before


def test_an_import_hook_is_seen(snapshot):
    class Finder:
        def find_spec(self, *args):
            return None

    sys.meta_path.insert(0, Finder())
    try:
        (reason,) = snapshot.violations()
        assert reason.startswith("changed the import system (sys.meta_path: [") and ".Finder, " in reason
    finally:
        sys.meta_path.pop(0)


def test_a_replaced_module_entry_is_seen(snapshot):
    original = sys.modules["json"]
    sys.modules["json"] = type(original)("json")
    try:
        assert snapshot.violations() == ["replaced sys.modules['json']"]
    finally:
        sys.modules["json"] = original


def test_the_workers_own_poisoning_is_not_a_change_but_turning_it_off_is(snapshot):
    with _poisoned_memory(True) as turned_off:
        assert torch.are_deterministic_algorithms_enabled()
    assert turned_off == [] and snapshot.violations() == []
    with _poisoned_memory(True) as turned_off:
        torch.use_deterministic_algorithms(False)  # what a candidate would do inside its forward
    assert turned_off == ["torch.use_deterministic_algorithms"]


def test_a_broken_probe_is_a_violation_not_a_crash(snapshot, monkeypatch):
    def broken() -> dict:
        raise RuntimeError("patched away")

    monkeypatch.setitem(integrity._STATE, "changed the import system", broken)
    assert snapshot.violations() == ["broke the tamper check itself (RuntimeError: 'patched away')"]
    monkeypatch.undo()


def test_the_worker_commands_live_in_watched_modules_and_a_patch_there_is_seen(snapshot):
    """The worker's command code may be split across modules (`Worker` and the classes it inherits, the helpers its
    commands call by module): each such module of the worker's own is watched, so rewriting a command or a helper
    in any of them is reported, whichever module it moved to."""
    homes = {cls.__module__ for cls in serve.Worker.__mro__ if cls.__module__.startswith("eval.")}
    helpers = {m.__name__ for m in vars(serve).values()
               if isinstance(m, types.ModuleType) and m.__name__ in ("eval.worker.call_inputs", "eval.worker.trial_tools",
                                                                     "eval.worker.isolation")}
    assert {"eval.worker.serve", "eval.worker.observed_commands"} <= homes
    assert len(helpers) == 3
    assert not (homes | helpers) - set(integrity._WATCHED_MODULE_NAMES)
    original_run, original_rebuild = observed_commands.ObservedTiming.cmd_window_run, call_inputs.rebuild_args
    observed_commands.ObservedTiming.cmd_window_run = lambda self, msg, tensors: None
    call_inputs.rebuild_args = lambda spec, tensors: []
    try:
        found = snapshot.violations()
        assert any("ObservedTiming.cmd_window_run" in v for v in found), found
        assert any("eval.worker.call_inputs.rebuild_args" in v for v in found), found
    finally:
        observed_commands.ObservedTiming.cmd_window_run, call_inputs.rebuild_args = original_run, original_rebuild
