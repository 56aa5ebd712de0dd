"""Triton solution for LLM/06_cross_entropy_large_vocab: per-token loss from bf16 logits in one read.

Each program streams one 128K-entry row of bf16 logits in chunks, keeping an online
log-sum-exp in fp32, and picks up the target logit with one scalar load. Eager PyTorch first
materialises an fp32 copy of the logits (2 GB here), then a full log-softmax, then gathers.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cross_entropy_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * row_stride
    row_max = float("-inf")
    row_sum = 0.0
    for start in range(0, n_cols, BLOCK):  # every chunk holds at least one real column
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(row_max, tl.max(x, axis=0))
        row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        row_max = new_max
    target = tl.load(targets_ptr + row)
    target_logit = tl.load(base + target).to(tl.float32)
    tl.store(loss_ptr + row, row_max + tl.log(row_sum) - target_logit)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = logits.contiguous()
        loss = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        block = min(triton.next_power_of_2(logits.shape[1]), 8192)
        _cross_entropy_kernel[(logits.shape[0],)](logits, targets.contiguous(), loss, logits.shape[1], logits.stride(0),
                                                  BLOCK=block, num_warps=8)
        return loss
