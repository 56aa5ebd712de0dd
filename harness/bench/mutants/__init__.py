"""`harness bench mutants`: how many seeded real bugs our evaluator rejects, beside KernelBench's evaluator.

`rules`: the mutation rules (source-to-source edits of Triton and CUDA kernels), `probe`: the published values that
`hardcoded-size` writes in, `oracle`: equivalent mutants found by a float64 check over many inputs, `judges`: our
evaluator and KernelBench's, `bench`: the command (originals, mutants, the three stages, the kill rate by class).
"""
