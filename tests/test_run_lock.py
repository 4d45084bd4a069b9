"""One owner per run: a second optimize on a live run refuses in one sentence; a crashed owner's
lock does not stay stuck; different runs never block each other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from warpforge.archive import Archive
from warpforge.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
REPLIES = ROOT / "examples" / "replay" / "cpu_suite.jsonl"
HOLD = """
import sys, time
from pathlib import Path
from warpforge.archive import RunLock
lock = RunLock(Path(sys.argv[1]), sys.argv[2]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def _holder(archive: Path, run_id: str) -> subprocess.Popen[str]:
    """Another process holding the lock of `run_id`; returns once it holds it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(archive), run_id], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "locked", proc.communicate()[1][-2000:]
    return proc


def test_a_second_owner_is_refused_until_the_first_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    holder = _holder(path, "run-1")
    try:
        with Archive(path) as archive:
            with pytest.raises(ConfigError) as refused:
                archive.lock_run("run-1")
            message = str(refused.value)
            assert f"pid {holder.pid}" in message and "in use by another warpforge optimize" in message
            assert "\n" not in message and message.count(". ") == 0  # one sentence
            holder.send_signal(signal.SIGKILL)  # a crash: no clean-up ran, the OS drops the lock
            holder.wait()
            with archive.lock_run("run-1") as lock:
                assert lock.path.read_text().strip() == str(os.getpid())
            assert not lock.path.exists()  # released: the file goes with it
    finally:
        holder.kill()
        holder.wait()


def test_different_runs_do_not_block_each_other(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    holder = _holder(path, "run-a")
    try:
        with Archive(path) as archive, archive.lock_run("run-b"), archive.lock_run("run/odd id"):
            assert sorted(p.name for p in tmp_path.glob("a.db.*.lock")) == [
                "a.db.run-a.lock", "a.db.run-b.lock", "a.db.run-run_odd_id.lock"]
    finally:
        holder.kill()
        holder.wait()


def test_a_second_optimize_on_a_live_run_exits_2_with_one_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The first `warpforge optimize` holds its run; while it runs, the same command again refuses
    (nothing is evaluated: the loop itself is replaced, the claim is real)."""
    from warpforge.cli import main
    from warpforge.search.loop import Optimizer, RunSummary

    archive = tmp_path / "a.db"
    command = ["optimize", "level1/diag_matmul", "--llm", f"replay:{REPLIES}", "--device", "cpu",
               "--archive", str(archive), "--no-live"]
    second: dict[str, Any] = {}

    def first_run(self: Optimizer, run_id: str, tasks: Any, parallel: int = 1) -> RunSummary:
        capsys.readouterr()
        second["code"] = main(command)
        second["stderr"] = capsys.readouterr().err
        return RunSummary(run_id, (), "")

    monkeypatch.setattr(Optimizer, "_run", first_run)
    assert main(command) == 1  # the first one finished (no task improved: the loop was replaced)
    assert second["code"] == 2
    lines = second["stderr"].strip().splitlines()
    assert len(lines) == 1 and "in use by another warpforge optimize" in lines[0], second["stderr"]
    with Archive(archive) as db:
        assert len(db.runs()) == 1  # the second one did not start a run of its own either
    assert main(command) == 1  # the lock went with the first run: the same command runs again
