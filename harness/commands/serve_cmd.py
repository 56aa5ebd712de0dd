"""`harness serve [--host H] [--port P] [--no-auth] [OVERRIDES...]`: the evaluator as an HTTP reward service.

OVERRIDES are `harness run`'s Hydra overrides (`eval=fast`, `eval.workers_per_gpu=6`, `executor=ray`,
`runs_dir=...`, `problems=level1`; the served problems default to `problems=all`). A bearer token from
`HARNESS_SERVE_TOKEN` is required; `--no-auth` only on a loopback address. See docs/serve.md.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import socket
import sys
from typing import Any

TOKEN_ENV = "HARNESS_SERVE_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="Hydra overrides as for harness run (eval=fast executor=ray ...)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed at start)")
    parser.add_argument("--no-auth", action="store_true", help=f"no bearer token (only on loopback); else ${TOKEN_ENV}")
    parser.add_argument("--name", default="default", help="the audit trail goes to runs_dir/serve-NAME/")
    parser.add_argument("--max-queue", type=int, default=256, help="evaluations waiting per preset before 429")
    parser.add_argument("--max-body-bytes", type=int, default=8 << 20, help="largest request body (413 beyond)")
    parser.add_argument("--max-batch", type=int, default=256, help="most items in one batch request (413 beyond)")
    parser.add_argument("--no-problem-source", action="store_true",
                        help="refuse {source, name} problems (their reference code runs in the trusted parent)")
    parser.add_argument("--reward", default=None, help="default reward (log_speedup, fast_1, kevin, ...)")
    parser.add_argument("--rewards", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (it registers its own rewards with harness.serve.rewards.register)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _say(text: str) -> None:
    print(f"harness serve: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    token = os.environ.get(TOKEN_ENV) or None
    if args.no_auth:
        if not is_loopback(args.host):
            _say(f"--no-auth is accepted only on a loopback address, not {args.host}; set ${TOKEN_ENV} instead")
            return 2
        token = None
    elif token is None:
        _say(f"set ${TOKEN_ENV} to the bearer token clients must send (or --no-auth on a loopback address)")
        return 2
    for name, value in (("--max-queue", args.max_queue), ("--max-body-bytes", args.max_body_bytes),
                        ("--max-batch", args.max_batch)):
        if value < 1:
            _say(f"{name} must be >= 1, not {value}")
            return 2
    overrides = list(args.overrides)
    from harness import overrides as ov
    from harness.serve.rewards import RewardError  # before the try: its except clause names them
    from harness.store import StoreError

    try:
        if not any(ov.parse([o])[0].key_or_group in ("problems", "problems.spec") for o in overrides):
            overrides.insert(0, "problems=all")
        for module in args.rewards:
            importlib.import_module(module)
        from harness.serve.service import Service

        service = Service(overrides, name=args.name, max_queue=args.max_queue, reward=args.reward,
                          allow_problem_source=not args.no_problem_source, log=_say)
    except (ov.OverrideError, ImportError, RewardError, StoreError, ValueError, RuntimeError) as exc:
        _say(f"error: {exc}")
        return 2
    try:
        return serve(service, args.host, args.port, token=token, max_body_bytes=args.max_body_bytes,
                     max_batch=args.max_batch)
    finally:
        service.close()


def serve(service: object, host: str, port: int, *, token: str | None, max_body_bytes: int, max_batch: int) -> int:
    """Bind, print the address, and serve until interrupted."""
    import uvicorn

    from harness.serve.app import create_app

    app = create_app(service, token=token, max_body_bytes=max_body_bytes, max_batch=max_batch)  # type: ignore[arg-type]
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        _say(f"cannot bind {host}:{port}: {exc.strerror or exc}")
        return 2
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5, access_log=False)
    stopping = service.stopping  # type: ignore[attr-defined]

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:  # the stop signal: tell waiting requests first
            stopping.set()
            super().handle_exit(sig, frame)

    server = Server(config)
    print(f"harness serve: listening on http://{shown}:{bound} ({'bearer token' if token else 'no auth'}; "
          f"audit trail {service.run_dir})", flush=True)  # type: ignore[attr-defined]
    server.run(sockets=[sock])
    return 0


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A socket bound and already listening, so that the address printed at start accepts connections at once: they
    wait in the backlog until the server's loop takes them (a client that connected between the print and the
    server's own `listen` was refused)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
