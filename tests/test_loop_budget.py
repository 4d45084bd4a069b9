"""The loop respects the user's budget (issue 39): a reply repeating an earlier candidate is a
duplicate, not a failed attempt, and the next prompt says so; re-running a finished run asks the
model nothing and exits with its result's code, a larger --max-candidates continues it; piped
progress names its columns. A scripted `cmd:` model answers with the same program every time and
logs every prompt, so model calls are counted, not guessed. Counts and markers only: nothing here
depends on a speedup being measured.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from warpforge import EvalConfig, load_task
from warpforge.archive import Archive
from warpforge.cli import main
from warpforge.propose import DUPLICATE, Proposal, duplicate_of
from warpforge.propose.llm import LLMClient, parse_model_specs
from warpforge.report.pages import read_archive
from warpforge.search import Budget, OptimizeConfig, Optimizer, TaskProgress
from warpforge.search.display import COLUMNS, PLAIN, ProgressView
from warpforge.candidate import Candidate

TASK = "level1/relu"
CORRECT = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
          "        return torch.relu(x)\n"
WRONG = CORRECT.replace("torch.relu(x)", "-x")  # rejected as incorrect: never timed, so the exit code is 1
REPEATED = "Your last reply repeated candidate #"
CHECKS = EvalConfig.of(device="cpu", bench=False, timeout_s=120.0)  # verdicts, not timings


def scripted_model(tmp_path: Path, program: str) -> tuple[str, Path]:
    """A `cmd:` model that answers every prompt with `program` and keeps each prompt as calls/N.txt."""
    calls = tmp_path / "calls"
    calls.mkdir()
    (tmp_path / "reply.md").write_text(f"```python\n{program}```\n")
    script = tmp_path / "model.py"
    script.write_text("import sys, uuid\nprompt = sys.stdin.read()\n"
                      f"open({str(calls)!r} + '/' + uuid.uuid4().hex + '.txt', 'w').write(prompt)\n"
                      f"print(open({str(tmp_path / 'reply.md')!r}).read())\n")
    return f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(script))}", calls


def prompts(calls: Path) -> list[str]:
    return [p.read_text() for p in sorted(calls.iterdir(), key=lambda p: p.stat().st_mtime_ns)]


def test_a_repeated_program_is_a_duplicate_not_a_failed_attempt_and_the_next_prompt_says_so(tmp_path: Path) -> None:
    spec, calls = scripted_model(tmp_path, CORRECT)
    seen: list[TaskProgress] = []
    config = OptimizeConfig(strategy="best-of-n", eval=CHECKS, generation_size=1, budget=Budget(candidates=4))
    with Archive(tmp_path / "a.db") as archive:
        summary = Optimizer(archive, LLMClient(parse_model_specs([spec])), config,
                            on_progress=lambda p: seen.append(TaskProgress(**vars(p)))).run([load_task(TASK)])
        steps = archive.steps(summary.run_id, TASK)
        listed = {s.task: s for s in archive.task_summaries()}[TASK]
    first = steps[0]
    assert first.status == "correct" and first.source is not None
    # a model that only ever repeats itself still ends: each duplicate used one reply of the budget
    assert sorted(steps) == [0, 1, 2, 3] and len(list(calls.iterdir())) == 4
    for step in (1, 2, 3):
        assert steps[step].source is None and steps[step].evaluation_id is None  # not evaluated again
        assert steps[step].failure == DUPLICATE.format(id=first.id) and duplicate_of(steps[step].failure) == first.id
    # counted apart, not as failed attempts: the summary, the archive's summary and the live row agree
    outcome = summary.outcomes[0]
    assert (outcome.attempts, outcome.duplicates) == (1, 3)
    assert (listed.attempts, listed.duplicates, listed.evaluated, listed.correct) == (1, 3, 1, 1)
    assert (seen[-1].proposed, seen[-1].duplicates, seen[-1].correct, seen[-1].state) == (1, 3, 1, "done")
    page = {t.name: t for t in read_archive(tmp_path / "a.db").tasks}[TASK]  # and the report's task page
    assert (len(page.tried), page.duplicates, page.correct, len(page.attempts)) == (1, 3, 1, 4)
    assert any(p.last == f"step 1: translate repeated candidate #{first.id}" for p in seen)
    # one call a generation: the prompts after a duplicate say which candidate it repeated
    asked = prompts(calls)
    assert [REPEATED in p for p in asked] == [False, False, True, True]
    assert f"{REPEATED}{first.id}\n" in asked[2] and "write a different one" in asked[2]


def test_a_program_recorded_but_not_yet_evaluated_is_already_a_duplicate(tmp_path: Path) -> None:
    """On a worker pool the first copy may still be on its way to a worker when the second arrives."""
    task = load_task(TASK)
    candidate = Candidate(CORRECT, strategy="translate")
    with Archive(tmp_path / "a.db") as archive:
        run_id = archive.start_run({}, 0)
        first = archive.add_candidate(run_id, Proposal(TASK, "translate", candidate=candidate), 0)
        optimizer = Optimizer(archive, LLMClient(parse_model_specs(["replay:/dev/null"])),
                              OptimizeConfig(eval=CHECKS))
        again = optimizer._dedupe(run_id, task, Proposal(TASK, "repair", candidate=candidate))
        other_run = optimizer._dedupe(archive.start_run({}, 0), task, Proposal(TASK, "repair", candidate=candidate))
    assert again.candidate is None and duplicate_of(again.failure) == first
    assert other_run.candidate is candidate  # another run may be another machine: evaluated again
    # archives written before issue 39 recorded the same thing in other words
    assert duplicate_of("the same source as candidate #7, already evaluated") == 7
    assert duplicate_of("no code block in the reply") is None


def optimize(spec: str, archive: Path, max_candidates: int, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    code = main(["optimize", TASK, "--llm", spec, "--device", "cpu", "--archive", str(archive),
                 "--max-candidates", str(max_candidates), "--generation-size", "1", "--strategy", "best-of-n",
                 "--no-live", "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def test_a_finished_run_asks_nothing_again_and_a_larger_budget_continues_it(tmp_path: Path, capsys) -> None:
    spec, calls = scripted_model(tmp_path, WRONG)
    db = tmp_path / "a.db"
    code, first, err = optimize(spec, db, 2, capsys)
    assert len(list(calls.iterdir())) == 2 and not first["already_finished"]
    assert err.splitlines()[0].split("  ") == list(COLUMNS[:PLAIN])  # piped progress names its columns first
    assert sum(line.startswith("task  state  ") for line in err.splitlines()) == 1
    assert (first["tasks"][0]["attempts"], first["tasks"][0]["duplicates"]) == (1, 1)

    again_code, again, err = optimize(spec, db, 2, capsys)
    assert len(list(calls.iterdir())) == 2  # the model was asked nothing
    assert again_code == code == 1  # the finished run's result: nothing improved
    assert "already finished" in err and "--max-candidates" in err and "Traceback" not in err
    assert "task  state" not in err  # no progress: nothing ran
    assert again["already_finished"] and again["run_id"] == first["run_id"] and again["tasks"] == first["tasks"]

    more_code, more, err = optimize(spec, db, 3, capsys)
    assert len(list(calls.iterdir())) == 3 and more_code == 1  # one more reply, in the same run
    assert more["run_id"] == first["run_id"] and not more["already_finished"]
    assert "repeated an earlier candidate" in err
    with Archive(db) as archive:
        assert [r.status for r in archive.runs()] == ["done"]
        assert sorted(archive.steps(first["run_id"], TASK)) == [0, 1, 2]


def test_a_run_recorded_before_budgets_left_its_key_is_still_resumed(tmp_path: Path) -> None:
    from warpforge.search.loop import run_config
    from warpforge.search.resume import latest_run, run_keys

    config = run_config(OptimizeConfig(eval=CHECKS), [load_task(TASK)], ["cmd:model"])
    with Archive(tmp_path / "a.db") as archive:
        old = archive.start_run({**config, "key": run_keys(config)[1]}, 0)  # keyed on the budget too
        archive.start_run({**config, "tasks": ["level1/other"], "key": "0" * 16}, 0)
        found = latest_run(archive, config)
        raised = latest_run(archive, {**config, "budget": {**config["budget"], "candidates": 99}})
    assert found is not None and found.id == old
    assert raised is None  # under the old key a different budget was a different run


def test_piped_progress_prints_its_header_once_before_the_rows(capsys) -> None:
    with ProgressView([TASK, "level1/softmax"], live=False) as view:
        view.update(TaskProgress(TASK, "starting"))
        view.update(TaskProgress("level1/softmax", "starting"))
        view.update(TaskProgress(TASK, "evaluating", proposed=1, duplicates=2))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].split("  ") == list(COLUMNS[:PLAIN]) and "duplicates" in lines[0]
    assert len(lines) == 4 and all(len(line.split("  ")) == PLAIN for line in lines[1:])
    assert lines[3].split("  ")[COLUMNS.index("duplicates")] == "2"
