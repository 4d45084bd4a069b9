"""GEMM shape sets: the CUDA-L2 grid, LLM projections, user files and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warpforge.errors import UsageError
from warpforge.gemm import GemmShape, load_shapes, shape_set
from warpforge.gemm.shapes import CUDAL2_DIMS, LLM_M, llm_projections


def test_cudal2_is_the_full_thousand_shape_grid() -> None:
    shapes = shape_set("cudal2")
    assert len(shapes) == 1000 == len({s.key for s in shapes})
    assert {s.M for s in shapes} == {s.N for s in shapes} == {s.K for s in shapes} == set(CUDAL2_DIMS)
    assert shape_set("cudal2", "bfloat16")[0].dtype == "bfloat16"


def test_llm_set_covers_decode_and_prefill_and_unaligned_dims() -> None:
    shapes = shape_set("llm")
    assert len(shapes) == len({s.key for s in shapes})  # no duplicates across models
    assert {s.M for s in shapes} == set(LLM_M)
    assert [s for s in shapes if not s.aligned] == [s for s in shapes if 50257 in (s.N, s.K)]  # GPT-2 vocab only
    assert GemmShape(1, 14336 * 2, 4096).key in {s.key for s in shapes}  # Llama-3.1-8B gate+up at decode
    llama = llm_projections("llama-3.1-8b")
    assert llama["qkv_proj"] == (4096 + 2 * 1024, 4096) and llama["down_proj"] == (4096, 14336)
    assert llm_projections("gpt2")["gate_up_proj"] == (3072, 768)  # GPT-2's MLP is not gated


def test_user_lists_from_csv_and_json(tmp_path: Path) -> None:
    (tmp_path / "s.csv").write_text("M, N, K, dtype\n128,4096,4096,bfloat16\n3000,5000,700,\n")
    csv_shapes = load_shapes(tmp_path / "s.csv")
    assert [s.key for s in csv_shapes] == [(128, 4096, 4096, "bfloat16"), (3000, 5000, 700, "float16")]
    (tmp_path / "s.json").write_text(json.dumps([[1, 50257, 768], {"M": 8, "N": 8, "K": 8, "dtype": "float16"}]))
    assert [s.key[:3] for s in shape_set(str(tmp_path / "s.json"))] == [(1, 50257, 768), (8, 8, 8)]


@pytest.mark.parametrize("content, suffix, message", [
    ("M,N\n1,2\n", ".csv", "needs integer M, N and K"),
    ("M,N,K\n1,2,x\n", ".csv", "needs integer M, N and K"),
    ("M,N,K\n", ".csv", "holds no shapes"),
    ("{", ".json", "not valid JSON"),
    ('{"M": 1}', ".json", "JSON list"),
    ("[[1, 2, 0]]", ".json", "must be positive"),
    ('[{"M": 1, "N": 2, "K": 3, "dtype": "float64"}]', ".json", "not supported"),
])
def test_bad_shape_files_get_one_clear_sentence(tmp_path: Path, content: str, suffix: str, message: str) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        load_shapes(path)
    with pytest.raises(UsageError, match="cudal2, llm"):
        shape_set(str(tmp_path / "missing.csv"))
