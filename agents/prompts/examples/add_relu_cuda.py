import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void add_relu_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = a[i] + b[i];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor add_relu(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "add_relu: inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "add_relu: inputs must be float32");
    TORCH_CHECK(a.sizes() == b.sizes(), "add_relu: shapes must match");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const int64_t n = a_c.numel();
    if (n > 0) {
        const int threads = 256;
        const unsigned int blocks = (unsigned int)((n + threads - 1) / threads);
        // Launch on PyTorch's current stream so the work is ordered with the caller's.
        add_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            a_c.data_ptr<float>(), b_c.data_ptr<float>(), out.data_ptr<float>(), n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

cpp_source = "torch::Tensor add_relu(torch::Tensor a, torch::Tensor b);"

add_relu_ext = load_inline(
    name="add_relu_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["add_relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_relu_ext.add_relu(a, b)
