"""Plain PyTorch: no kernel of the candidate's own. Every source is one; the registry names it
only when no other language is detected: `pytorch`."""

from __future__ import annotations

from warpforge.languages.base import BaseLanguage, Prompt, Rules


class PyTorch(BaseLanguage):
    name = "pytorch"
    title = "plain PyTorch"
    precedence = 0
    rules = Rules(imports=frozenset({"torch"}))
    # ATen's and Inductor's own kernels: a profile counts them as PyTorch's (a "PyTorch rewrite")
    profile_pattern = r"at::|native::|elementwise|reduce_kernel|vectorized|triton_(poi|red|per|tem|mm)|Memcpy|Memset"
    prompt = Prompt(offer={"cuda": "plain PyTorch", "cpu": "plain PyTorch"})
    example = "examples/gpu/relu__torch.py"

    def detect(self, source: str) -> bool:
        return True

    def fingerprint(self) -> str:
        try:
            import torch

            return f"torch {torch.__version__}"
        except ImportError:
            return ""

    def instructions(self, device: str) -> str:
        return ("plain PyTorch, no custom kernels: win with a better algorithm, fewer passes over memory, fused or "
                "cheaper ops and better layouts.")


LANGUAGE = PyTorch()
