"""Inputs from outside the command line are not trusted (docs/evaluation.md, "The trust boundary"):
an outbox's jobs folder (`eval-batch --jobs`), an imported attempts export (`archive import`) and
an inbox reply (`--llm inbox:`). Each test attacks one of them, on the CPU."""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import Future
from pathlib import Path

import pytest

from warpforge import load_task
from warpforge.archive import Archive
from warpforge.archive_trust import trusted, unverified, verify
from warpforge.candidate import Candidate, EvalResult, Timing
from warpforge.cli import main
from warpforge.config import EvalConfig
from warpforge.errors import ConfigError, LLMError, UsageError
from warpforge.evaluate import Judge
from warpforge.executor.outbox import OutboxPool, check_task, job_key, pending_jobs, write_result
from warpforge.executor.workers import Job
from warpforge.propose import external
from warpforge.propose.external import render_prompt
from warpforge.propose.llm import LLMClient, parse_model_specs
from warpforge.report.datasets import export, import_attempts
from warpforge.search.retrieval import stepping_stones

RELU = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
WRONG = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


# -- eval-batch --jobs: the jobs folder came from elsewhere ---------------------------------------

def _job(box: Path, name: str, task: str, task_hash: str, source: str = RELU, key: str | None = None) -> None:
    (box / "jobs").mkdir(parents=True, exist_ok=True)
    (box / "jobs" / f"{name}.json").write_text(json.dumps(
        {"key": name if key is None else key, "task": task, "task_hash": task_hash, "label": name, "source": source}))


def _evil_task(path: Path, marker: Path) -> str:
    """A relu task whose module code writes `marker` on the host when it can (the exploit), and
    goes on as a task either way."""
    path.write_text(f"try:\n    open({str(marker)!r}, 'w').write('ran')\nexcept OSError:\n    pass\n"
                    + Path(load_task("level1/relu").path).read_text())
    return load_task(path).source_hash


def test_a_job_key_never_becomes_a_path_and_a_task_shipped_with_the_jobs_runs_only_in_the_sandbox(
        tmp_path, capsys) -> None:
    box, marker = tmp_path / "box", tmp_path / "ran"
    (box / "jobs").mkdir(parents=True)
    evil = box / "evil_task.py"  # its module code runs in the reference process
    evil_hash = _evil_task(evil, marker)
    relu_hash = load_task("level1/relu").source_hash
    _job(box, "aaaa", "level1/relu", relu_hash, key="../../outside")  # the exploit: a results path out of results/
    _job(box, "bbbb", str(evil), evil_hash)
    _job(box, "cccc", os.path.relpath(evil), evil_hash)  # the same file, named relative to here
    assert main(["eval-batch", "--jobs", str(box), "--device", "cpu", "--no-bench"]) == 0
    assert not list(tmp_path.rglob("outside*"))
    assert not marker.exists(), "a task that came with the jobs ran its program outside the sandbox"
    results = {p.stem: json.loads(p.read_text()) for p in (box / "results").glob("*.json")}
    assert set(results) == {"aaaa", "bbbb", "cccc"}
    assert results["aaaa"]["status"] == "task_error" and "names another key" in results["aaaa"]["reason"]
    # the task's program ran, in the sandbox, and judged the candidate as usual
    assert results["bbbb"]["status"] == "correct" and results["cccc"]["status"] == "correct"
    assert "refused job aaaa" in capsys.readouterr().err
    assert check_task({"key": "dddd", "task": "level1/relu", "task_hash": relu_hash, "source": RELU}) is None
    with pytest.raises(UsageError, match="not a job key"):
        write_result(box / "results", "../escape", EvalResult("task_error", "x", "load"))


def test_with_trust_tasks_the_folders_task_runs_as_the_operators_own_and_without_sandbox_it_is_refused(
        tmp_path) -> None:
    box, marker = tmp_path / "box", tmp_path / "ran"
    (box / "jobs").mkdir(parents=True)
    evil = box / "task.py"
    _job(box, "bbbb", str(evil), _evil_task(evil, marker))
    assert main(["eval-batch", "--jobs", str(box), "--device", "cpu", "--no-bench", "--no-sandbox"]) == 0
    result = json.loads((box / "results" / "bbbb.json").read_text())
    assert result["status"] == "task_error" and "only inside the sandbox" in result["reason"] and not marker.exists()
    (box / "results" / "bbbb.json").unlink()
    assert main(["eval-batch", "--jobs", str(box), "--device", "cpu", "--no-bench", "--trust-tasks"]) == 0
    assert marker.exists() and json.loads((box / "results" / "bbbb.json").read_text())["status"] == "correct"


