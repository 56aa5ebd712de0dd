"""Small VGG-style image classifier: three conv-ReLU-pool stages, global pooling, Linear (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 64
HEIGHT = 128
WIDTH = 128
CLASSES = 1000

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["cnn", "conv", "pooling", "classifier"],
    "flops": 80966057984,
    "bytes": 15350176,
    "small": {"BATCH": 2, "HEIGHT": 16, "WIDTH": 20, "CLASSES": 10},
}


class Model(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1)
        self.conv2 = nn.Conv2d(64, 128, 3, padding=1)
        self.conv3 = nn.Conv2d(128, 256, 3, padding=1)
        self.fc = nn.Linear(256, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.conv3(x))
        return self.fc(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(BATCH, 3, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CLASSES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 1, 3, HEIGHT // 2 + 4, WIDTH - 8)]]
