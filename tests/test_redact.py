"""Secrets never leave: what a child printed reaches results, the archive and LLM prompts redacted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warpforge.candidate import EvalResult
from warpforge.redact import MARK, redact, redact_data

KEY = "sk-proj-9f8e7d6c5b4a39281706f5e4d3c2b1a0ZZ"  # an OpenAI-shaped key
PLAIN_KEY = "correct-horse-battery-staple-42"  # no known shape: only the environment gives it away


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("MY_SERVICE_PASSWORD", PLAIN_KEY)


def test_values_of_secret_environment_variables_are_redacted(keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    text = f"key={KEY}\npassword: {PLAIN_KEY}!"
    assert redact(text) == f"key={MARK}\npassword: {MARK}!"
    monkeypatch.setenv("HF_TOKEN", "set-after-import-0123")  # read at call time, not at import
    assert redact("token set-after-import-0123") == f"token {MARK}"
    monkeypatch.setenv("GITHUB_TOKEN", "short")  # too short to be told from an ordinary word
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false-but-long")
    assert redact("short and false-but-long") == "short and false-but-long"
    assert redact(redact(text)) == redact(text)  # idempotent


@pytest.mark.parametrize("token", [
    "sk-ant-api03-" + "a1B2" * 10, "sk-" + "Q" * 48, "sk-proj-" + "x9" * 20, "ghp_" + "A1b2" * 9,
    "gho_" + "z" * 36, "github_pat_" + "11ABCDEFG_" * 5, "hf_" + "aBcD" * 9, "AKIAIOSFODNN7EXAMPLE",
    "xoxb-123456789012-abcdefABCDEF",
])
def test_well_known_token_shapes_are_redacted(token: str) -> None:
    assert redact(f"error: auth failed for {token} (401)") == f"error: auth failed for {MARK} (401)"


def test_bearer_tokens_and_nested_data_are_redacted() -> None:
    assert redact("Authorization: Bearer abc.def-ghi_jkl012345") == f"Authorization: Bearer {MARK}"
    data = {"name": "kernel_" + "sk-" + "k" * 30, "rows": [("hf_" + "q" * 34, 3)], "n": 1.5}
    assert redact_data(data) == {"name": "kernel_" + "sk-" + "k" * 30, "rows": [(MARK, 3)], "n": 1.5}


def test_ordinary_code_and_logs_are_left_alone() -> None:
    text = ("mask-abcdefghijklmnopqrstuvwxyz = self.hf_weights_abcdefghijklmnopqrstuvwxyz0123\n"
            "error: identifier 'task_ask-' is undefined; AKIA is a prefix; Bearer short\n")
    assert redact(text) == text


def _reference() -> object:
    from warpforge.evaluate.protocol import Loaded
    from warpforge.evaluate.verdict import Reference

    return Reference(numels=[4], sets=2, dtypes=[], tolerances=[], loaded=Loaded(None, None, {}), baselines={}, baseline_notes=[],
                     seconds=0.1, verify_sets=2)


def test_a_verdict_from_a_child_that_printed_the_key_carries_no_key(keys: None) -> None:
    from warpforge.config import EvalConfig
    from warpforge.evaluate.protocol import ParentView
    from warpforge.evaluate.sandbox import ChildOutcome
    from warpforge.evaluate.verdict import decide

    base = EvalResult("crashed", "", "static", task="t")
    cfg = EvalConfig(device="cpu")
    failed_import = ChildOutcome(
        messages=[{"type": "stage", "name": "compile", "_received": 1.0},
                  {"type": "compile_error", "message": f"ImportError: bad key {KEY}", "_received": 2.0,
                   "trace": f'File "candidate.py", line 3\nerror: {PLAIN_KEY} is not a module\n'}],
        returncode=1, output=f"leaking {KEY} and {PLAIN_KEY}\n")
    raised = ChildOutcome(
        messages=[{"type": "stage", "name": "verify", "_received": 1.0},
                  {"type": "runtime_error", "message": f"RuntimeError: {PLAIN_KEY}", "trace": f"error: {KEY}",
                   "_received": 2.0}],
        returncode=1, output=f"{PLAIN_KEY}\n")
    for outcome, status in ((failed_import, "compile_error"), (raised, "runtime_error")):
        result = decide(outcome, ParentView(), _reference(), cfg, base)
        assert result.status == status
        assert MARK in result.reason and MARK in result.output_tail
        text = json.dumps(result.to_dict())
        assert KEY not in text and PLAIN_KEY not in text


def test_results_read_back_from_json_are_redacted_too(keys: None) -> None:
    stored = {"status": "crashed", "reason": f"died printing {KEY}", "stage": "compile",
              "compile_log": f"error: {PLAIN_KEY}", "output_tail": KEY, "warnings": [KEY],
              "kernels": {"custom": [{"name": KEY}]}}
    text = json.dumps(EvalResult.from_dict(stored).to_dict())
    assert KEY not in text and PLAIN_KEY not in text


def test_a_repair_prompt_never_carries_a_key(keys: None) -> None:
    from warpforge.propose.prompts import PromptContext, Variant, render

    current = Variant(source="class ModelNew:\n    pass\n", status="compile_error",
                      reason=f"the candidate failed to import: {KEY}")
    ctx = PromptContext(task_name="t", task_source="class Model:\n    pass\n", device="cpu", current=current,
                        compile_log=f"error: cannot open {PLAIN_KEY}\nerror: {KEY}")
    messages = render("repair", ctx)
    text = json.dumps(messages)
    assert KEY not in text and PLAIN_KEY not in text
    assert MARK in messages[1]["content"]


def test_the_archive_stores_llm_text_redacted(keys: None, tmp_path: Path) -> None:
    from warpforge.archive import Archive
    from warpforge.propose import Proposal

    with Archive(tmp_path / "a.db") as archive:
        run = archive.start_run({}, seed=0)
        proposal = Proposal("t", "translate", failure=f"LLM call failed: 401 for {KEY}", prompt=f"[{PLAIN_KEY}]",
                            reply=f"here: {KEY}", analysis=PLAIN_KEY)
        candidate_id = archive.add_candidate(run, proposal, 0)
        archive.add_llm_call(run, "t", "m", "translate", 1, 1, 0.0, 1.0, error=f"LLM call failed: {KEY}")
        stored = archive.attempt(candidate_id)
        assert MARK in stored.reply and MARK in stored.failure
        assert KEY not in repr(stored) and PLAIN_KEY not in repr(stored)
        errors = archive._read("SELECT error FROM llm_calls")
        assert errors[0][0] == f"LLM call failed: {MARK}"