def test_sandbox_reference_runs_a_task_file_you_did_not_write_in_the_sandbox(tmp_path) -> None:
    marker, cand = tmp_path / "ran", tmp_path / "cand.py"
    task = tmp_path / "downloaded_task.py"
    _evil_task(task, marker)
    cand.write_text(RELU)
    assert main(["eval", str(task), str(cand), "--device", "cpu", "--no-bench", "--sandbox-reference"]) == 0
    assert not marker.exists()
    with pytest.raises(ConfigError, match="only with the sandbox on"):
        EvalConfig.of(sandbox=False, sandbox_reference=True)
    # two sandboxes cannot share CUDA IPC handles (an H100 run: the candidate could not open them)
    with Judge(load_task("level1/relu"), EvalConfig.of(device="cpu", sandbox_reference=True)) as judge:
        assert judge.sandbox_reference and judge.cfg.transport.cuda_ipc is False


@pytest.mark.timeout(60)
def test_job_and_result_files_that_are_links_or_devices_are_not_read(tmp_path) -> None:
    box = tmp_path / "box"
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"key": "dddd", "task": "level1/relu", "task_hash": "x", "source": "stolen"}))
    (box / "jobs").mkdir(parents=True)
    (box / "jobs" / "zero.json").symlink_to("/dev/zero")  # read without a limit, it never ends
    (box / "jobs" / "dddd.json").symlink_to(secret)
    os.mkfifo(box / "jobs" / "fifo.json")  # opened blocking, it waits for a writer forever
    assert pending_jobs(box) == []
    pool = OutboxPool(box, poll_s=0.05)
    try:
        future = pool.submit(Job(0, "level1/relu", "mine", source=RELU))
        key = job_key("level1/relu", load_task("level1/relu").source_hash, RELU)
        (box / "results" / f"{key}.json").symlink_to("/dev/zero")
        pool._collect()
        assert not future.done()
    finally:
        pool.close()


# -- archive import: the verdicts in the file are claims ------------------------------------------

