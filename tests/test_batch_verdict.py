"""A batch verdict (`Judge.evaluate_many`, issue 44 part 1): a group of candidates of one task
shares one fresh draw of input sets, and each member gets the verdict it gets alone.

Sharing is safe only while no member can reach another: these tests check the statuses match
the one-at-a-time ones, that the reference process drew once for the group, that neither a
member's private /tmp nor its compile cache carries answers to a later member of the group, and
that the content-cache probe is still confirmed on a fresh draw of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from warpforge import Candidate, EvalConfig, Judge, load_task

FIXTURES = Path(__file__).parent / "fixtures"
FAST = {"device": "cpu", "trials": 5, "warmup_ms": 5.0, "rep_ms": 20.0, "min_reps": 5, "timeout_s": 60.0}
MATMUL = FIXTURES / "tasks" / "matmul.py"


def candidate(name: str) -> Candidate:
    return Candidate.from_file(FIXTURES / "candidates" / f"{name}.py")


def test_a_group_gets_the_statuses_each_member_gets_alone_from_one_draw() -> None:
    # honest, wrong (bf16 compute), an exploit behaviour refuses (zeroes its inputs), one the static
    # policy refuses (it never reaches a draw)
    names = ["honest_matmul", "low_precision_bf16", "zero_inputs", "read_reference_from_disk"]
    cfg = EvalConfig.of(**FAST, bench=False)  # type: ignore[arg-type]
    with Judge(load_task(MATMUL), cfg) as judge:
        alone = [judge.evaluate(candidate(n)) for n in names]
        before = judge.reference.draws
        grouped = judge.evaluate_many([candidate(n) for n in names])
        assert judge.reference.draws == before + 1  # one draw for the whole group
    assert [r.status for r in alone] == ["correct", "incorrect", "rejected", "rejected"], [r.reason for r in alone]
    assert [r.status for r in grouped] == [r.status for r in alone], [r.reason for r in grouped]
    assert [r.candidate_id for r in grouped] == [candidate(n).id for n in names]
    assert "modified its input" in grouped[2].reason
    # the draw is counted once, in the stage times of the member that drew it
    assert grouped[0].stage_seconds["reference"] > 0 and grouped[1].stage_seconds["reference"] == 0


def test_a_member_leaves_nothing_a_later_member_of_its_group_can_read(tmp_path: Path) -> None:
    # each member records its answers (input bytes -> output) where it can write: its private /tmp
    # (cross_candidate_cache) or its compile cache, as a "source" the cache publishes (stash_in_cache);
    # on the shared sets a later member finding either would answer without computing (CACHE-HIT)
    stash = Candidate(STASH_IN_COMPILE_CACHE)
    cfg = EvalConfig.of(**FAST, bench=False, static_checks=False, cache_dir=str(tmp_path))  # type: ignore[arg-type]
    with Judge(load_task(MATMUL), cfg) as judge:
        before = judge.reference.draws
        grouped = judge.evaluate_many([candidate("cross_candidate_cache"), candidate("cross_candidate_cache"),
                                       stash, stash])
        assert judge.reference.draws == before + 1
        for record in grouped:
            assert record.correct, record.reason
            assert "CACHE-HIT" not in record.output_tail and "STASH-FOUND" not in record.output_tail
        # its build products were published once the group was judged (not dropped): a later
        # evaluation of the same source finds the stash, and its fresh draw makes it useless
        later = judge.evaluate(stash)
        assert "STASH-FOUND" in later.output_tail and "CACHE-HIT" not in later.output_tail, later.output_tail
        assert later.status == "incorrect", later.reason


@pytest.mark.slow  # three draws and a timed run (about 15 s); test_exploits checks the confirmation alone
def test_the_content_cache_probe_is_still_confirmed_on_a_fresh_draw() -> None:
    cfg = EvalConfig.of(**FAST, bench=True)  # type: ignore[arg-type]
    with Judge(load_task(MATMUL), cfg) as judge:
        before = judge.reference.draws
        cached, honest = judge.evaluate_many([candidate("cache_by_content_copy"), candidate("honest_matmul")])
        assert cached.status in {"rejected", "incorrect"}, cached.reason
        assert honest.correct, honest.reason
        fired = "independent draw" in cached.reason or any("content-cache probe fired" in w for w in cached.warnings)
        # probe fired: its confirming run drew its own sets, and the next member drew the group's again
        assert judge.reference.draws == before + (3 if fired else 1), (cached.reason, cached.warnings)


STASH_IN_COMPILE_CACHE = '''
import hashlib
import os

import torch
import torch.nn as nn

STASH = os.path.join(os.environ.get("TORCH_EXTENSIONS_DIR", "/tmp"), "stash", "answers.cpp")
_replay = os.path.exists(STASH)
_cache = torch.load(STASH) if _replay else {}
if _replay:
    print("STASH-FOUND", flush=True)


def _key(a, b):
    return hashlib.sha256(a.numpy().tobytes() + b.numpy().tobytes()).hexdigest()


class ModelNew(nn.Module):
    def forward(self, a, b):
        key = _key(a, b)
        if _replay:
            if key in _cache:
                print("CACHE-HIT", flush=True)
                return _cache[key].clone()
            return torch.zeros(a.shape[0], b.shape[1])
        out = a @ b
        _cache[key] = out.clone()
        os.makedirs(os.path.dirname(STASH), exist_ok=True)
        torch.save(_cache, STASH)
        return out
'''
