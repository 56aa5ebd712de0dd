"""`harness serve`: the evaluator as an HTTP reward service for RL trainers (see docs/serve.md).

rewards: reward functions (by name, pluggable); metrics: Prometheus counters; queue: the bounded,
coalescing work queue; service: requests to verdicts, rewards and the audit trail (no HTTP); app: the
FastAPI routes over a `Service`.
"""
