"""`harness serve`: the evaluator as an HTTP reward service for RL trainers (see docs/serve.md).

One job per module: `rewards` (reward functions by name, pluggable), `metrics` (Prometheus counters), `queue`
(the bounded, coalescing, cancellable work queue), `catalog` (served problems and the loop's prompts), `audit`
(the run store of a served study), `service` (a request to a verdict, reward and feedback; no HTTP), `app`
(the FastAPI routes over a `Service`), `process` (a server as a child process, for tests and benchmarks).
"""
