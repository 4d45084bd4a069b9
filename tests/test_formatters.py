"""Every view a person reads, over every status x timing state (issue 39): no traceback, the claim
in words with its interval, and no bare `-` without a reason.

Results are generated (hypothesis), not hand-picked: each status, each timing state (not timed,
unpaired, paired within noise / faster / slower, wide but wholly above 1, an old row recorded under
the width rule with a null speedup) and random missing fields of old or foreign rows. The views:
`warpforge eval` (format_result), the demo table, eval-batch's table, a calibrate line, `archive
ls/show/best`, the agent tools' rows and the HTML report.
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warpforge.archive import Archive
from warpforge.candidate import Candidate, EvalResult, Timing
from warpforge.claim import claim_of
from warpforge.cli import calibrate_line, demo_table, format_result, main
from warpforge.cli.batch import results_table
from warpforge.propose import Proposal
from warpforge.report.html import write_report

STATUSES = ["correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected", "task_error"]
STATES = ["not_timed", "unpaired", "within_noise", "faster", "slower", "wide_above_1", "old_null_speedup"]
DROPPABLE = ["reason", "stage", "tolerance", "rel_l2_err", "max_abs_err", "kernels", "hardware", "warnings",
             "speedup", "speedup_interval", "claim", "candidate_ms", "reference_ms", "timing", "config", "roofline"]
WORDS = re.compile(r"^(not timed \(.+\)|[\d.e+]+x( faster|, within noise|, slower) \[[\d.e+]+-([\d.e+]+|inf)\])$")
BARE_DASH = re.compile(r"(^|[│|:]\s*)-(\s*[│|]|\s*$)", re.M)


def timing(ms: float, iqr: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=iqr, min_ms=ms * 0.9, mean_ms=ms, n=5, host_median_ms=ms)


def make_result(status: str, state: str, speedup: float, width: float, iqr: float) -> EvalResult:
    """One result of a status and timing state; `width` is the interval's relative width."""
    base: dict[str, Any] = {"reason": f"{status}: generated", "stage": "done", "task": "level1/relu",
                            "rel_l2_err": 1e-7, "max_abs_err": 1e-6, "tolerance": {"rel_l2": 1e-5, "max_rel": 1e-4},
                            "hardware": {"cpu": "test cpu", "torch": "2.9"}, "kernels": {"kind": "custom_kernel"}}
    if state == "not_timed" or status != "correct":
        return EvalResult(status, config={"bench": False}, **base)  # type: ignore[arg-type]
    ref = timing(2.0, 2.0 * iqr)
    cand = timing(2.0 / speedup, 2.0 / speedup * iqr)
    if state == "unpaired":
        return EvalResult(status, candidate=cand, reference=ref, **base)  # type: ignore[arg-type]
    center = {"within_noise": 1.0, "faster": max(speedup, 1.01), "slower": min(speedup, 0.99),
              "wide_above_1": max(speedup, 1.01), "old_null_speedup": speedup}[state]
    half = {"within_noise": 1 + width, "wide_above_1": 1 + width}.get(state, 1 + width / 10)
    low, high = center / half, center * half
    if state in ("faster", "wide_above_1"):
        low = max(low, 1.001)
    if state == "slower":
        high = min(high, 0.999)
    paired = {"speedup": center, "interval": [low, high], "unstable": state in ("wide_above_1", "old_null_speedup")}
    return EvalResult(status, candidate=cand, reference=ref, paired=paired, **base)  # type: ignore[arg-type]


@st.composite
def results(draw: st.DrawFn, status: str | None = None, state: str | None = None
            ) -> tuple[EvalResult, dict[str, Any], str]:
    """A result's dictionary, with `status` and `state` drawn unless given (correct half the time:
    the timed states are where the rule has something to decide)."""
    status = status or draw(st.one_of(st.just("correct"), st.sampled_from(STATUSES)))
    state = state or draw(st.sampled_from(STATES))
    r = make_result(status, state, draw(st.floats(0.01, 500.0)), draw(st.floats(0.0, 3.0)), draw(st.floats(0.0, 0.5)))
    d = r.to_dict(samples=False)
    if state == "old_null_speedup":  # recorded under the width rule: no speedup, no claim
        d.update(speedup=None, claim=None, timing_unstable=True)
    for key in draw(st.lists(st.sampled_from(DROPPABLE), max_size=5, unique=True)):
        d.pop(key, None)
    return r, d, state


