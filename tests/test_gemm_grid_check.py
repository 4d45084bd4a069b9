"""lab/gemm_grid_check.py: what a grid call needs, checked here before device time is spent."""

from __future__ import annotations

import gzip
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any


def _record(m: int, *families: str) -> dict[str, Any]:
    names = {"triton": "triton_tiled:BM64", "cublaslt": "cublaslt:0", "cutlass": "cutlass_64x128x64_c1x1_pingpong"}
    candidates = [{"name": names[f], "status": "ok"} for f in families]
    candidates.append({"name": "cutlass_128x128x64_c1x1_coop", "status": "error"})  # failed: not timed
    return {"M": m, "N": 64, "K": 64, "choice": "torch", "candidates": candidates}


def test_a_checkout_missing_what_the_gpu_machine_needs_is_not_ready(tmp_path: Path, bench_script: Any) -> None:
    from warpforge.gemm import cutlass_build, cutlass_sm90

    g = bench_script("lab/gemm_grid_check")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gemm_grid" / "cudal2").mkdir(parents=True)
    records = [_record(64, "triton", "cublaslt", "cutlass"), _record(128, "triton", "cublaslt")]
    (tmp_path / ".gemm_grid" / "cudal2" / "tune.shard0of1.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    problems = g.check(tmp_path, ["nn"], [".carry"])
    assert any("cutlass_libs.tgz is missing" in p for p in problems)
    assert any("no nvmath-python wheel" in p for p in problems)
    assert any("no bubblewrap" in p for p in problems)
    assert any("1 of 2 shapes were tuned without cutlass" in p for p in problems)
    assert not any("without cublaslt" in p for p in problems)

    # every library but one, named as cutlass_build names them, packed as the call carries them
    libs = tmp_path / "libs" / "nn"
    libs.mkdir(parents=True)
    cfgs = cutlass_sm90.configs()
    for cfg in cfgs[1:]:
        (libs / f"{cutlass_build._stem(cfg, 'float16', 'nn')}-cutlass4.2.0.so").write_bytes(b"")
    (tmp_path / ".carry").mkdir()
    with tarfile.open(tmp_path / ".carry" / "cutlass_libs.tgz", "w:gz") as tar:
        tar.add(libs, arcname="nn")
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / "nvmath_python-1.0.0-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"")
    (tmp_path / ".sandbox" / "root" / "usr" / "bin").mkdir(parents=True)
    (tmp_path / ".sandbox" / "root" / "usr" / "bin" / "bwrap").write_bytes(b"")
    problems = g.check(tmp_path, ["nn"], [".carry"], partial_ok=True)
    assert problems == [f".carry/cutlass_libs.tgz lacks 1 libraries of the current source (e.g. {cfgs[0].name}_float16_nn): "
                        "rebuild them with cutlass_build.build_all and pack again".replace(".carry/", f"{tmp_path}/.carry/")]
    assert g.missing_libraries({p.name for p in libs.iterdir()}, ["nn", "nt"])[1:] == \
        [f"{c.name}_float16_nt" for c in cfgs]  # no nt library at all
