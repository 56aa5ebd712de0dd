"""`harness device probe [--json]`: measure and cache this GPU's ceilings (copy bandwidth, matmul FLOP/s)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import torch

from eval import EvalConfig, probe_and_cache


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    probe = sub.add_parser("probe", help="measure the GPU's ceilings once and cache them for SOL fractions")
    probe.add_argument("--cache-dir", default=EvalConfig.cache_dir)
    probe.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("harness device probe: no CUDA GPU is visible; ceilings are measured on the GPU that evaluates")
        return 2
    ceilings = probe_and_cache(args.cache_dir)
    if args.json:
        print(json.dumps(asdict(ceilings)))
        return 0
    print(f"device: {ceilings.device}   torch {torch.__version__}")
    print(f"device-to-device copy: {ceilings.copy_bytes_per_s / 1e12:.2f} TB/s (bytes read + written)")
    for dtype, flops in ceilings.matmul_flops_per_s.items():
        print(f"dense matmul {dtype:>9}: {flops / 1e12:.1f} TFLOP/s (8192^3, random data{', TF32 off' if dtype == 'float32' else ''})")
    print(f"cached under {args.cache_dir}/device/")
    return 0