def check_words(words: str) -> None:
    assert WORDS.match(words), words


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("state", STATES)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_eval_demo_batch_and_calibrate_views_say_the_claim_in_words(status: str, state: str, data: Any) -> None:
    result, d, state = data.draw(results(status, state))
    claim = claim_of(d)
    check_words(claim.words())
    if claim.timed:  # the claim follows where the interval lies, never its width
        assert claim.low is not None and claim.high is not None
        assert claim.faster == (claim.low > 1.0) and (claim.verdict == "slower") == (claim.high < 1.0)
    if state in ("wide_above_1", "faster") and status == "correct":
        assert claim.faster  # a wide interval wholly above 1 is a proven win
    if status != "correct" or state == "not_timed":
        assert not claim.timed
    text = format_result(d)
    assert "Traceback" not in text and "None" not in text and not BARE_DASH.search(text)
    if d.get("status") == "correct":
        assert claim.words() in text
    rows = [{**d, "candidate": "cand.py"}]
    table = demo_table(rows, {"n_correct": int(d.get("status") == "correct"), "n": 1})
    assert claim.words() in table and "None" not in table
    line = calibrate_line(d)
    assert claim.words() in line
    console = io.StringIO()
    from rich.console import Console

    Console(file=console, width=250).print(results_table([{**d, "candidate": "c.py", "task": "t.py", "worker": 0}]))
    assert claim.words() in console.getvalue() and not BARE_DASH.search(console.getvalue())


def record(archive: Archive, run: str, step: int, result: EvalResult, state: str) -> int:
    source = f"# attempt {step}\nclass ModelNew: ...\n"
    proposal = Proposal(task="level1/relu", strategy="translate", model="fake:model", candidate=Candidate(source),
                        prompt="[]", reply="")
    cid = archive.add_candidate(run, proposal, step)
    eid = archive.add_evaluation(cid, result)
    if state == "old_null_speedup":  # as the width rule stored it: a NULL speedup column
        con = sqlite3.connect(archive.path)
        con.execute("UPDATE evaluations SET speedup=NULL WHERE id=?", (eid,))
        con.commit()
        con.close()
    return cid


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(results(), min_size=1, max_size=4))
def test_archive_agent_and_report_views_over_generated_archives(tmp_path_factory: Any, capsys: Any,
                                                                 generated: Any) -> None:
    from warpforge.agent.tools import _attempt

    db = Path(tmp_path_factory.mktemp("a")) / "a.db"
    with Archive(db) as archive:
        run = archive.start_run({}, 0)
        ids = [record(archive, run, i, r, state) for i, (r, _, state) in enumerate(generated)]
        attempts = archive.attempts()
        for a in attempts:
            json.dumps(_attempt(a, False), allow_nan=False)  # the agent tools' rows are plain JSON
            check_words(a.claim.words())
        best = archive.best("level1/relu")
    capsys.readouterr()
    assert main(["archive", "ls", "--archive", str(db)]) == 0
    listing = capsys.readouterr().out
    assert "level1/relu" in listing and not BARE_DASH.search(listing)
    for cid in ids:
        assert main(["archive", "show", str(cid), "--archive", str(db)]) == 0
        shown = capsys.readouterr().out
        assert "speed vs eager: " in shown or "no program" in shown
        assert not BARE_DASH.search(shown)
    code = main(["archive", "best", "level1/relu", "--archive", str(db), "--json", "--out", str(db.parent / "best")])
    best_json = json.loads(capsys.readouterr().out)
    assert code == (0 if best is not None else 1)
    if best is not None:  # an old row's NULL speedup is re-read from its paired record
        assert best_json["speedup"] is not None and best_json["claim"]["words"] == best.claim.words()
        faster = [a for a in attempts if a.timed and a.claim.faster]
        assert best_json["improved"] == bool(faster)
    index = write_report(db, db.parent / "report")
    assert "Traceback" not in index.read_text()
