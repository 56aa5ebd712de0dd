"""`harness bench eval|suite|trusted|kernelbench|corpus|mutants|serve|loop|store`: benchmarks of the harness itself
(figures go to docs/benchmarks.md).

The one door into `harness.bench`: nothing else of the harness imports a benchmark (`harness presets bench` comes
through `run_presets`), so benchmarks depend on the product and never the reverse.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.bench import eval_bench


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True)
    _eval(sub)
    _suite(sub)
    _trusted(sub)
    _kernelbench(sub)
    _corpus(sub)
    _serve(sub)
    _trusted_events(sub)
    _observed_contexts(sub)
    _imported_memory(sub)
    _observed_blocks(sub)
    _mutants(sub)
    _loop(sub)
    _store(sub)


def _eval(sub: Any) -> None:
    ev = sub.add_parser("eval", help="evaluator throughput (pool / single worker / process per candidate), "
                                     "multi-GPU scaling and repeatability (GPU; throughput also runs on CPU)")
    ev.add_argument("--part", choices=("all", *eval_bench.PARTS), default="all", help="launch-bound (not part of all): launch-bound references' eager and "
                                        "CUDA-graph times across fresh worker processes; parents (not part of all): "
                                        "one GPU with 4/6/8 workers, every GPU under one parent, a parent per GPU; "
                                        "channel (not part of all): a 256 MB output across the trust boundary, "
                                        "pageable against pinned shared memory; build (not part of all): a "
                                        "load_inline candidate's build time as written and with the light .cu, "
                                        "--sessions builds of each; steps (not part of all): one GPU with "
                                        "exclusive steps left out, a diagnostic of what bounds the rate; ref-share (not part of all): "
                                        "6 x --copies honest candidates of one 67M-element problem with the reference's "
                                        "timing shared per window, then one per candidate; observed-cost (not part of "
                                        "all): the same batch with observed timing off, then on; confinement (not part of "
                                        "all): --sessions worker starts confined and plain, alternately, then 6 x "
                                        "--copies honest candidates through the pool, four rounds each way; bytecode (not "
                                        "part of all): the workers' bytecode primed, then --sessions worker starts "
                                        "with it and as installed, alternately, and where the install lacks bytecode "
                                        "6 x --copies honest candidates through the pool, two rounds each way; requests (not "
                                        "part of all): --rounds rounds of 25 empty and 25 tamper-reading requests to a "
                                        "candidate's worker; stopwatch (not part of all): --rounds rounds of 100 timed "
                                        "exchanges with the parent quiet and beside 3 busy threads; bound-survey (not "
                                        "part of all): 16 x --copies honest candidates, 8 at once: how often the wall "
                                        "bound doubts them (second looks, retries alone, rejections); draws (not "
                                        "part of all): --rounds rounds of the harness's seeding against "
                                        "torch.manual_seed's, and of one repetition's input draw")
    ev.add_argument("--problems", default=None, help="launch-bound: problem selection (default: "
                                                     "L3/06_lstm,L3/11_gru,L3/07_moe_layer and a matmul control)")
    ev.add_argument("--sessions", type=int, default=5)
    ev.add_argument("--copies", type=int, default=4,
                    help="scaling parts: distinct copies of each of the 6 honest Triton candidates (batch = 6 x copies); "
                         "--part throughput: distinct copies of the mixed batch the pool evaluates (the one-at-a-time "
                         "evaluators take one)")
    ev.add_argument("--evaluators", default="pool,single,process",
                    help="--part throughput: which of pool, single, process (per candidate) to run, in this order")
    ev.add_argument("--graph-modes", default="off,auto",
                    help="launch-bound: eval.cuda_graphs modes to run, in this order (off alone: a survey of the "
                         "host-bound flag over many references)")
    ev.add_argument("--rounds", type=int, default=20, help="flips (not part of all): verdicts per candidate, spread over 5 "
                                                           "fresh pools; requests, stopwatch: rounds of each kind; own-share "
                                                           "(not part of all) takes no options")
    ev.add_argument("--workers", default="0", help="ref-share: workers per GPU, comma-separated; both ways at each "
                                                   "count, in this order (0: the evaluator's default, 4 on a GPU)")
    ev.add_argument("--out", help="write the full JSON report here")


def _suite(sub: Any) -> None:
    suite = sub.add_parser("suite", help="baselines, roofline floors and reference solutions per level (GPU)")
    suite.add_argument("selection", nargs="?", default="all", help="problem selection (all, level1, L1/*softmax*, ...)")
    suite.add_argument("--no-solutions", action="store_true", help="baselines and floors only")
    suite.add_argument("--no-baselines", action="store_true",
                       help="reference solutions only (verdicts, speedups, host-bound flags), no eager/compile baselines")
    suite.add_argument("--out", help="write the rows as JSON here")


def _trusted(sub: Any) -> None:
    trusted = sub.add_parser("trusted", help="the reference solutions through the two-process measurement: verdicts, "
                                            "wall bound figures, batch rate and repeatability across rounds (GPU)")
    trusted.add_argument("--rounds", type=int, default=2)
    trusted.add_argument("--out", help="write the JSON report here")
    trusted.add_argument("--observed", action="store_true",
                         help="with eval.observed_timing=true: each solution's loop and observed speedups")


def _kernelbench(sub: Any) -> None:
    kb = sub.add_parser("kernelbench", help="KernelBench's own evaluator beside eval=kernelbench on the same "
                                           "reference solutions (GPU; needs KernelBench's source)")
    kb.add_argument("problems", nargs="+", help="suite problem ids with a reference solution, e.g. L1/16_rms_norm")
    kb.add_argument("--kernelbench-src", default=".kb/src", help="KernelBench's src/ folder (holds kernelbench/)")
    kb.add_argument("--repeat", type=int, default=2)
    kb.add_argument("--out", help="write the JSON report here")


def _corpus(sub: Any) -> None:
    corpus = sub.add_parser("corpus", help="false-reject audit of a published corpus (CUDA-L1's KernelBench kernels): "
                                           "KernelBench's verdict beside ours on every entry, resumable (GPU)")
    corpus.add_argument("--corpus", required=True, help="the corpus JSON: {\"1\": [{task_id, ref_code, custom_code}, "
                                                        "...], ...} (CUDA-L1's optimized_cuda_code/codes/h100.json)")
    corpus.add_argument("--levels", default="1,2,3", help="levels to audit, comma-separated")
    corpus.add_argument("--kernelbench-src", default=".kb/src", help="KernelBench's src/ folder (holds kernelbench/)")
    corpus.add_argument("--out", default="corpus-audit", help="folder of the per-entry results (kb.jsonl, "
                                                              "ours.jsonl); a second run with it skips what is done")
    corpus.add_argument("--jobs", type=int, default=4, help="KernelBench side: entries at once, each in its own process")
    corpus.add_argument("--side", choices=("kb", "ours", "both"), default="both")
    corpus.add_argument("--limit", type=int, default=None, help="only the first N entries of the levels")
    corpus.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help="start no entry (KernelBench) or chunk (ours) after this many seconds")
    corpus.add_argument("--table", action="store_true", help="print the markdown summary of --out and run nothing")
    corpus.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="our side's device (cpu: a test)")
    corpus.add_argument("--backend", choices=("cuda", "triton"), default="cuda", help="our side's backend label")


def _serve(sub: Any) -> None:
    serve = sub.add_parser("serve", help="evaluations per GPU-hour and p50/p99 latency through harness serve beside "
                                         "the in-process evaluator (GPU: 16M elements; CPU: a small smoke test)")
    serve.add_argument("--candidates", type=int, default=None, help="distinct honest Triton candidates per side "
                                                                   "(default 96 on a GPU, 6 on a CPU)")
    serve.add_argument("--callers", type=int, default=None, help="concurrent callers per side (default 2 x workers)")
    serve.add_argument("--rounds", type=int, default=1, help="rounds of both sides, the order alternating; the "
                                                             "overhead is the median of the rounds' ratios")
    serve.add_argument("--out", help="write the JSON report here")
    serve.add_argument("overrides", nargs="*", help="Hydra overrides for both sides (eval.workers_per_gpu=6)")


def _trusted_events(sub: Any) -> None:
    events = sub.add_parser("trusted-events", help="a worker's GPU work timed by a trusted process's own events "
                                                   "through interprocess events, beside events in one process (GPU)")
    events.add_argument("--reps", type=int, default=200, help="repetitions per work kind (default 200)")
    events.add_argument("--out", help="write the raw figures as JSON here")
    events.add_argument("--lead-us", type=float, default=300.0, help="the GPU lead before each window (default 300)")
    events.add_argument("--ways", default="unconfined,sandboxed",
                        help="how the worker runs, comma-separated: unconfined, sandboxed, or one namespace or identity "
                             "change alone (ipc, pid, mount, network or uts namespace; uid 65534)")


def _observed_contexts(sub: Any) -> None:
    contexts = sub.add_parser("observed-contexts", help="whether a trusted stream waiting on the GPU slows the "
                                                        "candidate it times, and a wait on the CPU instead (GPU)")
    contexts.add_argument("--out", help="write the figures as JSON here")


def _imported_memory(sub: Any) -> None:
    memory = sub.add_parser("imported-memory", help="a kernel's time per call on its own memory, on memory another "
                                                    "process exported by CUDA IPC and by the VMM API (GPU)")
    memory.add_argument("--out", help="write the figures as JSON here")


def _observed_blocks(sub: Any) -> None:
    blocks = sub.add_parser("observed-blocks", help="observed timing's figures at several block sizes, and the fit of "
                                                    "a fixed cost per window against the repetitions (GPU)")
    blocks.add_argument("--blocks", default="0.25,0.5,1,2", help="eval.observed_block_ms values, comma-separated")
    blocks.add_argument("--solutions", default="LLM/03_silu_and_mul,LLM/02_rope,L1/16_rms_norm",
                        help="reference solutions judged beside the add, by problem id, comma-separated")
    blocks.add_argument("--out", help="write the rows and fits as JSON here")


def _mutants(sub: Any) -> None:
    # bench-mutants: the mutation benchmark (issue 53 item 3)
    mut = sub.add_parser("mutants", help="seeded real bugs in correct kernels: equivalent ones found by a float64 "
                                         "oracle, the rest judged by our evaluator and KernelBench's; kill rate by "
                                         "class, false rejects (GPU; CPU: our side under the interpreter)")
    mut.add_argument("selection", nargs="?", default="all", help="problems whose reference solutions are mutated "
                                                                 "(none: the corpus's kernels alone)")
    mut.add_argument("--corpus", default=None, help="CUDA-L1's corpus JSON (optimized_cuda_code/codes/h100.json): "
                                                    "its CUDA kernels are mutated too (GPU)")
    mut.add_argument("--corpus-limit", type=int, default=5, help="the first N corpus entries with a CUDA kernel")
    mut.add_argument("--corpus-keys", default="", help="these corpus entries instead, comma-separated (L1/32,...)")
    mut.add_argument("--kernelbench-src", default=".kb/src", help="KernelBench's src/ folder (holds kernelbench/)")
    mut.add_argument("--out", default="runs/mutants-bench", help="folder of the records (oracle/ours/kb.jsonl), "
                                                                "summary.json and table.md; a second run goes on")
    mut.add_argument("--jobs", type=int, default=4, help="KernelBench processes (oracle processes too, on a GPU) "
                                                         "at once")
    mut.add_argument("--side", choices=("ours", "kb", "both"), default="both")
    mut.add_argument("--per-rule", type=int, default=1, help="sites of each rule mutated in each original")
    mut.add_argument("--seed", type=int, default=0, help="which sites are picked, and the oracle's draws")
    mut.add_argument("--rules", default="", help="only these rules, comma-separated (default: all)")
    mut.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    mut.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                     help="start no oracle problem or judging chunk after this many seconds")
    mut.add_argument("--table", action="store_true", help="print the table of --out's records, run nothing")


def _loop(sub: Any) -> None:
    loop = sub.add_parser("loop", help="per-attempt overhead of the run loop")
    loop.add_argument("--attempts", type=int, default=200)


def _store(sub: Any) -> None:
    store = sub.add_parser("store", help="a large synthetic run through the store: resume, report and the page's load "
                                         "in headless Chromium timed, with peak memory (CPU)")
    store.add_argument("--attempts", type=int, default=50000, help="about this many attempts (default 50000)")
    store.add_argument("--out", required=True, help="folder for the synthetic run, its report and the logs")
    store.add_argument("--no-browser", action="store_true", help="skip loading the page in Chromium")


def run(args: argparse.Namespace) -> int:
    if args.bench == "eval":
        from harness.bench.rates import EVALUATORS

        evaluators = tuple(e.strip() for e in args.evaluators.split(",") if e.strip())
        unknown = sorted(set(evaluators) - set(EVALUATORS))
        if unknown or not evaluators:
            print(f"--evaluators: choose from {', '.join(EVALUATORS)} (got {args.evaluators!r})")
            return 2
        from harness.bench.launch_bound import MODES

        graph_modes = tuple(m.strip() for m in args.graph_modes.split(",") if m.strip())
        if not graph_modes or set(graph_modes) - set(MODES):
            print(f"--graph-modes: choose from {', '.join(MODES)} (got {args.graph_modes!r})")
            return 2
        try:
            workers = tuple(int(w) for w in args.workers.split(",") if w.strip())
        except ValueError:
            workers = ()
        if not workers or min(workers) < 0:
            print(f"--workers: counts of workers per GPU, comma-separated, 0 or more (got {args.workers!r})")
            return 2
        return eval_bench.main(args.part, args.sessions, args.out, problems=args.problems, copies=args.copies,
                               evaluators=evaluators, graph_modes=graph_modes, rounds=args.rounds, workers=workers)
    if args.bench == "suite":
        from harness.bench import suite_bench

        return suite_bench.main(args.selection, args.out, solutions=not args.no_solutions,
                               baselines=not args.no_baselines)
    if args.bench == "trusted":
        from harness.bench import trusted_solutions

        return trusted_solutions.main(args.rounds, args.out, observed=args.observed)
    if args.bench == "kernelbench":
        from harness.bench import kernelbench_side_by_side

        return kernelbench_side_by_side.main(args.problems, args.kernelbench_src, args.repeat, args.out)
    if args.bench == "corpus":
        from harness.bench import corpus_audit

        return corpus_audit.main(args.corpus, args.levels, args.kernelbench_src, args.out, args.jobs, args.side,
                                 args.limit, args.time_budget, args.table, args.device, args.backend)
    if args.bench == "serve":
        from harness.bench import serve_bench

        return serve_bench.main(args.candidates, args.callers, args.out, args.overrides, args.rounds)
    if args.bench == "store":
        from harness.bench import store_bench

        return store_bench.main(args.attempts, args.out, browser=not args.no_browser)
    if args.bench == "trusted-events":
        from harness.bench import trusted_events

        ways = tuple(w.strip() for w in args.ways.split(",") if w.strip())
        if not ways or set(ways) - set(trusted_events.WAYS):
            print(f"--ways: choose from {', '.join(trusted_events.WAYS)} (got {args.ways!r})")
            return 2
        return trusted_events.main(args.reps, args.out, ways, args.lead_us)
    if args.bench == "observed-contexts":
        from harness.bench import observed_contexts

        return observed_contexts.main(args.out)
    if args.bench == "imported-memory":
        from harness.bench import imported_memory

        return imported_memory.main(args.out)
    if args.bench == "observed-blocks":
        return _run_observed_blocks(args)
    if args.bench == "mutants":  # bench-mutants
        from harness.bench.mutants import bench as mutants_bench  # bench-mutants

        return mutants_bench.main(args.selection, args.corpus, args.corpus_limit, args.corpus_keys,  # bench-mutants
                                  args.kernelbench_src,  # bench-mutants
                                  args.out, args.jobs, args.side, args.per_rule, args.seed, args.rules,  # bench-mutants
                                  args.device, args.time_budget, args.table)  # bench-mutants
    from harness.bench import loop_bench

    return int(loop_bench.main(args.attempts) or 0)


def _run_observed_blocks(args: argparse.Namespace) -> int:
    from harness.bench import observed_blocks

    try:
        sizes = tuple(float(b) for b in args.blocks.split(",") if b.strip())
    except ValueError:
        print(f"--blocks: comma-separated milliseconds, such as 0.25,0.5,1 (got {args.blocks!r})")
        return 2
    if not sizes or min(sizes) <= 0:
        print(f"--blocks: at least one size, each > 0 (got {args.blocks!r})")
        return 2
    return observed_blocks.main(sizes, tuple(s for s in args.solutions.split(",") if s.strip()), args.out)


def run_presets(args: argparse.Namespace) -> int:
    """`harness presets bench` (its arguments are `presets_cmd`'s): the suite's solutions and the hostile candidates
    under each preset."""
    from harness.bench import presets_bench

    return presets_bench.main(args.selection, [p for p in args.presets.split(",") if p], device=args.device,
                              solutions=not args.no_solutions, hostile=not args.no_hostile, out=args.out)
