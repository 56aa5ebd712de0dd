"""The parent's timing: the plan and the statistics (`measure`), the bounds on what a worker claims
(`claim_bounds`), observed timing (`observed`), the host-bound flag, the roofline, and the GPU's idleness around a
reference block (`_gpu_idle`)."""
