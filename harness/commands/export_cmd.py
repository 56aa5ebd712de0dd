"""`harness export RUN_DIR`: every attempt of a run as JSON lines, prompts and code included."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.store import StoreError, export_jsonl


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run directory (runs/NAME)")
    parser.add_argument("--out", help="output file (default: RUN_DIR/export.jsonl)")
    parser.add_argument("--no-prompts", action="store_true", help="leave out the prompts (they grow with each turn)")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else Path(args.run_dir) / "export.jsonl"
    try:
        n = export_jsonl(args.run_dir, out, include_prompts=not args.no_prompts)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        hint = "" if args.out else "; write it elsewhere with --out FILE"
        print(f"error: cannot write {out}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 2
    print(f"{n} attempts -> {out}")
    return 0
