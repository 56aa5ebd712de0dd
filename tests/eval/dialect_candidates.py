"""Candidates in the Triton dialects (Gluon, Helion) for the add_relu worked example: the honest one of each
language and the hostile ones both must reject (a PyTorch fallback dressed in the language, a decoy kernel, and plain
Triton doing the work under a dialect's name). Shared by the CPU and GPU tests of each backend."""

from __future__ import annotations

import torch

from agents.prompting import EXAMPLES_DIR
from problems.problem import Problem, problem_from_source

HELION_GOOD = (EXAMPLES_DIR / "add_relu_helion.py").read_text()
GLUON_GOOD = (EXAMPLES_DIR / "add_relu_gluon.py").read_text()
_FORWARD = '''    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_relu(a.contiguous().view(-1), b.contiguous().view(-1)).view(a.shape)
'''
assert _FORWARD in HELION_GOOD

# A Helion kernel with no hl.tile loop is host code only, which Helion refuses; the fallback catches that and does
# the work in PyTorch. No kernel of the candidate's ever runs.
HELION_FALLBACK = HELION_GOOD.replace('''    out = torch.empty_like(a)  # host code: runs on the CPU side, allocates only
    for tile in hl.tile(out.numel()):  # device code: each tile becomes one Triton program
        out[tile] = torch.relu(a[tile] + b[tile])
    return out''', '''    return torch.relu(a + b)''').replace(_FORWARD, '''    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        try:
            return add_relu(a, b)
        except Exception:
            return torch.relu(a + b)
''')
# Helion's reference mode runs the kernel's body eagerly, as PyTorch operations: no Triton kernel at all.
HELION_REF_MODE = HELION_GOOD.replace("static_shapes=False)", "static_shapes=False, ref_mode=helion.RefMode.EAGER)")
HELION_DECOY = HELION_GOOD.replace(_FORWARD, '''    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b)  # add_relu is defined, never called
''')
_TRITON_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def plain_add_relu(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(a + b, 0.0), mask=mask)


class ModelNew'''
_TRITON_FORWARD = '''    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        plain_add_relu[(triton.cdiv(out.numel(), 1024),)](a, b, out, out.numel(), BLOCK=1024)
        return out
'''
# The work in a plain Triton kernel, the dialect's kernel a decoy beside it: not a Helion (Gluon) solution.
HELION_AS_TRITON = HELION_GOOD.replace(_FORWARD, _TRITON_FORWARD).replace("class ModelNew", _TRITON_KERNEL, 1)
_GLUON_FORWARD = GLUON_GOOD[GLUON_GOOD.index("    def forward"):]
GLUON_AS_TRITON = GLUON_GOOD.replace(_GLUON_FORWARD, _TRITON_FORWARD).replace(
    "class ModelNew", _TRITON_KERNEL.replace("import triton\n", ""), 1)
GLUON_DECOY = GLUON_GOOD.replace(_GLUON_FORWARD, '''    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b)  # add_relu_kernel is defined, never launched
''')
# The Gluon launch is given a layout its kernel cannot take (num_warps 3 against warps_per_cta 4), so it always fails
# and the fallback does the work.
GLUON_FALLBACK = GLUON_GOOD.replace('''        add_relu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
        return out''', '''        try:
            add_relu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=3)
        except Exception:
            out = torch.relu(a + b)
        return out''')


def example_problem() -> Problem:
    """The worked example's reference, smaller without a GPU (the interpreter is slow)."""
    source = (EXAMPLES_DIR / "add_relu_reference.py").read_text()
    if not torch.cuda.is_available():
        source = source.replace("M = 4096", "M = 64").replace("N = 4096", "N = 96")
    return problem_from_source(source, name="add_relu", problem_id="example/add_relu")


for _name, _source in [(k, v) for k, v in dict(globals()).items() if k.startswith(("HELION_", "GLUON_"))]:
    assert _source not in (HELION_GOOD, GLUON_GOOD) or _name.endswith("_GOOD"), f"{_name}: the replacement missed"
