"""Nothing a candidate leaves behind can crash, hang or fill the parent, or reach a later
evaluation (Trust III; ARCHITECTURE.md, "The trust boundary").

Each attack is a fixture in tests/fixtures/attacks that, beside an honest matmul, leaves
something in the folders it may write: a tree deeper than Python's recursion limit, a FIFO or a
link where its outputs file was, more bytes than its folders may hold, files in its compile
cache for the next evaluation of the same source. The static policy is off, so what stops it is
the harness. One Judge serves the fixtures (a fresh sandboxed process per candidate all the same).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from warpforge import Candidate, EvalConfig, Judge, load_task
from warpforge.candidate import EvalResult
from warpforge.errors import ConfigError
from warpforge.evaluate import compile as compile_mod
from warpforge.evaluate import jail, leftovers

FIXTURES = Path(__file__).parent / "fixtures"
ATTACKS = FIXTURES / "attacks"
MATMUL = FIXTURES / "tasks" / "matmul.py"
# a 64 MiB folder limit, so writing past it costs a fraction of a second; a reference time limit
# far below the 900 s default, so a FIFO that blocks the reference process again fails the test
# in minutes, not a quarter of an hour
FAST = {"device": "cpu", "trials": 3, "timeout_s": 60.0, "bench": False, "static_checks": False, "spare_workers": 1,
        "work_limit_gb": 1 / 16, "reference_timeout_s": 120.0}

sandboxed = pytest.mark.skipif(jail.problem() is not None, reason=f"no sandbox here: {jail.problem()}")


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    cache = tmp_path_factory.mktemp("cache")
    with Judge(load_task(MATMUL), EvalConfig.of(**FAST, cache_dir=str(cache))) as j:  # type: ignore[arg-type]
        yield j


def attack(judge: Judge, name: str) -> EvalResult:
    return judge.evaluate(Candidate.from_file(ATTACKS / f"{name}.py"))


def honest(judge: Judge) -> EvalResult:
    return judge.evaluate(Candidate.from_file(FIXTURES / "candidates" / "honest_matmul.py"))


def deep_tree(root: Path, levels: int = 1500) -> Path:
    path = root
    for _ in range(levels // 100):  # os.makedirs recurses once per missing level
        path = path.joinpath(*["d"] * 100)
        os.makedirs(path, exist_ok=True)
    (path / "bottom").write_text("x")
    return path


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder in /dev/shm when there is one, as the Judge's folders are (removing 1,500 nested
    folders took 7.6 s on this machine's disk, 0.2 s on tmpfs)."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="wf-test-parent-safety-", dir="/dev/shm"))
    yield folder
    leftovers.remove_tree(folder)


def left_in(judge: Judge, name: str) -> list[Path]:
    """`name` anywhere in the Judge's candidate folders or in the shared compile cache (looked for
    one level down only: a walk of a tree left behind would itself recurse)."""
    roots = [*judge._tmp.glob("candidate-*/work"), *judge._tmp.glob("candidate-*/cache"),
             *(Path(judge.cfg.transport.cache_dir) / "compile" / "sandboxed").glob("*")]
    return [root / name for root in roots if os.path.lexists(root / name)]


# -- clean-up and publish never recurse ------------------------------------------------------

def test_a_tree_deeper_than_the_recursion_limit_is_removed_and_never_followed(scratch: Path) -> None:
    outside = scratch / "outside"
    outside.mkdir()
    (outside / "keep").write_text("the host's")
    root = scratch / "left"
    deep_tree(root / "deep")
    (root / "locked" / "inner").mkdir(parents=True)
    (root / "locked" / "inner" / "file").write_text("x")
    os.chmod(root / "locked" / "inner", 0o500)  # unwritable, then unreadable: its own folders
    os.chmod(root / "locked", 0o000)
    os.mkfifo(root / "fifo")
    os.symlink(outside, root / "link")  # removed as a link, never followed into
    assert leftovers.usage(root)[2] == f"it holds folders more than {leftovers.MAX_DEPTH} levels deep"
    assert leftovers.remove_tree(root) is True
    assert not os.path.lexists(root)
    assert (outside / "keep").read_text() == "the host's"
    assert leftovers.remove_tree(root) is True  # already gone: nothing to do, nothing raised


def test_publish_and_stage_carry_build_products_only(scratch: Path, tmp_path: Path) -> None:
    private = scratch / "private"
    products = ["torch_extensions/ext/ext.so", "torch_extensions/ext/build.ninja", "torch_extensions/ext/main.cpp",
                "torch_extensions/ext/main.o", "torch_extensions/ext/.ninja_log", "triton/abc/k.cubin",
                "triton/abc/k.json", "cupy/x_2.cubin"]
    junk = ["wf_marker", "torch_extensions/ext/marker.txt", "torch_extensions/ext/sub/inner.so", "triton/notes.json",
            "elsewhere/x.so"]
    for relative in products + junk:
        (private / relative).parent.mkdir(parents=True, exist_ok=True)
        (private / relative).write_text(relative)
    os.utime(private / products[0], ns=(10**18, 10**18))
    os.symlink("/etc/hostname", private / "torch_extensions/ext/link.so")
    os.mkfifo(private / "triton/abc/fifo.json")
    deep_tree(private / "torch_extensions" / "ext" / "deep")
    cache = tmp_path / "cache"
    compile_mod.publish(str(cache), "key", private, staged=None)  # (a 1,500-level tree inside: no recursion)
    entry = cache / "compile" / "sandboxed" / "key"
    assert sorted(compile_mod.build_products(entry)) == sorted(products)
    assert not os.path.lexists(entry / "torch_extensions/ext/deep") and not os.path.lexists(entry / "wf_marker")
    assert (entry / products[0]).stat().st_mtime_ns == 10**18  # ninja finds the build up to date
    fresh = tmp_path / "fresh"
    staged = compile_mod.stage(str(cache), "key", fresh)
    assert sorted(staged) == sorted(products) and (fresh / products[2]).read_text() == products[2]
    (fresh / "wf_marker").write_text("for the next evaluation")
    compile_mod.publish(str(cache), "key", fresh, staged)  # nothing built: the entry stays as it was
    assert not (entry / "wf_marker").exists()


@sandboxed
def test_a_candidate_that_builds_deep_trees_gets_a_verdict_and_leaves_nothing(judge: Judge) -> None:
    result = attack(judge, "deep_tree")
    assert result.status == "crashed" and "levels deep" in result.reason, result.reason
    assert not left_in(judge, "wf_attack_deep")
    after = honest(judge)
    assert after.correct, after.reason


@sandboxed
def test_a_pool_worker_survives_deep_trees_and_its_own_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from warpforge.executor.workers import EvalWorker

    worker = EvalWorker({**FAST, "spare_workers": 0})
    try:
        monkeypatch.setattr(worker.evaluator, "evaluate", lambda *args: (_ for _ in ()).throw(RecursionError("deep")))
        failed = worker.run(str(MATMUL), "any", source="class ModelNew: pass\n")
        assert failed["status"] == "crashed" and "RecursionError" in failed["reason"], failed
        monkeypatch.undo()
        deep = worker.run(str(MATMUL), "deep_tree", source=(ATTACKS / "deep_tree.py").read_text())
        assert deep["status"] == "crashed" and "levels deep" in deep["reason"], deep["reason"]
        after = worker.run(str(MATMUL), "honest", source=(FIXTURES / "candidates" / "honest_matmul.py").read_text())
        assert after["status"] == "correct", after["reason"]
    finally:
        worker.close()


# -- files that cross from a candidate ------------------------------------------------------

@sandboxed
def test_an_outputs_file_replaced_by_a_fifo_is_refused_at_once(judge: Judge) -> None:
    result = attack(judge, "fifo_output")  # (blocked the reference process until its time limit before)
    assert "FIFO-PLANTED" in result.output_tail, result.output_tail
    assert result.status == "incorrect" and "FIFO" in result.reason, result.reason


@pytest.fixture
def host_outputs() -> Iterator[Path]:
    """A file only the host has, which the link planted by symlink_output.py names."""
    target = Path("/tmp/wf_attack_symlink_output.pt")
    torch.save([torch.full((7, 7), 7.0)], target)
    yield target
    target.unlink(missing_ok=True)


@sandboxed
def test_an_outputs_file_replaced_by_a_link_is_not_followed(judge: Judge, host_outputs: Path) -> None:
    result = attack(judge, "symlink_output")
    assert "LINK-PLANTED" in result.output_tail, result.output_tail
    assert result.status == "incorrect" and "symbolic link" in result.reason, result.reason
    assert "(7, 7)" not in result.reason  # (the host file's tensor, when the link was followed)


def test_the_reference_process_reads_only_regular_files_of_the_outputs_size(tmp_path: Path) -> None:
    """The parent's check comes first; the reference process checks again on the descriptor it
    reads, so a file swapped in between is refused too, and a FIFO never blocks it."""
    from warpforge.evaluate.protocol import Compare
    from warpforge.evaluate.reference import _compare
    from warpforge.evaluate.verify import Tolerance

    good = tmp_path / "good.pt"
    torch.save([torch.zeros(4)], good)
    big = tmp_path / "big.pt"
    big.write_bytes(b"\0" * (2 << 20))
    os.mkfifo(tmp_path / "fifo.pt")
    os.symlink(good, tmp_path / "link.pt")
    (tmp_path / "folder.pt").mkdir()
    held, dtypes, norms = [[torch.zeros(4, dtype=torch.float64)]], [torch.float32], [[(0.0, 1.0)]]
    reasons: dict[str, str] = {}

    def compare_all() -> None:
        for name in ("good", "fifo", "link", "folder", "big"):
            request = Compare([str(tmp_path / f"{name}.pt")], [[0]], [Tolerance(1e-5, 1e-5).to_dict()])
            reasons[name] = _compare(request, held, dtypes, norms).reason

    thread = threading.Thread(target=compare_all, daemon=True)
    thread.start()
    thread.join(timeout=60)  # (a generous hang guard: it takes milliseconds)
    if thread.is_alive():
        os.close(os.open(tmp_path / "fifo.pt", os.O_WRONLY | os.O_NONBLOCK))  # let the blocked open go
        pytest.fail("the reference process blocked on a FIFO")
    assert reasons["good"].startswith("matches the reference"), reasons
    assert "a FIFO, not a regular file" in reasons["fifo"], reasons
    assert "symbolic link" in reasons["link"] and "a folder" in reasons["folder"], reasons
    assert "more than the" in reasons["big"], reasons


# -- the folders' size ------------------------------------------------------------------------

@sandboxed
@pytest.mark.parametrize("fixture", ["fill_work_folder", "fill_compile_cache"])
def test_writing_past_the_folder_limit_is_a_clear_verdict(judge: Judge, fixture: str) -> None:
    result = attack(judge, fixture)
    assert result.status == "crashed", result.reason
    assert "0.0625 GiB" in result.reason and "WARPFORGE_WORK_LIMIT_GB" in result.reason, result.reason
    assert not left_in(judge, "wf_attack_fill")  # removed, and nothing of it published


def test_the_folder_limit_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="work_limit_gb"):
        EvalConfig.of(work_limit_gb=0)


# -- no state crosses evaluations -------------------------------------------------------------

@sandboxed
def test_files_a_candidate_leaves_in_its_cache_never_reach_a_later_evaluation(judge: Judge) -> None:
    for _ in range(2):
        result = attack(judge, "cache_marker")
        assert result.correct, (result.reason, result.output_tail)
        assert "FOUND []" in result.output_tail, result.output_tail


@sandboxed
def test_the_confirming_run_starts_from_an_empty_cache(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    """The content-cache probe's confirming run (Judge.evaluate) sees nothing the first run left,
    not even a file named like a build product, which a plain re-evaluation is given."""
    evaluate_mod = sys.modules["warpforge.evaluate"]  # (the package: warpforge.evaluate names the function)
    suspected = iter([True])
    runs: list[EvalResult] = []
    monkeypatch.setattr(evaluate_mod, "content_cache_rejected", lambda result: next(suspected, False))
    monkeypatch.setattr(evaluate_mod, "confirm_content_cache", lambda first, second: runs.extend([first, second]) or second)
    attack(judge, "cache_marker")
    first, second = runs  # the first published its product-named marker before the second started
    assert first.correct, first.reason
    assert "PRODUCT-ABSENT" in second.output_tail and second.correct, (second.reason, second.output_tail)
