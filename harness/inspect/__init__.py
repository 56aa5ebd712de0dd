"""inspect_ai tasks over our problems, prompts, feedback and evaluator (`pip install -e ".[inspect]"`).

`tasks`: the `kernels` task and the `kernels_selfcheck` task (docs/inspect.md); `judge`: where prompts and verdicts
come from (this process's evaluator or `harness serve`); `solver`, `scorer`: the multi-turn solver and the scorer
with its fast_p metrics; `selfcheck`: the known-verdict fixtures. Importing this package loads none of them.
"""
