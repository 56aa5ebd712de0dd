"""Sandboxed evaluator: compiles, verifies, times and scores Triton and CUDA candidates."""

from eval.config import EvalConfig
from eval.evaluator import Evaluator, Job
from eval.result import EvalResult, KernelShare, Mismatch, Status, Timing

__all__ = ["EvalConfig", "EvalResult", "Evaluator", "Job", "KernelShare", "Mismatch", "Status", "Timing"]
