"""`warpforge model profile` and `model extract` end to end on a tiny Llama (transformers'
LlamaConfig: 2 layers, hidden 64, 4 heads, 2 KV heads, intermediate 128, vocabulary 128) and on a
KernelBench-style Python file: the profile ranks the seams and writes profile.json and its page,
extract writes checked tasks and seams.json, and every extracted task passes A/A."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from warpforge import EvalConfig, load_task
from warpforge.calibrate import calibrate
from warpforge.cli import main

# the whole-model chain (each module builds a tiny Llama and evaluates its seams, 20-90 s): the slow
# lane, which CI runs after the default lane (.ci/run); `bash scripts/test.sh -m slow tests/test_model_*.py`
pytestmark = pytest.mark.slow

pytest.importorskip("transformers")

SPEC = """
name = "tiny-llama"

[model]
source = "transformers:LlamaForCausalLM"
config = { hidden_size = 64, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, intermediate_size = 128, vocab_size = 128 }

[[inputs]]
name = "input_ids"
dtype = "int64"
shape = ["B", "S"]
range = [0, 128]

[regimes]
prefill = { B = 2, S = 32 }
decode = { B = 1, S = 48 }
cpu = { B = 1, S = 8 }
"""

# KernelBench level-3 style: Model, get_inputs, get_init_inputs, and classes of its own
BLOCK = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


BATCH = 4
SEQ = 32
DIM = 64
EPS = 1e-5


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = EPS

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, 2 * dim)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Model(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.out = RMSNorm(dim)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, 2]
'''

AA = {"device": "cpu", "trials": 3, "bench": False, "spare_workers": 0, "timeout_s": 180.0}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Profile the tiny Llama, then extract three seams from that profile, through the command line."""
    root = tmp_path_factory.mktemp("tiny_llama")
    spec = root / "tiny_llama.toml"
    spec.write_text(SPEC)
    out = root / "out"
    assert main(["model", "profile", str(spec), "--out", str(out), "--device", "cpu", "--iters", "2"]) == 0
    assert main(["model", "extract", str(spec), "--out", str(out), "--profile", str(out / "profile.json"),
                 "--seam", "LlamaAttention", "--seam", "LlamaRMSNorm", "--seam", "LlamaMLP"]) == 0
    return {"spec": spec, "out": out, "profile": json.loads((out / "profile.json").read_text()),
            "seams": json.loads((out / "seams.json").read_text())}


def test_profile_ranks_the_llama_seams_and_writes_json_and_a_page(llama: dict[str, Any]) -> None:
    profile = llama["profile"]
    seams = {s["id"]: s for s in profile["seams"]}
    # leaf modules by class, deduplicated: 2 x 2 decoder norms and the final norm are one seam
    assert len(seams["LlamaRMSNorm"]["paths"]) == 5 and seams["LlamaRMSNorm"]["route"] == "llm"
    assert sorted(seams["LlamaMLP"]["paths"]) == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert len(seams["LlamaAttention"]["paths"]) == 2 and "LlamaRotaryEmbedding" in seams and "Embedding" in seams
    # every nn.Linear is a GEMM seam for the dispatcher, and says which seam holds it
    gemms = [s for s in profile["seams"] if s["route"] == "gemm"]
    assert gemms and all(s["class"] == "torch.nn.modules.linear.Linear" for s in gemms)
    assert {s["inside"] for s in gemms} == {"LlamaAttention", "LlamaMLP", None}  # lm_head is in none
    assert {g["K"] for s in gemms for g in s["gemm"].values()} == {64, 128}
    scores = [s["score"] for s in profile["seams"]]
    assert scores == sorted(scores, reverse=True)
    for s in profile["seams"]:
        assert set(s["regimes"]) == {"prefill", "decode"} and 0.0 <= s["bound"] <= 1.0
    assert seams["LlamaRMSNorm"]["regimes"]["decode"]["inputs"][0]["shape"] == [1, 48, 64]
    assert [r["name"] for r in profile["regimes"]] == ["prefill", "decode"] and profile["export"]["ok"]
    assert profile["peaks"] is None and "share" in profile["ranking"]  # the CPU: ranked by time share
    assert seams["LlamaMLP"]["ops"].get("linear.default") == 3  # the exported graph's ops in one instance
    page = (llama["out"] / "profile.html").read_text()
    assert "<svg" in page and "LlamaRMSNorm" in page and "at most" in page and "<script" not in page


