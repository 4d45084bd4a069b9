"""Prompt rendering: one snapshot per strategy for level1/softmax, the context each strategy
requires, the character budget, and how contrastive variants are picked.

Snapshots live in tests/snapshots/prompts/<strategy>.txt. After changing a template on purpose,
regenerate them with `WARPFORGE_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_prompts.py` and
review the diff like code.
"""

import dataclasses
import difflib
import os
import random
from pathlib import Path

import jinja2
import pytest

from warpforge.errors import ConfigError
from warpforge.propose import prompts
from warpforge.propose.parse import parse_reply, parse_review
from warpforge.propose.prompts import (PROMPT_BUDGET, STRATEGIES, PromptContext, Variant, pick_contrastive, render,
                                       truncate)
from warpforge.task import load_task

SNAPSHOTS = Path(__file__).parent / "snapshots" / "prompts"
CUT = "characters cut to fit the prompt"

TORCH_TWO_PASS = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)
'''

TRITON_ROW = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        softmax_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=block, num_warps=16)
        return y
'''

CUDA_ONLINE = r'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = """
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    const float* xr = x + (long)blockIdx.x * cols;
    float* yr = y + (long)blockIdx.x * cols;
    __shared__ float red[32];
    float m = -INFINITY, s = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = xr[i], mn = fmaxf(m, v);
        s = s * expf(m - mn) + expf(v - mn);
        m = mn;
    }
    // ... block reduction of (m, s) into red[0], red[1] ...
    for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = expf(xr[i] - red[0]) / red[1];
}

torch::Tensor softmax(torch::Tensor x) {
    auto y = torch::empty_like(x);
    softmax_rows<<<x.size(0), 1024, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    return y;
}
"""

ext = load_inline(name="softmax_online", cpp_sources="torch::Tensor softmax(torch::Tensor x);",
                  cuda_sources=CUDA, functions=["softmax"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.softmax(x.contiguous())
'''

COMPILE_LOG = """softmax_online/cuda.cu(17): error: identifier "INFINITY" is undefined
      float m = -INFINITY, s = 0.f;
                 ^
