"""A fingerprint of the machine a result was measured on (GPU/CPU, driver, CUDA, versions, and
its target: `cpu`, `sm_90a`)."""

from __future__ import annotations

import platform
import subprocess
from typing import Any

from warpforge.target import CPU, Target


def fingerprint(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "device": device,
        "cpu": _cpu_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    try:
        from importlib.metadata import version

        info["triton"] = version("triton")
    except Exception:
        info["triton"] = None
    info["target"] = str(CPU if device == "cpu" else Target("cuda"))
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(gpu=props.name, sm_count=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}", gpu_memory_gb=round(props.total_memory / 2**30, 1),
                    driver=_driver_version(), target=str(Target.from_capability(props.major, props.minor)))
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def visible_gpu_arch() -> str:
    """TORCH_CUDA_ARCH_LIST for the first GPU nvidia-smi sees ("9.0a" on Hopper), without starting
    CUDA in this process; "" when there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        major, _, minor = out.stdout.strip().splitlines()[0].strip().partition(".")
        return f"{int(major)}.{int(minor or 0)}{'a' if int(major) >= 9 else ''}" if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return ""


def arch_string(device: str) -> str:
    """"9.0" style compute capability for TORCH_CUDA_ARCH_LIST, or "" on CPU."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        return ""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}{'a' if major >= 9 else ''}"