def test_extract_writes_tasks_that_rebuild_the_model_s_modules(llama: dict[str, Any]) -> None:
    out, seams = llama["out"], llama["seams"]
    rows = {r["seam"]: r for r in seams["tasks"]}
    assert set(rows) == {"LlamaAttention", "LlamaRMSNorm", "LlamaMLP"} and not seams["skipped"]
    for row in rows.values():
        task = load_task(out / row["task"])  # a KernelBench-format task with the regimes as size presets
        assert {"cpu", "gpu", "prefill", "decode"} <= set(task.metadata["sizes"])
        assert task.metadata["flops"] == "FLOPS" and task.metadata["bytes"] == "BYTES"
        assert row["checked"]["cpu"].startswith("same output") and row["checked"]["decode"].startswith("same output")
        assert "transformers" not in "".join(line for line in task.source.splitlines() if "import" in line)
    norm = rows["LlamaRMSNorm"]
    assert norm["inputs"] == ["hidden_states"] and len(norm["paths"]) == 5 and norm["returns"] == ["out"]
    sizes = load_task(out / norm["task"]).metadata["sizes"]
    assert sizes["cpu"]["SHAPES"] == [[1, 8, 64]] and sizes["gpu"] == sizes["prefill"]
    mean, std, low, high = sizes["prefill"]["STATS"][0]
    assert std < 0.5  # drawn like the activations (embeddings of std 0.02 and their sums), not N(0, 1)
    attention = rows["LlamaAttention"]  # RoPE's (cos, sin) tuple is two inputs; (output, None) returns one
    assert attention["inputs"][0] == "hidden_states" and "position_embeddings_0" in attention["inputs"]
    assert attention["returns"] == ["out[0]"]
    source = (out / attention["task"]).read_text()
    assert "def sdpa_attention_forward" in source and "ALL_ATTENTION_FUNCTIONS = _AttentionFunctions()" in source
    assert json.loads((out / "gemm_shapes.json").read_text()) == []  # float32: the dispatcher serves fp16/bf16
    assert {g["seam"] for g in seams["gemm"]} == {s["id"] for s in llama["profile"]["seams"] if s["route"] == "gemm"}


def test_extract_takes_the_top_seams_in_rank_order(llama: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "top"
    assert main(["model", "extract", str(llama["spec"]), "--out", str(out), "--top", "2",
                 "--profile", str(llama["out"] / "profile.json")]) == 0
    ranked = [s["id"] for s in llama["profile"]["seams"] if s["route"] == "llm"]
    assert [r["seam"] for r in json.loads((out / "seams.json").read_text())["tasks"]] == ranked[:2]
    assert main(["model", "extract", str(llama["spec"]), "--out", str(out), "--seam", "Nope",
                 "--profile", str(llama["out"] / "profile.json")]) == 2


def test_every_extracted_task_passes_aa(llama: dict[str, Any]) -> None:
    tasks = [load_task(llama["out"] / r["task"]) for r in llama["seams"]["tasks"]]
    rows = calibrate(tasks, EvalConfig.of(**AA))  # type: ignore[arg-type]
    assert [r["status"] for r in rows] == ["correct"] * len(tasks), [(r["task"], r["reason"]) for r in rows]


@pytest.mark.slow
def test_every_llm_seam_of_the_llama_is_extracted_and_passes_timed_aa(tmp_path: Path) -> None:
    spec = tmp_path / "tiny_llama.toml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    assert main(["model", "extract", str(spec), "--out", str(out), "--top", "9", "--device", "cpu", "--iters", "2"]) == 0
    seams = json.loads((out / "seams.json").read_text())
    assert {r["seam"] for r in seams["tasks"]} == {"LlamaAttention", "LlamaMLP", "LlamaRMSNorm",
                                                  "LlamaRotaryEmbedding", "Embedding"}
    rows = calibrate([load_task(out / r["task"]) for r in seams["tasks"]], EvalConfig(device="cpu", spare_workers=0))
    assert [r["status"] for r in rows] == ["correct"] * 5, [(r["task"], r["reason"]) for r in rows]


def test_a_kernelbench_style_file_is_a_spec_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "block.py").write_text(BLOCK)
    spec = tmp_path / "block.toml"
    spec.write_text('name = "block"\n[model]\nsource = "block.py"\n[regimes]\nprefill = { BATCH = 4, SEQ = 32 }\n'
                    "decode = { BATCH = 8, SEQ = 1 }\ncpu = { BATCH = 2, SEQ = 8 }\n")
    out = tmp_path / "out"
    assert main(["model", "extract", str(spec), "--out", str(out), "--top", "2", "--device", "cpu",
                 "--iters", "2", "--no-export"]) == 0
    seams = json.loads((out / "seams.json").read_text())
    assert sorted(r["seam"] for r in seams["tasks"]) == ["RMSNorm", "SwiGLU"]
    norm = next(r for r in seams["tasks"] if r["seam"] == "RMSNorm")
    assert sorted(norm["paths"]) == ["blocks.0.norm", "blocks.1.norm", "out"]
    source = (out / norm["task"]).read_text()
    assert "def rms_norm(" in source and "self.eps = 1e-05" in source  # the file's function and constant, copied
    task = load_task(out / norm["task"])
    assert task.metadata["sizes"]["decode"]["SHAPES"] == [[8, 1, 64]]
    rows = calibrate([task], EvalConfig.of(**AA))  # type: ignore[arg-type]  # SwiGLU: checked by extract only
    assert [r["status"] for r in rows] == ["correct"], [(r["task"], r["reason"]) for r in rows]
