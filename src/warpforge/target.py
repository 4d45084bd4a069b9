"""A target: the kind of device a kernel is built for and its architecture, as one small value.

`Target.parse("sm_90a")`, `Target.parse("cpu")`; `str(target)` gives the same text back. It
reaches the build (`arch_list`, TORCH_CUDA_ARCH_LIST), the compile cache key, the baselines'
cache and, through the hardware fingerprint, every recorded result (`hardware["target"]`). It
does not detect what a machine has (evaluate/hardware.py does) and decides nothing on its own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warpforge.errors import ConfigError

KINDS = ("cpu", "cuda", "rocm")
# TORCH_CUDA_ARCH_LIST's form of one architecture: "9.0", "9.0a", "10.0a", "12.0f"
_ARCH_ENTRY = re.compile(r"(\d+)\.(\d)([af]?)")
_SM = re.compile(r"sm_(\d+)(\d)([af]?)")
_GFX = re.compile(r"gfx[0-9a-f]{3,4}")


@dataclass(frozen=True)
class Target:
    kind: str
    """cpu | cuda | rocm"""
    arch: str = ""
    """sm_90a, gfx942; "" when any of its kind will do (its toolchain then builds for the device it
    sees). A TORCH_CUDA_ARCH_LIST that names several architectures is kept as written ("8.0;9.0")."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown target kind {self.kind!r}: use one of {', '.join(KINDS)}")

    def __str__(self) -> str:
        return self.arch or self.kind

    @classmethod
    def parse(cls, text: str) -> Target:
        """cpu, cuda, rocm, sm_90a (CUDA), gfx942 (ROCm), or a TORCH_CUDA_ARCH_LIST value (9.0a)."""
        text = text.strip()
        if text in KINDS:
            return cls(text)
        if _SM.fullmatch(text):
            return cls("cuda", text)
        if _GFX.fullmatch(text):
            return cls("rocm", text)
        if text[:1].isdigit():
            return cls.from_arch_list(text)
        raise ConfigError(f"unknown target {text!r}: use cpu, cuda, an architecture such as sm_90a or gfx942")

    @classmethod
    def from_arch_list(cls, text: str) -> Target:
        """The CUDA target a TORCH_CUDA_ARCH_LIST value names ("" = any CUDA device)."""
        text = text.strip()
        entry = _ARCH_ENTRY.fullmatch(text)
        if entry:
            return cls("cuda", f"sm_{entry[1]}{entry[2]}{entry[3]}")
        return cls("cuda", text)

    @classmethod
    def from_capability(cls, major: int, minor: int) -> Target:
        """A CUDA device's target; from Hopper (9.x) on, the architecture-specific variant ("a"),
        which wgmma, TMA and clusters need, as the compile pool has always built for it."""
        return cls("cuda", f"sm_{major}{minor}{'a' if major >= 9 else ''}")

    @classmethod
    def from_hardware(cls, hardware: Mapping[str, Any]) -> Target | None:
        """The target of a recorded hardware fingerprint: its `target`, or for results recorded
        before targets were (no such key) the one its device and compute capability give; None
        when it names none that parses (an archive may come from elsewhere)."""
        if hardware.get("target"):
            try:
                return cls.parse(str(hardware["target"]))
            except ConfigError:
                return None
        if hardware.get("device") == "cpu":
            return cls("cpu")
        capability = str(hardware.get("capability") or "")
        if hardware.get("device") == "cuda" and re.fullmatch(r"\d+\.\d+", capability):
            major, minor = capability.split(".")
            return cls.from_capability(int(major), int(minor))
        return cls("cuda") if hardware.get("device") == "cuda" else None

    @property
    def arch_list(self) -> str:
        """TORCH_CUDA_ARCH_LIST for a CUDA target ("9.0a"), "" for any other or an unnamed arch."""
        if self.kind != "cuda":
            return ""
        sm = _SM.fullmatch(self.arch)
        return f"{sm[1]}.{sm[2]}{sm[3]}" if sm else self.arch


CPU = Target("cpu")


def build_target(device: str) -> Target:
    """What this process builds kernels for on `device` (cpu | cuda): the CPU, or CUDA with the
    architecture TORCH_CUDA_ARCH_LIST names; when it is unset, any (torch then builds for the GPU it
    sees, and the compile pool sets it: executor/)."""
    return CPU if device == "cpu" else Target.from_arch_list(os.environ.get("TORCH_CUDA_ARCH_LIST", ""))
