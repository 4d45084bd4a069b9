"""The candidate's evidence as decide() reads it (evaluate/protocol.py)."""

from warpforge.evaluate.protocol import CANDIDATE_KINDS, BenchReport, Evidence, ParentView
from warpforge.evaluate.sandbox import ChildOutcome


def outcome(*messages: dict) -> ChildOutcome:
    return ChildOutcome(messages=[dict(m) for m in messages])


def test_evidence_keeps_the_order_of_stages_and_the_first_of_each_report() -> None:
    got = Evidence.of(outcome(
        {"type": "stage", "name": "compile", "_received": 1.0}, {"type": "compiled", "seconds": 0.1},
        {"type": "stage", "name": "verify", "_received": 2.0}, {"type": "verified", "files": []},
        {"type": "stage", "name": "bench", "_received": 3.0},
        {"type": "bench", "timing": {"median_ms": 1.0}, "fingerprints": [[0, []]], "native_threads_added": 2},
        {"type": "bench_round", "timing": {"median_ms": 1.1}, "fingerprints": []},
        {"type": "profile", "kind": "custom_kernel", "_received": 4.0},
        {"type": "rejected", "message": "first"}, {"type": "rejected", "message": "second"},
        {"type": "done", "_received": 5.0}))
    assert [name for name, _ in got.stages] == ["compile", "verify", "bench"] and got.stage == "bench"
    assert got.end_times == (5.0,) and got.done and got.verified == 1
    assert got.rejected == "first"
    assert got.bench == BenchReport({"median_ms": 1.0}, [[0, []]], 2)
    assert [r.timing["median_ms"] for r in got.rounds] == [1.0, 1.1]
    assert got.profile == {"kind": "custom_kernel"}  # the channel's stamps are not evidence


def test_malformed_reports_become_values_the_verdict_can_judge() -> None:
    got = Evidence.of(outcome({"type": "bench", "timing": "fast", "fingerprints": 7, "native_threads_added": "x"},
                              {"type": "runtime_error"}, {"type": "stage", "name": 3}))
    assert got.bench == BenchReport({}, 7, 0)
    assert got.runtime_error is not None and got.runtime_error.message == ""
    assert got.stages == () and got.stage == "compile"


def test_timed_rounds_nobody_asked_for_are_out_of_turn() -> None:
    two = Evidence.of(outcome({"type": "bench", "timing": {}}, {"type": "bench_round", "timing": {}}))
    assert not ParentView(requested_rounds=2).out_of_turn(two)
    assert ParentView(requested_rounds=1).out_of_turn(two)
    assert ParentView(requested_rounds=2, unrequested=1).out_of_turn(two)
    assert "bench" in CANDIDATE_KINDS and "compared" not in CANDIDATE_KINDS


def test_a_candidate_spec_crosses_as_json_and_refuses_fields_it_does_not_know() -> None:
    import pytest

    from warpforge.evaluate.protocol import CandidateSpec

    spec = CandidateSpec("c.py", "cpu", {"TORCH_EXTENSIONS_DIR": "/x"}, positions=[[0, 9]], verify_sets=5,
                         bench_args={"rep_ms": 20.0})
    assert CandidateSpec.from_json(spec.to_json()) == spec
    with pytest.raises(TypeError):
        CandidateSpec.from_json('{"candidate_path": "c.py", "device": "cpu", "env": {}, "positons": []}')
