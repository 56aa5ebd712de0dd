"""The crossing: what both sides of the trust boundary speak and load, and the only parent-side code the sandboxed
worker imports (`tests/test_architecture.py`): the requests and replies (`protocol`), their framing (`wire`) and
its stopwatch, the outputs' captures, the build record, and the one builder of the native code. It imports nothing
by itself, so that the worker's import of one of its modules loads no more of the parent."""