def _forged_export(path: Path) -> Path:
    """An attempts export whose ReLU returns its input unchanged and claims 500x, proven."""
    claimed = EvalResult("correct", "ok", "done", task="level1/relu", hardware={"device": "cuda", "gpu": "H100"},
                         paired={"speedup": 500.0, "interval": [450.0, 550.0]}).to_dict()
    rows = [{"task": "level1/relu", "source": WRONG, "status": "correct", "correct": True, "speedup": 500.0,
             "language": "pytorch", "strategy": "translate", "model": "forger", "hardware_key": "abcdef123456",
             "result": json.dumps(claimed)},
            {"task": str(path.parent / "shipped_task.py"), "source": RELU, "status": "correct", "speedup": 9.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class Replaying:
    """An evaluator that gives each source the verdict it is handed (what a GPU machine would say)."""

    def __init__(self, verdicts: dict[str, EvalResult]) -> None:
        self.verdicts, self.seen = verdicts, []  # type: ignore[var-annotated]

    def submit(self, task, candidate: Candidate) -> Future[EvalResult]:
        self.seen.append((task.name, candidate.source))
        future: Future[EvalResult] = Future()
        future.set_result(self.verdicts[candidate.source])
        return future

    def close(self) -> None:
        pass


def test_a_forged_import_is_no_best_no_dataset_row_and_no_stepping_stone_until_verified(tmp_path, capsys) -> None:
    forged = _forged_export(tmp_path / "forged.jsonl")
    path = tmp_path / "a.db"
    with Archive(path) as archive:
        counts = import_attempts(archive, forged)
        assert counts == {"imported": 1, "already_there": 0, "unknown_task": 1, "no_source": 0}
        assert archive.tasks() == ["level1/relu"]  # the shipped task path is never recorded (so never run)
        [a] = archive.attempts()
        assert a.evaluation_id is None and a.features["imported"]["speedup"] == 500.0
        assert archive.best("level1/relu") is None
        assert [unverified(archive)[0].id] == [a.id] and trusted(archive) == []
        for kind in ("sft", "preference", "contrastive", "attempts"):
            assert export(archive, kind, tmp_path / f"{kind}.jsonl") == 0, kind
        archive.add_task(load_task("level1/gelu"))
        assert stepping_stones(archive, "level1/gelu", load_task("level1/gelu").source) == []
        again = import_attempts(archive, forged)
        assert again["already_there"] == 1, again  # twice adds nothing
    assert main(["archive", "show", str(a.id), "--archive", str(path)]) == 0
    assert "not verified here" in capsys.readouterr().out
    # verified with the real evaluator, the forgery is what it is: wrong, and still no best
    assert main(["archive", "verify", "--archive", str(path), "--device", "cpu", "--no-bench", "--trials", "2",
                 "--json"]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert (reply["verified"], reply["correct"], reply["results"][0]["status"]) == (1, 0, "incorrect")
    with Archive(path) as archive:
        assert unverified(archive) == [] and archive.attempt(a.id).status == "incorrect"
        assert archive.best("level1/relu") is None


def test_a_verified_import_counts_and_the_latest_evaluation_wins(tmp_path) -> None:
    forged = _forged_export(tmp_path / "forged.jsonl")
    ms = {"iqr_ms": 0.0, "min_ms": 1.0, "mean_ms": 1.0, "n": 3, "host_median_ms": 1.0}
    honest = EvalResult("correct", "ok", "done", task="level1/relu", hardware={"device": "cpu", "cpu": "here"},
                        candidate=Timing.from_dict({"median_ms": 1.0, **ms}),
                        reference=Timing.from_dict({"median_ms": 1.5, **ms}),
                        paired={"speedup": 1.5, "interval": [1.2, 1.8]})
    with Archive(tmp_path / "a.db") as archive:
        import_attempts(archive, forged)
        evaluator = Replaying({WRONG: honest})  # as if this machine found it correct after all
        done, skipped = verify(archive, evaluator)
        assert skipped == {} and [v.result.status for v in done] == ["correct"]
        assert evaluator.seen == [("level1/relu", WRONG)]
        best = archive.best("level1/relu")
        assert best is not None and best.hardware == {"device": "cpu", "cpu": "here"}  # this machine's verdict
        assert len(trusted(archive)) == 1 and verify(archive, evaluator) == ([], {})  # nothing left to verify


def test_verify_runs_only_suite_tasks_or_the_files_the_operator_names(tmp_path) -> None:
    mine = tmp_path / "mine.py"
    mine.write_text(Path(load_task("level1/relu").path).read_text())
    with Archive(tmp_path / "a.db") as archive:
        run = archive.start_run({}, seed=0)
        archive.add_task(load_task(mine))  # the operator's own task, recorded by an earlier run
        archive.finish_run(run, "done")
        rows = [{"task": "mine", "source": RELU, "status": "correct", "speedup": 3.0}]
        (tmp_path / "x.jsonl").write_text(json.dumps(rows[0]) + "\n")
        assert import_attempts(archive, tmp_path / "x.jsonl")["imported"] == 1
        evaluator = Replaying({RELU: EvalResult("incorrect", "differs", "verify")})
        done, skipped = verify(archive, evaluator)
        assert done == [] and "not a suite task" in skipped["mine"] and evaluator.seen == []
        done, skipped = verify(archive, evaluator, [load_task(mine)])  # named: the operator's file
        assert [v.result.status for v in done] == ["incorrect"] and skipped == {}


def test_an_archive_imported_before_claims_were_kept_apart_is_verified_too(tmp_path) -> None:
    """Imports used to store the file's verdict as an evaluation, recorded before the import run
    finished: `unverified` finds those, and a verification after them is the latest."""
    with Archive(tmp_path / "a.db") as archive:
        run = archive.start_run({"mode": "import", "from": "old.jsonl"}, seed=0)
        archive.add_task(load_task("level1/relu"))
        from warpforge.propose import Proposal

        cid = archive.add_candidate(run, Proposal("level1/relu", "translate", candidate=Candidate(WRONG)), 0)
        archive.add_evaluation(cid, EvalResult("correct", "claimed", "done", paired={"speedup": 500.0,
                                                                                      "interval": [450.0, 550.0]}))
        archive.finish_run(run, "done")
        assert [a.id for a in unverified(archive)] == [cid] and export(archive, "sft", tmp_path / "s.jsonl") == 0
        verify(archive, Replaying({WRONG: EvalResult("incorrect", "differs", "verify")}))
        assert unverified(archive) == [] and archive.attempt(cid).status == "incorrect"


# -- inbox replies: regular files of bounded size --------------------------------------------------

MESSAGES = [{"role": "user", "content": "Make relu fast."}]


def _pending_request(box: Path) -> Path:
    """A request waiting in the inbox (as a killed run leaves it); returns where its reply goes."""
    key = hashlib.sha256(render_prompt(MESSAGES).encode()).hexdigest()[:12]
    box.mkdir(parents=True, exist_ok=True)
    (box / f"{key}-0.request.md").write_text(render_prompt(MESSAGES))
    return box / f"{key}-0.reply.md"


def _ask(box: Path) -> str:
    llm = LLMClient(parse_model_specs([f"inbox:{box}"]), backoff_s=0.0, timeout_s=30.0, max_retries=0)
    return llm.complete(MESSAGES).text


@pytest.mark.timeout(60)
def test_an_inbox_reply_that_is_a_link_a_fifo_or_too_big_is_refused(tmp_path, monkeypatch) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY\n")
    box = tmp_path / "box"
    _pending_request(box).symlink_to(secret)
    with pytest.raises(LLMError, match="symbolic link") as refused:
        _ask(box)
    assert "PRIVATE KEY" not in str(refused.value)
    assert not list(box.glob("*.request.md"))  # the pair moved aside: the next ask is a new request
    _pending_request(box / "zero").symlink_to("/dev/zero")
    with pytest.raises(LLMError, match="symbolic link"):
        _ask(box / "zero")
    os.mkfifo(_pending_request(box / "fifo"))
    with pytest.raises(LLMError, match="not a regular file"):
        _ask(box / "fifo")
    monkeypatch.setattr(external, "MAX_REPLY_BYTES", 1000)
    _pending_request(box / "big").write_text("x" * 1001)
    with pytest.raises(LLMError, match="more than the 1000"):
        _ask(box / "big")
    _pending_request(box / "fine").write_text("a reply of 1000 bytes at most")
    assert _ask(box / "fine") == "a reply of 1000 bytes at most"
