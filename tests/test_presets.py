"""Size presets for tasks that bring none (evaluate/presets.py), and a KernelBench-sized task
evaluated on the CPU through them."""

from __future__ import annotations

import types

import torch
import torch.nn as nn

from warpforge.evaluate.presets import CPU_BYTES, fit_globals

FIXTURE = "tests/fixtures/tasks/kernelbench_sized.py"


def task_module(**globals_: object) -> types.ModuleType:
    module = types.ModuleType("task")
    vars(module).update(globals_)
    return module


def attention_task() -> types.ModuleType:
    module = task_module(batch=64, seq=2048, embed_dim=768, num_heads=12)

    class Model(nn.Module):
        def __init__(self, embed_dim: int, num_heads: int) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x)[0]

    module.Model = Model  # type: ignore[attr-defined]
    module.get_inputs = lambda: [torch.rand(module.batch, module.seq, module.embed_dim)]  # type: ignore[attr-defined]
    module.get_init_inputs = lambda: [module.embed_dim, module.num_heads]  # type: ignore[attr-defined]
    return module


def test_large_globals_are_divided_together_and_small_ones_kept() -> None:
    from warpforge.task import import_task_module, load_task

    module = import_task_module(load_task(FIXTURE))
    scaled, note = fit_globals(module, CPU_BYTES)
    assert scaled == {"batch_size": 512, "in_features": 512, "out_features": 128}  # 16384/32, 4096/32
    assert module.num_heads == 8 and module.batch_size == 512  # applied to the module; the small int kept
    assert "divided by 32" in note and "1536.0 -> 1.50 MiB" in note  # 1 GiB in, 256 MiB weights, 256 MiB out


def test_the_factor_stops_where_the_task_would_no_longer_build() -> None:
    # 768 / 128 = 6 is not divisible by 12 heads: the attention layer refuses it, so 64 is the most
    module = attention_task()
    scaled, note = fit_globals(module, 1 << 10)
    assert scaled["embed_dim"] == 12 and scaled["seq"] == 32 and module.num_heads == 12
    assert "divided by 64" in note


def test_a_task_that_fits_or_cannot_be_measured_keeps_its_sizes() -> None:
    assert fit_globals(attention_task(), 1 << 40) == ({}, "")
    module = attention_task()
    module.get_init_inputs = lambda: [int(torch.randint(700, 800, (1,)).item()), 12]  # .item() on the meta device
    scaled, note = fit_globals(module, CPU_BYTES)
    assert scaled == {} and module.embed_dim == 768 and "could not be measured" in note


def test_a_kernelbench_sized_task_reads_one_against_itself_on_the_cpu() -> None:
    from warpforge import EvalConfig, evaluate, load_task
    from warpforge.calibrate import as_candidate

    task = load_task(FIXTURE)
    result = evaluate(task, as_candidate(task), EvalConfig.of(device="cpu", warmup_ms=5.0, rep_ms=20.0, min_reps=5,
                                                           timing_bound=100.0))
    assert result.status == "correct", result.reason
    assert any("divided by 32" in w for w in result.warnings), result.warnings


def test_a_shape_held_in_a_tuple_is_scaled_with_the_ints_it_was_made_from() -> None:
    # KernelBench writes `bias_shape = (out_channels, 1, 1)`: left alone it no longer matches
    module = task_module(batch=256, channels=512, size=128, bias_shape=(512, 1, 1), kernel=3)

    class Model(nn.Module):
        def __init__(self, channels: int, kernel: int, bias_shape: tuple[int, ...]) -> None:
            super().__init__()
            self.conv = nn.Conv2d(channels, channels, kernel, padding=1)
            self.bias = nn.Parameter(torch.zeros(bias_shape))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x) + self.bias

    module.Model = Model  # type: ignore[attr-defined]
    module.get_inputs = lambda: [torch.rand(module.batch, module.channels, module.size, module.size)]  # type: ignore[attr-defined]
    module.get_init_inputs = lambda: [module.channels, module.kernel, module.bias_shape]  # type: ignore[attr-defined]
    scaled, note = fit_globals(module, CPU_BYTES)
    factor = 512 // scaled["channels"]
    assert factor > 1 and scaled["bias_shape"] == (512 // factor, 1, 1) and module.kernel == 3, note


def test_outputs_count_too_a_tall_skinny_product_is_scaled_by_its_output() -> None:
    # KernelBench's level1/9: two 8 MiB inputs, one 4 GiB output (M x M); 8 float64 copies of it
    # ran a 23 GB machine out of memory when only the inputs were counted
    module = task_module(M=32768, N=32)

    class Model(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    module.Model = Model  # type: ignore[attr-defined]
    module.get_inputs = lambda: [torch.rand(module.M, module.N), torch.rand(module.N, module.M)]  # type: ignore[attr-defined]
    module.get_init_inputs = lambda: []  # type: ignore[attr-defined]
    scaled, note = fit_globals(module, CPU_BYTES)
    # at M = 1024 (factor 32) the output alone fills the 4 MiB budget: 64 is the smallest factor that fits
    assert scaled["M"] == 512 and "divided by 64" in note, note
