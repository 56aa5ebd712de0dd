"""A worker's environment: an allow-list with no credentials, its own home, temporary folder and caches, and the GPU
it may see (`eval.process.sandbox` starts workers with it)."""

from __future__ import annotations

import os
from pathlib import Path

from eval.process.confine import PROJECT_ROOT

_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_PROVIDER_PREFIXES = ("OPENAI", "ANTHROPIC", "AZURE", "AWS", "GOOGLE", "GEMINI", "HF_", "HUGGING", "COHERE", "MISTRAL",
                      "GROQ", "TOGETHER", "DEEPSEEK", "XAI", "OPENROUTER", "FIREWORKS", "WANDB")
_ALLOWED = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
            "CUDA_LAUNCH_BLOCKING", "TRITON_INTERPRET", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "CC", "CXX",
            "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
            "PYTHONPATH", "VIRTUAL_ENV", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def visible_device_entry(gpu_index: int, visible: str | None = None) -> str:
    """The CUDA_VISIBLE_DEVICES value that shows a child exactly this process's GPU `gpu_index`.

    Indices are this process's own: under CUDA_VISIBLE_DEVICES="2,3" (a Ray actor, or a user's
    restriction) its GPU 0 is the machine's GPU 2, so a worker for it must get "2", not "0", or it
    would run (and be timed) on another GPU than its parent's reference and gate. Entries pass
    through as written (indices, GPU-UUIDs, MIG names). `visible` defaults to this process's setting.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is None:
        return str(gpu_index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if not 0 <= gpu_index < len(entries):
        raise RuntimeError(f"GPU {gpu_index} is not among CUDA_VISIBLE_DEVICES={visible!r}")
    return entries[gpu_index]


def is_secret_name(name: str) -> bool:
    """Environment variable names that may hold credentials never reach a worker."""
    upper = name.upper()
    return any(m in upper for m in _SECRET_MARKERS) or upper.startswith(_PROVIDER_PREFIXES)


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An allow-listed environment with no secrets (extra entries are filtered the same way)."""
    env = {k: v for k, v in os.environ.items() if k in _ALLOWED}
    env.update(extra or {})
    paths = [str(PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return {k: v for k, v in env.items() if not is_secret_name(k)}


def worker_env_entries(workdir: Path, extra_env: dict[str, str] | None, device: str,
                       gpu_index: int | None) -> dict[str, str]:
    """The entries a worker's environment gets on top of the allow-list (`scrubbed_env` filters them too): its home,
    temporary folder and caches in its own folder (its build folder where the caller names one), so that what it
    writes goes where it may write and is removed with it, and the GPU it may see (none on the CPU)."""
    env_extra = dict(extra_env or {})
    env_extra.update(HOME=str(workdir), TMPDIR=str(workdir), TRITON_CACHE_DIR=str(workdir / "triton-cache"))
    # issue 56: Helion's generated code and its caches live in torch's code cache, here the worker's own; its
    # autotuner (minutes of trial compiles, in subprocesses) is off: a kernel without a config fails, saying so
    env_extra.update(TORCHINDUCTOR_CACHE_DIR=str(workdir / "inductor-cache"), HELION_DISALLOW_AUTOTUNING="1")
    env_extra.setdefault("TORCH_EXTENSIONS_DIR", str(workdir / "torch-extensions"))
    if device == "cpu":
        env_extra["TRITON_INTERPRET"] = "1"
        env_extra["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu_index is not None:
        env_extra["CUDA_VISIBLE_DEVICES"] = visible_device_entry(gpu_index)
    return env_extra