1 error detected in the compilation of "softmax_online/cuda.cu"."""

RESOURCES = """ptxas info    : Compiling entry function 'softmax_rows' for 'sm_90'
ptxas info    : Used 38 registers, 0 bytes spill stores, 0 bytes spill loads, 128 bytes smem"""

PROFILE = ('{"kind": "custom_kernel", "custom_time_fraction": 1.0, "custom": [{"name": "softmax_rows", '
           '"calls": 1, "cuda_ms": 0.402}], "library": [], "pytorch": []}')

LAYERNORM_TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_rows(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n_cols + cols, d * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        y = torch.empty_like(x)
        layernorm_rows[(x.shape[0],)](x, self.norm.weight, self.norm.bias, y, x.shape[1], self.norm.eps,
                                      BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''

CACHING = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        key = (x.shape, float(x[0, 0]))
        if key not in self.seen:
            self.seen[key] = torch.softmax(x, dim=-1)
        return self.seen[key].clone()
'''

SLOW = Variant(TORCH_TWO_PASS, "correct", speedup=0.41, candidate_id=2)
MIDDLE = Variant(TRITON_ROW, "correct", speedup=0.66, candidate_id=5,
                 analysis="## Analysis\nOne program per row keeps the row in registers.\n## Plan\nTriton, one pass.")
FAST = Variant(CUDA_ONLINE.replace("-INFINITY", "-__int_as_float(0x7f800000)"), "correct", speedup=1.12,
               candidate_id=9)
BROKEN = Variant(CUDA_ONLINE, "compile_error", reason="the CUDA source did not compile: identifier \"INFINITY\" is "
                 "undefined", candidate_id=7)


def context(**changes) -> PromptContext:
    task = load_task("level1/softmax")
    base = PromptContext(task_name=task.name, task_source=task.source, device="cuda", gpu="NVIDIA H100 80GB HBM3")
    return dataclasses.replace(base, **changes)


CONTEXTS = {
    "translate": context(),
    "repair": context(current=BROKEN, compile_log=COMPILE_LOG),
    "optimise": context(current=MIDDLE, resources=RESOURCES, profile=PROFILE),
    "contrastive": context(variants=(SLOW, MIDDLE, FAST)),
    "crossover": context(parents=(MIDDLE, FAST)),
    "retrieval": context(current=MIDDLE, stepping_stones=(
        Variant(LAYERNORM_TRITON, "correct", speedup=1.31, task="level1/layernorm", candidate_id=41),)),
    "review": context(current=Variant(CACHING, "correct", speedup=41.7, candidate_id=12)),
}


def as_text(messages: list[dict[str, str]]) -> str:
    return "".join(f"=== {m['role']} ===\n{m['content']}" for m in messages)


def assert_matches_snapshot(name: str, text: str) -> None:
    """Compare with tests/snapshots/prompts/<name>.txt; rewrite it when WARPFORGE_UPDATE_SNAPSHOTS=1."""
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("WARPFORGE_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path}: run WARPFORGE_UPDATE_SNAPSHOTS=1 python -m pytest {__file__}")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "rendered"))
        pytest.fail(f"prompt {name!r} differs from its snapshot (regenerate with WARPFORGE_UPDATE_SNAPSHOTS=1 "
                    f"if the change is intended):\n{diff[:6000]}")


# -- snapshots ----------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", STRATEGIES)
def test_prompt_snapshot(strategy):
    messages = render(strategy, CONTEXTS[strategy])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert sum(len(m["content"]) for m in messages) <= PROMPT_BUDGET
    assert CUT not in as_text(messages)
    assert_matches_snapshot(strategy, as_text(messages))


def test_every_strategy_has_a_template_and_a_snapshot():
    names = {p.name for p in prompts.TEMPLATE_DIR.glob("*.j2")}
    assert {f"{s}.j2" for s in STRATEGIES} | {"system.j2"} <= names
    assert {p.stem for p in SNAPSHOTS.glob("*.txt")} == set(STRATEGIES)


def test_templates_are_strict():
    env = prompts._environment()
    assert env.undefined is jinja2.StrictUndefined and not env.autoescape


def test_one_system_prompt_for_the_authors():
    systems = {render(s, c)[0]["content"] for s, c in CONTEXTS.items() if s != "review"}
    assert len(systems) == 1
    assert "ModelNew" in render("review", CONTEXTS["review"])[0]["content"]


def test_what_each_prompt_shows():
    contrastive = render("contrastive", CONTEXTS["contrastive"])[1]["content"]
    assert contrastive.index("0.41x") < contrastive.index("0.66x") < contrastive.index("1.12x")
    assert "`## Analysis`" in contrastive and "`## Plan`" in contrastive
    repair = render("repair", CONTEXTS["repair"])[1]["content"]
    assert 'identifier "INFINITY" is undefined' in repair and "<<<<<<< SEARCH" in repair
    optimise = render("optimise", CONTEXTS["optimise"])[1]["content"]
    assert "38 registers" in optimise and "custom_time_fraction" in optimise and "> One program per row" in optimise
    retrieval = render("retrieval", CONTEXTS["retrieval"])[1]["content"]
    assert "level1/layernorm" in retrieval and "1.31x" in retrieval
    review = render("review", CONTEXTS["review"])[1]["content"]
    assert "41.70x" in review and "VERDICT: plausible" in review and "self.seen" in review


# -- device and language ------------------------------------------------------------------------

def test_hopper_notes_only_on_hopper():
    h100 = render("translate", context())[0]["content"]
    assert "sm_90a" in h100 and "132 SMs" in h100 and "3.35 TB/s" in h100
    h200 = render("translate", context(gpu="NVIDIA H200"))[0]["content"]
    assert "sm_90a" in h200 and "4.80 TB/s" in h200
    unknown = render("translate", context(gpu=""))[0]["content"]
    assert "sm_90a" not in unknown and "not known yet" in unknown
    cpu = render("translate", context(device="cpu", gpu="", language="cpp"))[0]["content"]
    assert "CPU" in cpu and "at::parallel_for" in cpu and "sm_90" not in cpu and "3xTF32" not in cpu
    assert 'WARPFORGE["sizes"]["cpu"]' in cpu


@pytest.mark.parametrize("language,expect", [("cuda", "getCurrentCUDAStream"), ("nvrtc", "RawModule"),
                                             ("triton", "@triton.jit"), ("pytorch", "no custom kernels")])
def test_language_line(language, expect):
    assert expect in render("translate", context(language=language))[0]["content"]


# -- required context ---------------------------------------------------------------------------

@pytest.mark.parametrize("strategy,changes,words", [
    ("fuse", {}, "unknown prompt strategy"),
    ("translate", {"device": "tpu"}, "unknown device"),
    ("translate", {"language": "rust"}, "unknown kernel language"),
    ("translate", {"device": "cpu", "language": "cuda"}, "need a CUDA device"),
    ("translate", {"task_source": " "}, "reference source"),
    ("repair", {}, "current candidate"),
    ("optimise", {"current": Variant("", "correct")}, "current candidate"),
    ("review", {}, "current candidate"),
    ("contrastive", {"variants": (SLOW,)}, "at least 2 scored variants"),
    ("crossover", {"parents": (FAST,)}, "at least 2 parents"),
    ("retrieval", {}, "stepping stone"),
])
def test_missing_context_is_a_config_error(strategy, changes, words):
    with pytest.raises(ConfigError) as error:
        render(strategy, context(**changes))
    message = str(error.value)
    assert words in message and "\n" not in message and message.count(". ") == 0


def test_retrieval_without_a_current_best():
    user = render("retrieval", dataclasses.replace(CONTEXTS["retrieval"], current=None))[1]["content"]
    assert "best program for this task so far" not in user and "level1/layernorm" in user


# -- the character budget -----------------------------------------------------------------------

def test_truncate_keeps_head_and_tail_within_the_limit():
    text = "".join(f"line {i}\n" for i in range(10_000))
    cut = truncate(text, 2_000)
    assert len(cut) <= 2_000 and CUT in cut
    assert cut.startswith("line 0\n") and cut.endswith("line 9999\n")
    assert truncate("short", 10) == "short"


def test_huge_sources_are_cut_with_a_marker():
    huge_task = context().task_source + "\n" + "# padding line of a very long reference program\n" * 4_000
    huge = TRITON_ROW.replace("import triton\n", "import triton\n" + "# a long comment line in the kernel\n" * 3_000)
    ctx = context(task_source=huge_task, variants=(SLOW, Variant(huge, "correct", speedup=0.7), FAST))
    messages = render("contrastive", ctx)
    text = as_text(messages)
    assert sum(len(m["content"]) for m in messages) <= PROMPT_BUDGET
    assert text.count(CUT) == 2
    assert TORCH_TWO_PASS.strip() in text and "num_warps=16" in text  # short sources whole, tails kept


def test_huge_logs_are_capped():
    ctx = context(current=BROKEN, compile_log="error: something\n" * 50_000)
    user = render("repair", ctx)[1]["content"]
    assert CUT in user and len(user) < 20_000 and CUDA_ONLINE.strip() in user


# -- picking contrastive variants ---------------------------------------------------------------

def scored(n_correct: int, n_failed: int = 0) -> list[Variant]:
    correct = [Variant(f"# v{i}", "correct", speedup=0.5 + 0.5 * i, candidate_id=i) for i in range(n_correct)]
    failed = [Variant(f"# f{i}", "incorrect", reason="wrong", candidate_id=100 + i) for i in range(n_failed)]
    return failed + correct[::-1]  # arrival order must not matter


def test_pick_contrastive_takes_one_per_bucket_slowest_first():
    for seed in range(20):
        picked = pick_contrastive(scored(9, 3), 3, random.Random(seed))
        speedups = [v.speedup for v in picked]
        assert all(s is not None for s in speedups) and len(picked) == 3
        assert speedups[0] <= 1.5 < speedups[1] <= 3.0 < speedups[2]  # terciles of 0.5 .. 4.5


def test_pick_contrastive_is_deterministic_per_seed_and_varies_across_seeds():
    pool = scored(12)
    assert pick_contrastive(pool, 3, random.Random(7)) == pick_contrastive(pool, 3, random.Random(7))
    assert len({pick_contrastive(pool, 3, random.Random(s)) for s in range(10)}) > 1


def test_pick_contrastive_uses_failures_only_when_fewer_than_two_correct():
    picked = pick_contrastive(scored(1, 3), 3, random.Random(0))
    assert [v.status for v in picked] == ["incorrect", "correct"]
    assert all(v.status == "correct" for v in pick_contrastive(scored(2, 3), 4, random.Random(0)))
    assert len(pick_contrastive(scored(2, 3), 4, random.Random(0))) == 2
    assert [v.status for v in pick_contrastive(scored(0, 2), 3, random.Random(0))] == ["incorrect", "incorrect"]


def test_pick_contrastive_refuses_impossible_requests():
    with pytest.raises(ConfigError):
        pick_contrastive(scored(5), 1, random.Random(0))
    with pytest.raises(ConfigError):
        pick_contrastive(scored(1), 2, random.Random(0))
    with pytest.raises(ConfigError):
        pick_contrastive([Variant("", "correct", speedup=1.0), Variant(" ", "correct", speedup=2.0)], 2,
                         random.Random(0))


# -- prompt and parser agree --------------------------------------------------------------------

def test_replies_in_the_requested_shapes_parse():
    contrastive = ("## Analysis\nVariant 3 makes one pass over memory.\n\n## Plan\nfloat4 loads.\n\n```python\n"
                   + TORCH_TWO_PASS + "```\n")
    assert parse_reply(contrastive, require_analysis=True).source == TORCH_TWO_PASS
    optimise = ("## Analysis\nbound by one row per program\n## Plan\nmore warps\n<<<<<<< SEARCH\n"
                "        softmax_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=block, num_warps=16)\n=======\n"
                "        softmax_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=block, num_warps=32)\n>>>>>>> REPLACE\n")
    parsed = parse_reply(optimise, previous=MIDDLE.source)
    assert parsed.edits_applied == 1 and "num_warps=32" in (parsed.source or "")
    assert parse_review("VERDICT: suspicious\nself.seen replays outputs.")[0] == "suspicious"
