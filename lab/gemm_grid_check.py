"""Before a grid call (lab/gemm_grid.sh, gemm_grid_bench.sh) spends device time: does this
checkout hold what the offline GPU machine needs, and does it fit one call?

- `.carry/cutlass_libs.tgz`: a CUTLASS library of every configuration, fp16, for each layout asked
  for, built from the current source and flags (the file names carry their hash);
- `.whl/`: nvmath-python's wheel (cuBLASLt; the GPU machine has none);
- `.sandbox/`: bubblewrap unpacked (the evaluator's sandbox, for the model-kernel jobs);
- `.gemm_grid/<set>/`: the records the sweep resumes from, gzipped, and which families they hold;
- the call's size: the tracked tree and the carried paths against the 64 MiB a call carries.

Session 21 (2026-11-27) tuned 943 shapes without cuBLASLt and every one of its shapes without
CUTLASS: the first because `.whl` was left behind, the second through a fault in finding carried
libraries. `gemm tune` now stops on both, on the GPU; this says so here first, at no device time.

    python lab/gemm_grid_check.py [--layouts nn,nt] [--carry .carry .whl .gemm_grid .sandbox] [--partial-ok]

Exits 1 and says what to do when something is missing or the call would not fit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

from warpforge import jsonl

CALL_LIMIT = 64 * 2**20  # bytes a device call carries, the tracked tree included


def missing_libraries(names: set[str], layouts: list[str]) -> list[str]:
    """The (config, layout) instances, fp16, with no library among `names` (file names) built from
    the current source and flags: `<config>_float16_<layout>-<hash>-cutlass<version>.so`."""
    from warpforge.gemm import cutlass_build, cutlass_sm90

    stems = {n.split("-cutlass")[0] for n in names if n.endswith(".so")}
    return [f"{cfg.name}_float16_{layout}" for layout in layouts for cfg in cutlass_sm90.configs()
            if cutlass_build._stem(cfg, "float16", layout) not in stems]


def record_families(folder: Path) -> tuple[int, Counter[str]]:
    """(shapes recorded, how many of them timed each family at least once with an ok status)."""
    records = [r for f in sorted(folder.glob("*.jsonl*")) for r in jsonl.read(f) if "choice" in r]
    timed: Counter[str] = Counter()
    for r in records:
        ok = {c["name"].split(":")[0].split("_")[0] for c in r.get("candidates", []) if c.get("status") == "ok"}
        timed.update(ok)
    return len(records), timed


def size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tracked_size(root: Path) -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    return sum((root / f.decode()).stat().st_size for f in files if f and (root / f.decode()).is_file())


def check(root: Path, layouts: list[str], carry: list[str], partial_ok: bool = False) -> list[str]:
    """What is wrong, each with what to do; [] when the call can go."""
    problems = []
    libs = root / ".carry" / "cutlass_libs.tgz"
    if not libs.is_file():
        problems.append(f"{libs} is missing: build the libraries (docs/gemm.md, the CUTLASS section) and "
                        "`tar czf .carry/cutlass_libs.tgz -C .cutlass_libs nn nt`")
    else:
        with tarfile.open(libs) as tar:
            names = {Path(m.name).name for m in tar.getmembers()}
        missing = missing_libraries(names, layouts)
        if missing:
            problems.append(f"{libs} lacks {len(missing)} libraries of the current source (e.g. {missing[0]}): "
                            "rebuild them with cutlass_build.build_all and pack again")
    if not list((root / ".whl").glob("nvmath_python-*.whl")):
        problems.append(".whl holds no nvmath-python wheel, so the GPU machine would have no cuBLASLt: "
                        "the pip download in docs/gemm.md, 'What is left'")
    if not (root / ".sandbox" / "root" / "usr" / "bin" / "bwrap").is_file():
        problems.append(".sandbox has no bubblewrap: see benchmarks/_gpu_env.sh for how it is unpacked")
    for folder in sorted((root / ".gemm_grid").glob("*")):
        n, timed = record_families(folder)
        print(f"{folder}: {n} shapes recorded; families timed: {dict(timed)}")
        for family in ("cublaslt", "cutlass"):
            if n and timed[family] < n and not partial_ok:
                problems.append(f"{folder}: {n - timed[family]} of {n} shapes were tuned without {family}, and the "
                                "sweep would skip them: carry only records that hold every family "
                                "(or pass --partial-ok)")
    total = tracked_size(root) + sum(size(root / c) for c in carry if (root / c).exists())
    print(f"the call carries {total / 2**20:.1f} MiB of {CALL_LIMIT / 2**20:.0f} (tracked tree and {' '.join(carry)})")
    if total > CALL_LIMIT:
        problems.append(f"the call would carry {total / 2**20:.1f} MiB, over {CALL_LIMIT / 2**20:.0f}: carry less")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layouts", default="nn,nt", help="CUTLASS layouts the call needs (cudal2: nn, llm: nt)")
    p.add_argument("--carry", nargs="*", default=[".carry", ".whl", ".gemm_grid", ".sandbox"])
    p.add_argument("--partial-ok", action="store_true", help="records without cuBLASLt or CUTLASS are meant to stay")
    args = p.parse_args()
    problems = check(Path(__file__).resolve().parents[1], [x for x in args.layouts.split(",") if x], args.carry,
                     args.partial_ok)
    for problem in problems:
        print(f"not ready: {problem}", file=sys.stderr)
    print("ready" if not problems else f"{len(problems)} problems: not ready")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
