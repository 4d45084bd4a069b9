"""scripts/demo.sh, the README's main job, under `set -e`: optimize's exit 1 ("no task improved")
is a result, so the report is still written, on both the LLM and the recorded-replies branch;
exit 2 (usage, configuration) still fails the script. A stand-in PYTHON records the calls, so
nothing is installed or evaluated."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUB = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case "$*" in
  *"warpforge.cli optimize"*) exit "$OPTIMIZE_RC" ;;
esac
exit 0
"""


def run_demo(tmp_path: Path, optimize_rc: int, llm: str | None) -> tuple[int, list[str]]:
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")  # the script cds to its parent: keep the repo clean
    python = tmp_path / "python"
    python.write_text(STUB)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    env = {k: v for k, v in os.environ.items() if k not in ("WARPFORGE_LLM", "WARPFORGE_BASE_URL")}
    env.update(PYTHON=str(python), CALLS=str(calls), OPTIMIZE_RC=str(optimize_rc), WARPFORGE_BWRAP="/bin/true")
    if llm:
        env["WARPFORGE_LLM"] = llm
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "demo.sh")], env=env, capture_output=True, text=True,
                          timeout=60)
    return done.returncode, calls.read_text().splitlines()


@pytest.mark.parametrize("llm", [None, "openai:gpt-4o"])
@pytest.mark.parametrize("optimize_rc, script_rc, reported", [(0, 0, True), (1, 0, True), (2, 2, False)])
def test_the_report_is_written_whether_or_not_a_task_improved(tmp_path, llm, optimize_rc, script_rc, reported):
    code, calls = run_demo(tmp_path, optimize_rc, llm)
    assert code == script_rc
    assert any("warpforge.cli optimize" in c and ("replay:" not in c) == bool(llm) for c in calls)
    assert any("warpforge.cli report" in c for c in calls) == reported


def test_the_demo_finds_every_bundled_example_in_the_checkout() -> None:
    """`warpforge demo` looks for examples/ beside src/; when the CLI became a package the walk
    up from its file came one level short (src/examples), and the README's main job stopped at once."""
    from warpforge.cli import DEMO_EXAMPLES, EXAMPLES_DIR

    assert EXAMPLES_DIR == ROOT / "examples"
    missing = [name for _, name, _ in DEMO_EXAMPLES if not (EXAMPLES_DIR / name).is_file()]
    assert not missing, missing


@pytest.mark.slow
def test_the_demo_evaluates_the_bundled_examples_on_the_cpu() -> None:
    """The main job's first half for real (1-2 minutes: the C++ example compiles): every bundled
    CPU example is evaluated, verified and timed against its suite task."""
    import json
    import sys

    done = subprocess.run([sys.executable, "-m", "warpforge.cli", "demo", "--device", "cpu", "--json"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3 and all(r["status"] == "correct" and r["speedup"] for r in rows), rows
