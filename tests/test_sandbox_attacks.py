"""The OS sandbox (evaluate/jail.py) against one attack per class of issue 18's Why.

Each fixture in tests/fixtures/attacks attacks the host at import, beside an honest (or, for the
forgery, a wrong) matmul; the static policy is off, so what stops it is the sandbox. Each test
asserts the verdict, the archive, the caches, later candidates and the host are untouched. One
Judge serves the fixtures that share a configuration (a fresh sandboxed process per candidate
all the same), so the file costs seconds, not a Judge start-up per attack.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from warpforge import Candidate, EvalConfig, Judge, load_task
from warpforge.candidate import EvalResult
from warpforge.evaluate import jail

FIXTURES = Path(__file__).parent / "fixtures"
ATTACKS = FIXTURES / "attacks"
FAST = {"device": "cpu", "trials": 3, "timeout_s": 60.0, "bench": False, "static_checks": False, "spare_workers": 1}
KEY = "sk-wfattack-0123456789abcdefghijklmnop"

pytestmark = pytest.mark.skipif(jail.problem() is not None, reason=f"no sandbox here: {jail.problem()}")


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    cache = tmp_path_factory.mktemp("cache")
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), EvalConfig.of(**FAST, cache_dir=str(cache))) as j:  # type: ignore[arg-type]
        yield j


def attack(judge: Judge, name: str) -> EvalResult:
    return judge.evaluate(Candidate.from_file(ATTACKS / f"{name}.py"))


def _site_folders() -> list[Path]:
    import site

    import torch
    import warpforge

    return [Path(p) for p in {*site.getsitepackages(), site.getusersitepackages(), os.path.dirname(os.path.dirname(
        torch.__file__)), os.path.dirname(warpforge.__file__)}]


def _planted(mark: str) -> list[Path]:
    return [p for folder in _site_folders() if folder.is_dir() for p in folder.glob(f"{mark}*")]


@pytest.fixture
def clean_site() -> Iterator[None]:
    """Remove whatever an attack managed to plant (only if the sandbox failed), whatever the outcome."""
    yield
    for path in _planted("wf_attack_"):
        path.unlink()


def test_reexported_modules_cannot_write_the_installation(judge: Judge, clean_site: None) -> None:
    result = attack(judge, "host_writes")
    assert result.correct, result.reason  # the matmul is honest; the writes fail quietly
    assert "WROTE" not in result.output_tail
    assert not _planted("wf_attack_host_writes")


def test_a_planted_pth_cannot_forge_a_later_verdict(judge: Judge, clean_site: None) -> None:
    result = attack(judge, "verdict_forgery")
    assert result.status == "incorrect", result.reason
    assert "PLANTED" not in result.output_tail
    assert not _planted("wf_attack_verdict_forgery")
    again = attack(judge, "verdict_forgery")  # a later evaluation in a fresh process: still wrong
    assert again.status == "incorrect", again.reason


def test_the_archive_cannot_be_found_or_rewritten(judge: Judge, tmp_path: Path) -> None:
    archive = tmp_path / "archive.db"
    with sqlite3.connect(archive) as db:
        db.execute("CREATE TABLE evaluations(id INTEGER PRIMARY KEY, status TEXT, speedup REAL)")
        db.execute("INSERT INTO evaluations(status, speedup) VALUES ('incorrect', 0.5)")
    # a process whose command line names the archive, as `warpforge optimize --archive PATH` does
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--archive", str(archive)])
    try:
        result = attack(judge, "archive_tamper")
    finally:
        holder.kill()
        holder.wait()
    assert result.correct, result.reason
    assert "TAMPERED" not in result.output_tail and "ARCHIVES-FOUND 0" in result.output_tail, result.output_tail
    with sqlite3.connect(archive) as db:
        assert db.execute("SELECT status, speedup FROM evaluations").fetchall() == [("incorrect", 0.5)]


def test_shared_caches_are_not_writable(judge: Judge) -> None:
    result = attack(judge, "cache_poison")
    assert result.correct, result.reason
    cache = Path(judge.cfg.transport.cache_dir)
    home = Path(os.path.expanduser("~/.cache/warpforge"))
    poisoned = [p for root in (cache, home) if root.is_dir() for p in root.rglob("WF_POISON")]
    own = cache / "compile" / "sandboxed"  # its private cache, published under its own source's key only
    assert all(own in p.parents for p in poisoned), poisoned
    assert len({p.relative_to(own).parts[0] for p in poisoned}) <= 1


def _marked(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_nothing_outlives_the_evaluation_and_no_other_process_is_visible(judge: Judge) -> None:
    assert judge.reference.child is not None or attack(judge, "host_writes").correct  # the reference process is up
    assert judge.reference.child is not None
    reference = judge.reference.child.proc.pid
    result = attack(judge, "escape_daemon")
    assert result.correct, result.reason
    assert "KILLED" not in result.output_tail, result.output_tail
    visible = int(result.output_tail.split("VISIBLE", 1)[1].split()[0])
    assert visible <= 3, result.output_tail  # the sandbox's init, the candidate, its compiler at most
    time.sleep(0.3)
    assert not _marked("wf-attack-escape-daemon")
    assert judge.reference.child is not None and judge.reference.child.proc.pid == reference and judge.reference.child.proc.poll() is None


def test_memory_of_every_process_counts_and_tmp_is_private() -> None:
    cfg = EvalConfig.of(**{**FAST, "mem_limit_gb": 1.0, "spare_workers": 0})  # type: ignore[arg-type]
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg) as judge:
        result = attack(judge, "hidden_memory")
    assert not result.correct and "memory" in result.reason, result.reason
    assert not Path("/tmp/wf_attack_hidden_memory").exists() and not Path("/dev/shm/wf_attack_hidden_memory").exists()
    assert not _marked("bytearray(1536")


@pytest.fixture
def listener() -> Iterator[list[bytes]]:
    """A loopback listener on the fixture's port, recording what reaches it."""
    received: list[bytes] = []
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("127.0.0.1", 47613))
    except OSError:
        pytest.skip("port 47613 is taken on this machine")
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                received.append(conn.recv(1 << 16) or b"(connected)")

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield received
    stop.set()
    thread.join()
    server.close()


def test_secrets_never_reach_the_candidate_or_the_record(listener: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY[::-1])
    cfg = EvalConfig.of(**{**FAST, "spare_workers": 0})  # type: ignore[arg-type]
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg) as judge:  # its processes start with the keys set
        result = attack(judge, "steal_secrets")
    assert result.status == "compile_error", result.reason
    record = str(result.to_dict(samples=True))
    assert "LOOT" in result.output_tail  # it ran and printed what it found
    assert KEY not in record and KEY[::-1] not in record
    assert not listener, listener
