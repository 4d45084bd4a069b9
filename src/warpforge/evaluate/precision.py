"""The float32 precision settings the reference's and the candidate's processes start with.

By default both run under PyTorch's own defaults (cuDNN convolutions in TF32, fp32 matmuls in true
fp32), as the user's program does; `strict_fp32` turns TF32 off in both, for users who need true
fp32 everywhere. Each process applies them before any task or candidate code runs. What a candidate
changes afterwards changes only its own process, and shows in its error against float64; nothing
here refuses or checks a candidate's flags.
"""

from __future__ import annotations

import torch


def apply(strict_fp32: bool, allow_tf32: bool = False) -> None:
    """Set this process's fp32 precision: strict (TF32 off for matmuls and cuDNN), the TF32 opt-in
    (on for both; the reference process only), or PyTorch's defaults left as they are."""
    if strict_fp32:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    elif allow_tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

