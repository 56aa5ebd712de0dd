"""The check steps by job: correctness (`trials`), the timing inputs (`staging`), own kernels (`kernel_evidence`),
timing (`timing_steps`) and the torch.compile baseline (`compile_baseline`); and what they share (`context`: the
evaluation's `Context`, the `Verdict` that ends it, the retries a step may ask for)."""
