"""Candidate sources the evaluator is exercised with, by the tests and the benchmarks alike.

`candidates`: the prompts' worked example, its named edits and the sized add-relu-scale problems
with Triton and CUDA candidates; `hostile`: one honest kernel and the hostile variants each
evaluator check must catch; `own_share`: GEMM + epilogue hybrids and a decoy around the
own-kernel share rule; `flips`: honest candidates whose calls take a few microseconds;
`solutions`: the suite's hand-written solutions as candidates. A home of their own, inside the
package, so that tests and `harness bench` load them the same way and neither depends on the other.
"""
