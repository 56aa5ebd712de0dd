"""The untrusted side of the trust boundary: everything here runs inside a sandboxed worker.

`serve` is the worker's command loop, `integrity` its tamper watch, `timing` its GPU timing,
`graphs` its CUDA-graph replays and busy shares, `tracing` its record of launched kernels and
`light_build` its lighter `load_inline` builds, and `prebuilt` the record of what a build made,
which the evaluating worker imports read-only. Nothing in this package decides a verdict:
the worker reports facts and the trusted parent (the rest of `eval`) judges them. Start it
with `python -m eval.worker`.
"""
