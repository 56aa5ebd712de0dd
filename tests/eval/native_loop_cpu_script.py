"""Run by tests/eval/test_native_loop_cpu.py in a subprocess whose libcuda.so.1 is tests/fakes/fake_libcuda.c."""

import array
import ctypes
import sys

import torch

from eval.crossing._capture import SUPPORTED_DTYPES
from eval.crossing import _native_build as build

fake = ctypes.CDLL("libcuda.so.1")
module = build.load(build.ensure_built())
base = torch._C.TensorBase
S = 8
x = torch.randn(3, 4)


def make(get_stream=lambda i: 0):
    return module.Loop(
        cubin=b"-", key=(1 << 64) - 5, samples=S, flush_bytes=1 << 20, device_index=0, device=torch.device("cpu"),
        get_stream=get_stream, tensor_type=torch.Tensor, data_ptr=base.data_ptr, size=base.size, stride=base.stride,
        device_descr=base.__dict__["device"], layout_descr=base.__dict__["layout"], dtype_descr=base.__dict__["dtype"],
        strided=torch.strided, dtypes=SUPPORTED_DTYPES, dtype_names=tuple(str(d)[6:] for d in SUPPORTED_DTYPES))


def run(loop, forward, reps=2, capture=True, copies=None):
    return loop.run(forward, (), reps, 10, -1, True, False, capture, copies)[:4]


loop = make()
buffer = torch.zeros(3, 4)
sources = [torch.full((3, 4), float(r)) for r in range(3)]
seen = []


def forward(a):
    seen.append(a[0, 0].item())  # the copy of this repetition's source is done before its call
    return a, {"k": a.t(), "z": [a[1]]}


plan = array.array("Q", [v for s in sources for v in (buffer.data_ptr(), s.data_ptr(), 48)]).tobytes()
times, raw, leaves, violations, outside = loop.run(forward, (buffer,), 3, 10, -1, True, False, True, plan)
assert times == [1.0, 1.0, 1.0] and violations == [] and seen == [0.0, 1.0, 2.0], (times, violations, seen)
# the fake's events count records: per repetition copies' event, start, end, capture's event, so each part is one
# tick a repetition (between: one fewer)
assert outside == (3.0, 3.0, 2.0), outside
assert leaves == [("float32", [3, 4]), ("float32", [4, 3]), ("float32", [4])], leaves
cap = torch.frombuffer(raw, dtype=torch.float64).view(3, 3, S + 16)
assert cap[:, :, S + 14].tolist() == [[12.0, 12.0, 4.0]] * 3 and (cap[:, :, S] == 7).all()  # rows where expected


class Sub(torch.Tensor):
    pass


cases = {
    "not an exact torch.Tensor": lambda: x.as_subclass(Sub),
    "holds a int": lambda: (x, 3),
    "deeper than 4": lambda: [[[[[x]]]]],
    "more than 16 tensors": lambda: [x] * 17,
    "not torch.strided": lambda: x.to_sparse(),
    "unsupported dtype": lambda: x.to(torch.complex64),
    "9 dimensions": lambda: torch.zeros([1] * 9),
    "not on the timed device": lambda: torch.zeros(2, device="meta"),
    "holds no tensor": lambda: (),
    "overlaps itself": lambda: torch.zeros(1, 4).expand(3, 4),  # stride 0: one row stands in for three
    "overlaps itself (a stride-0": lambda: torch.zeros(8).as_strided((3, 4), (2, 1)),  # rows overlap
}
for expect, forward in cases.items():
    times, raw, leaves, violations = run(loop, forward)
    assert times == [] and len(raw) == 0 and leaves == [] and len(violations) == 1 and expect in violations[0], (
        expect, violations)
assert run(loop, lambda: [[[[x]]]])[3] == []
assert run(loop, lambda: torch.zeros(4, 3).t())[3] == [] and run(loop, lambda: torch.zeros(4, 6)[:, ::2])[3] == []
assert run(loop, lambda: torch.zeros(0, 4).expand(3, 0, 4))[3] == []  # no elements: nothing shared
sizes = iter(range(1, 10))
times, raw, leaves, violations = run(loop, lambda: torch.zeros(next(sizes)), reps=3)
assert len(times) == 1 and leaves == [("float32", [1])] and "changed dtype or shape" in violations[0]


def set_limit():
    ctypes.c_size_t.in_dll(fake, "fake_limit").value = 4096
    return x


times, raw, leaves, violations = run(loop, set_limit, reps=1, capture=False)
assert raw is None and len(times) == 1 and violations == ["persisting L2 cache limit found set (4096 bytes)"]
assert ctypes.c_size_t.in_dll(fake, "fake_limit").value == 0


def boom():
    raise KeyError("boom")


for forward, copies, error in ((boom, None, KeyError), (lambda: x, b"\0" * 40, ValueError),
                               (lambda: x, [1, 2, 3], TypeError),
                               (lambda: run(loop, lambda: x), None, RuntimeError),
                               (lambda: loop.set_lead(1.0), None, RuntimeError)):
    try:
        run(loop, forward, copies=copies)
    except error:
        pass
    else:
        raise AssertionError(f"{forward} did not raise {error}")

stream = [0]


def change_stream():
    stream[0] = 5
    return x


assert "current CUDA stream changed to 5" in run(make(lambda i: stream[0]), change_stream)[3][0]
ctypes.c_int.in_dll(fake, "fake_fail_record").value = 1
try:
    run(loop, lambda: x)
except RuntimeError as e:
    assert str(e) == "cuEventRecord failed: CUresult 700 (FAKE_ERROR)", e
ctypes.c_int.in_dll(fake, "fake_fail_record").value = 0
assert run(loop, lambda: x)[3] == []

# the loop's own kernels fill every SM: 4 SMs of 2048 thread slots, blocks of 1024 threads
assert loop.info()["fills_sms"] == 1 and (loop.info()["fill_blocks"], loop.info()["fill_threads"]) == (8, 1024)
loop.set_lead(1.0)
assert run(loop, lambda: x)[3] == []
assert (ctypes.c_uint.in_dll(fake, "fake_spin_blocks").value, ctypes.c_uint.in_dll(fake, "fake_spin_threads").value) == (8, 1024)
# the capture's partial sums: as many blocks of 256 as the 4 SMs hold at once (4 each, by registers)
assert loop.info()["capture_blocks"] == 16 == ctypes.c_uint.in_dll(fake, "fake_capture_blocks").value

# the flush: -1 writes the default size before each call, 0 nothing, a larger size grows the buffer first
words = ctypes.c_size_t.in_dll(fake, "fake_fill_words")
for flush_bytes, per_call in ((-1, (1 << 20) // 4), (0, 0), (16 << 20, (16 << 20) // 4), (-1, (1 << 20) // 4)):
    words.value = 0
    assert loop.run(lambda: x, (), 3, 10, flush_bytes, False, True, False, None)[3] == []
    assert words.value == 3 * per_call, (flush_bytes, words.value)

before = sys.getrefcount(x)
for _ in range(50):
    run(loop, lambda: (x, [x]), reps=5)
    run(loop, lambda: (x, 3), reps=5)
assert sys.getrefcount(x) == before, "leaked references"
print("ok")
