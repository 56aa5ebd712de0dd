"""Hardware facts for the prompt: presets from public datasheets, or what this machine's GPU reports.

A fact sheet is a plain dict of label -> value (values carry their units), so a config can pass
its own, e.g. `{"GPU": "NVIDIA L40S", "SMs": 142, "Memory bandwidth": "864 GB/s"}`.
"""

from __future__ import annotations

from typing import Any, Mapping

_HOPPER_SXM_COMPUTE = {
    "Peak FP32 (CUDA cores)": "67 TFLOPS",
    "Peak TF32 tensor cores (dense)": "495 TFLOPS",
    "Peak BF16/FP16 tensor cores (dense)": "989 TFLOPS",
    "Shared memory per SM": "228 KB",
    "Compute capability": "9.0",
}

# NVIDIA datasheet figures (dense tensor-core throughput).
HARDWARE_PRESETS: dict[str, dict[str, Any]] = {
    "H100-SXM": {
        "GPU": "NVIDIA H100 SXM5 80GB", "SMs": 132, "Memory": "80 GB HBM3",
        "Memory bandwidth": "3.35 TB/s", "L2 cache": "50 MB", **_HOPPER_SXM_COMPUTE,
    },
    "H100-PCIe": {
        "GPU": "NVIDIA H100 PCIe 80GB", "SMs": 114, "Memory": "80 GB HBM2e",
        "Memory bandwidth": "2.0 TB/s", "L2 cache": "50 MB",
        "Peak FP32 (CUDA cores)": "51 TFLOPS", "Peak TF32 tensor cores (dense)": "378 TFLOPS",
        "Peak BF16/FP16 tensor cores (dense)": "756 TFLOPS", "Shared memory per SM": "228 KB",
        "Compute capability": "9.0",
    },
    "H200": {
        "GPU": "NVIDIA H200 SXM 141GB", "SMs": 132, "Memory": "141 GB HBM3e",
        "Memory bandwidth": "4.8 TB/s", "L2 cache": "50 MB", **_HOPPER_SXM_COMPUTE,
    },
    "A100-SXM4-80GB": {
        "GPU": "NVIDIA A100 SXM4 80GB", "SMs": 108, "Memory": "80 GB HBM2e",
        "Memory bandwidth": "2.04 TB/s", "L2 cache": "40 MB",
        "Peak FP32 (CUDA cores)": "19.5 TFLOPS", "Peak TF32 tensor cores (dense)": "156 TFLOPS",
        "Peak BF16/FP16 tensor cores (dense)": "312 TFLOPS", "Shared memory per SM": "164 KB",
        "Compute capability": "8.0",
    },
}

# (substrings all present in torch's device name, substrings absent) -> preset
_NAME_RULES: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("H100", "PCIe"), (), "H100-PCIe"),
    (("H100", "HBM3"), ("NVL",), "H100-SXM"),
    (("H100", "SXM"), ("NVL",), "H100-SXM"),
    (("H200",), ("NVL",), "H200"),
    (("A100", "SXM4", "80GB"), (), "A100-SXM4-80GB"),
)


def preset_for_device_name(name: str) -> str | None:
    """The preset matching a CUDA device name such as "NVIDIA H100 80GB HBM3", if any."""
    for present, absent, preset in _NAME_RULES:
        if all(s in name for s in present) and not any(s in name for s in absent):
            return preset
    return None


def detect_hardware() -> dict[str, Any]:
    """Facts about CUDA device 0 (torch's properties over the matching preset); {} without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return {}
    props = torch.cuda.get_device_properties(0)
    preset = preset_for_device_name(props.name)
    facts = dict(HARDWARE_PRESETS[preset]) if preset else {}
    facts.update({
        "GPU": props.name,
        "SMs": props.multi_processor_count,
        "Memory": f"{props.total_memory / 2**30:.0f} GiB",
        "Compute capability": f"{props.major}.{props.minor}",
    })
    l2 = getattr(props, "L2_cache_size", 0)
    if l2:
        facts["L2 cache"] = f"{l2 / 2**20:.0f} MB"
    return facts


def hardware_facts(spec: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Resolve a config value: None -> {}, "auto" -> `detect_hardware()`, a preset name, or a dict."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        return dict(spec)
    if spec == "auto":
        return detect_hardware()
    if spec in HARDWARE_PRESETS:
        return dict(HARDWARE_PRESETS[spec])
    raise ValueError(f"unknown hardware preset {spec!r}; valid: auto, {', '.join(HARDWARE_PRESETS)}, or a dict of facts")
