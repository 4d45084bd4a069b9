"""The candidate's evidence as decide() reads it (evaluate/protocol.py)."""

from warpforge.evaluate.protocol import CANDIDATE_KINDS, BenchReport, Evidence, ParentView
from warpforge.evaluate.sandbox import ChildOutcome


def outcome(*messages: dict) -> ChildOutcome:
    return ChildOutcome(messages=[dict(m) for m in messages])


def test_evidence_keeps_the_order_of_stages_and_the_first_of_each_report() -> None:
    got = Evidence.of(outcome(
        {"type": "stage", "name": "compile", "_received": 1.0}, {"type": "compiled", "seconds": 0.1},
        {"type": "stage", "name": "verify", "_received": 2.0}, {"type": "verified", "files": [], "types": []},
        {"type": "stage", "name": "bench", "_received": 3.0},
        {"type": "bench", "timing": {"median_ms": 1.0}, "fingerprints": [[0, []]], "native_threads_added": 2},
        {"type": "bench_round", "timing": {"median_ms": 1.1}, "fingerprints": []},
        {"type": "profile", "kernels": {"kind": "custom_kernel"}, "_received": 4.0},
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
                              {"type": "runtime_error"}, {"type": "stage", "name": 3},
                              {"type": "bench_round", "timing": {}, "fingerprints": [], "forged": True}))
    assert got.bench == BenchReport({}, 7, 0)
    # a round that does not parse is still a round (decide() refuses its empty timing) ...
    assert got.rounds == (BenchReport({}, 7, 0), BenchReport({}, [], 0))
    # ... while an ending without its fields, or a stage with no name, counts as not sent
    assert got.runtime_error is None
    assert got.stages == () and got.stage == "compile"


def test_every_message_crosses_the_channel_as_json_and_back() -> None:
    import json

    from warpforge.evaluate import protocol

    samples = [protocol.Ready(), protocol.StageEntered("verify"), protocol.Compiled(0.5),
               protocol.CompileFailed("SyntaxError: x", "trace"), protocol.Verified(["a.pt"], [["Tensor"]]),
               protocol.FirstRound({"median_ms": 1.0}, [[0, [1.5]]], 1), protocol.Round({"median_ms": 1.0}, []),
               protocol.Profiled({"kind": "custom_kernel"}), protocol.Done(), protocol.Refused("no"),
               protocol.Crashed("ValueError: v", "t"), protocol.Crashed("TypeError: t", "", "ModelNew(*init_inputs)"),
               protocol.WrongOutputs("the output has shape (3,); the reference's is (4,)"),
               protocol.HarnessFailed("IndexError: i (in warpforge/evaluate/inputs.py:1 in f)", "t"),
               protocol.Loaded(2.0, None, {"gpu": "H100"}),
               protocol.Baseline("eager", {"median_ms": 1.0}), protocol.BaselineFailed("torch_compile", "boom"),
               protocol.ReferenceReady(["torch.float32"], [[[1e-7, 1e-6]]], [], [16], 3, 2, 64), protocol.Drawn(),
               protocol.Compared(True, "ok", 0.0, 0.0, [[{"values": [1.0], "norm": 1.0, "scale": 1.0}]]),
               protocol.Timed({"median_ms": 2.0}), protocol.TaskFailed("bad task"),
               protocol.FreshChecked([[{"values": [1.0], "norm": 1.0, "scale": 1.0}]])]
    assert {type(m).KIND for m in samples} == protocol.CANDIDATE_KINDS | protocol.REFERENCE_KINDS
    for message in samples:
        raw = json.loads(message.to_json())
        assert protocol.parse({**raw, "_received": 1.0}) == message
        assert protocol.parse({**raw, "extra": 1}) is None  # a field no message of that kind has
    assert protocol.parse({"type": "verified", "files": []}) is None  # a field missing
    assert protocol.parse({"type": "hello"}) is None


def test_requests_to_the_reference_process_cross_as_json() -> None:
    from warpforge.evaluate import protocol

    for request in (protocol.Draw("/x/inputs.pt", [1, 2], 1, None, True), protocol.Compare(["o.pt"], [[0]], [{}]),
                    protocol.TimeRound(7, {"rep_ms": 5.0}, False, [[0, 3]]), protocol.CheckFresh([[1, 2**62]], [[0, 3]])):
        assert protocol.request_from_json(protocol.request_json(request)) == request
    spec = protocol.ReferenceSpec("t.py", {}, "cpu", 1, False, None, {}, "abc")
    assert protocol.ReferenceSpec.from_json(spec.to_json()) == spec


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
                         timing={"rep_ms": 20.0})
    assert CandidateSpec.from_json(spec.to_json()) == spec
    with pytest.raises(TypeError):
        CandidateSpec.from_json('{"candidate_path": "c.py", "device": "cpu", "env": {}, "positons": []}')


def test_the_stage_runner_stops_every_exception_at_the_stage_boundary() -> None:
    from warpforge.errors import Rejected
    from warpforge.evaluate import protocol, worker

    class Channel:
        def __init__(self) -> None:
            self.posted: list[protocol.Message] = []

        def post(self, message: protocol.Message) -> None:
            self.posted.append(message)

    channel = Channel()
    ok = worker._stage(channel, "verify", lambda: 42)  # type: ignore[arg-type]
    assert ok.value == 42 and ok.error is None and ok.seconds >= 0
    assert channel.posted == [protocol.StageEntered("verify")]

    class Leaves:
        def __call__(self) -> None:
            raise SystemExit(0)  # candidate code may try to end the process: a crash, not an exit

    crashed = worker._stage(channel, None, lambda: worker._forward(Leaves(), []))  # type: ignore[arg-type]
    assert isinstance(crashed.error, SystemExit) and "SystemExit" in crashed.trace
    ending = crashed.ending()
    assert isinstance(ending, protocol.Crashed) and ending.message == "SystemExit: 0" and ending.call == "forward()"
    assert "in __call__" in ending.trace and "warpforge/" not in ending.trace  # from the candidate's call inward
    assert len(channel.posted) == 1  # None: no new stage entered

    def refuse() -> None:
        raise Rejected("forward() modified its input tensors in place")

    assert worker._stage(channel, "bench", refuse).ending() == protocol.Refused(  # type: ignore[arg-type]
        "forward() modified its input tensors in place")
