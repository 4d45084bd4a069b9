"""benchmarks/kernelbench_final.py, issue 22's closing table, on a small made-up campaign: the
best verified kernel of each task and CUDA-L1's go into one manifest; the table credits a task
without a verified faster kernel with 1.00x on both sides, and counts pass@k and custom kernels."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from test_archive import proposal, result

from warpforge.archive import Archive


def test_the_final_table_from_a_campaign_and_one_run(tmp_path: Path, bench_script: Any) -> None:
    final = bench_script("kernelbench_final")
    kb, l1 = tmp_path / "KernelBench", tmp_path / "cudal1"
    for p in (kb / "level1" / "1_A.py", kb / "level1" / "2_B.py", l1 / "L1_1.py"):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("# a program\n")
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps({"tasks": [{"task": "level1/1_A", "path": "level1/1_A.py"},
                                            {"task": "level1/2_B", "path": "level1/2_B.py"}]}))
    order = tmp_path / "order.txt"
    order.write_text(f"{l1}/level1/1_A.py:{l1}/L1_1.py\n")
    db = tmp_path / "kb.db"
    with Archive(db) as archive:
        run = archive.start_run({}, 0)
        for step, (task, source, res) in enumerate([
                ("level1/1_A", "fast = 1\n", result(ms=1.0, ref_ms=2.0)),  # 2.0x in the campaign
                ("level1/1_A", "wrong = 1\n", result("incorrect", ms=None)),
                ("level1/2_B", "slow = 1\n", result("incorrect", ms=None))]):
            cid = archive.add_candidate(run, proposal(source, task=task), step)
            archive.add_evaluation(cid, res)
    out = tmp_path / "final"
    final.prepare(argparse.Namespace(archive=str(db), out=str(out), sample=str(sample), kernelbench=str(kb),
                                     cudal1=str(order)))
    manifest = [line for line in (out / "manifest.txt").read_text().splitlines() if not line.startswith("#")]
    ours = json.loads((out / "final_meta.json").read_text())[0]["ours"]["file"]  # the best's candidate id in it
    assert ours.startswith("level1__1_A__c") and ours.endswith(".py")
    assert manifest == [f"{kb}/level1/1_A.py:ours/{ours}", f"{kb}/level1/1_A.py:cudal1/level1__1_A.py"]
    assert (out / "ours" / ours).read_text() == "fast = 1\n"
    # the final run (eval-batch --json of the manifest): ours 1.8x with its own kernels, CUDA-L1 1.2x
    runs = [{"task": f"{kb}/level1/1_A.py", "candidate": str(out / "ours" / ours), "status": "correct",
             "correct": True, "speedup": 1.8, "speedup_interval": [1.7, 1.9], "speedup_vs_compile": 1.5,
             "kernels": {"kind": "custom_kernel"}},
            {"task": f"{kb}/level1/1_A.py", "candidate": str(out / "cudal1" / "level1__1_A.py"), "status": "correct",
             "correct": True, "speedup": 1.2, "speedup_interval": [1.1, 1.3], "kernels": {"kind": "custom_kernel"}}]
    (tmp_path / "final.jsonl").write_text("eval-batch's progress line\n" + "\n".join(json.dumps(r) for r in runs) + "\n")
    summary = final.table(argparse.Namespace(archive=str(db), final=str(out), results=str(tmp_path / "final.jsonl"),
                                             out=str(tmp_path / "table")))
    assert summary["faster_than_eager"] == 1 and summary["faster_share"] == 0.5
    assert math.isclose(summary["geomean_ours"], math.sqrt(1.8)) and math.isclose(summary["geomean_cudal1"], math.sqrt(1.2))
    assert summary["custom_share_of_bests"] == 1.0 and summary["pass_at_k"][1] == 0.25  # (1/2 + 0/1) / 2
    assert summary["targets"] == {"faster_share >= 0.80": False, "geomean_ours > geomean_cudal1": True,
                                  "custom_share >= 0.75": True}
    table = (tmp_path / "table" / "final_table.md").read_text()
    assert "| level1/1_A | 2 (1) | 1.80x (1.70–1.90) | 1.50x | 1.20x (1.10–1.30) | custom |" in table
    # the manifest run in two parts (device calls), the second also re-running ours at 1.6x: the same
    # table from both files, the later file's result of a pair winning
    (tmp_path / "part1.jsonl").write_text(json.dumps(runs[0]) + "\n")
    (tmp_path / "part2.jsonl").write_text(json.dumps(runs[1]) + "\n" + json.dumps({**runs[0], "speedup": 1.6}) + "\n")
    parts = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "parts"),
                                           results=[str(tmp_path / "part1.jsonl"), str(tmp_path / "part2.jsonl")]))
    assert math.isclose(parts["geomean_ours"], math.sqrt(1.6)) and math.isclose(parts["geomean_cudal1"], math.sqrt(1.2))
    assert "| level1/2_B | 1 (0) | no kernel | - | no kernel |" in table
    # a candidate timed ahead for a task without a verified best is not that task's result
    with Archive(db) as archive:
        waiting = archive.add_candidate(archive.start_run({}, 0), proposal("next = 1\n", task="level1/2_B"), 9)
    final.prepare(argparse.Namespace(archive=str(db), out=str(out), sample=str(sample), kernelbench=str(kb),
                                     cudal1=str(order), ahead=[waiting]))
    early = {"task": f"{kb}/level1/2_B.py", "candidate": str(out / "ours" / f"level1__2_B__c{waiting}.py"),
             "status": "correct", "correct": True, "speedup": 3.0, "speedup_interval": [2.9, 3.1]}
    (tmp_path / "early.jsonl").write_text(json.dumps(early) + "\n")
    ahead = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "ahead"),
                                           results=[str(tmp_path / "part1.jsonl"), str(tmp_path / "early.jsonl")]))
    assert ahead["faster_than_eager"] == 1 and math.isclose(ahead["geomean_ours"], math.sqrt(1.8))


def test_pending_pairs_across_calls_and_a_best_that_changed(tmp_path: Path, bench_script: Any) -> None:
    """`pending` leaves out the pairs with a result in FINAL/results/ (a device call cut by its limit
    brought back some); a best that changed after a partial run is a new pair, and the table never
    takes the old best's result for it."""
    final = bench_script("kernelbench_final")
    kb = tmp_path / "KernelBench"
    for name in ("1_A", "2_B"):
        (kb / "level1").mkdir(parents=True, exist_ok=True)
        (kb / "level1" / f"{name}.py").write_text("# a program\n")
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps({"tasks": [{"task": "level1/1_A", "path": "level1/1_A.py"},
                                            {"task": "level1/2_B", "path": "level1/2_B.py"}]}))
    (tmp_path / "order.txt").write_text("")
    db, out = tmp_path / "kb.db", tmp_path / "final"
    with Archive(db) as archive:
        run = archive.start_run({}, 0)
        for step, task in enumerate(("level1/1_A", "level1/2_B")):
            archive.add_evaluation(archive.add_candidate(run, proposal(f"k{step} = 1\n", task=task), step),
                                   result(ms=1.0, ref_ms=2.0))
    prep = argparse.Namespace(archive=str(db), out=str(out), sample=str(sample), kernelbench=str(kb),
                              cudal1=str(tmp_path / "order.txt"))
    final.prepare(prep)
    first = {m["task"]: m["ours"]["file"] for m in json.loads((out / "final_meta.json").read_text())}
    (out / "results").mkdir()
    row_a = {"task": f"{kb}/level1/1_A.py", "candidate": str(out / "ours" / first["level1/1_A"]),
             "status": "correct", "correct": True, "speedup": 1.9}
    (out / "results" / "call-1.jsonl").write_text(json.dumps(row_a) + "\n")
    final.pending(argparse.Namespace(final=str(out), match=None, exclude=None))
    assert (out / "pending.txt").read_text() == f"{kb}/level1/2_B.py:ours/{first['level1/2_B']}\n"
    final.pending(argparse.Namespace(final=str(out), match=None, exclude="2_B"))
    assert (out / "pending.txt").read_text() == ""
    # 1_A gets a faster best after the partial run: its new file is pending, and the old result is not taken
    with Archive(db) as archive:
        run = archive.start_run({}, 0)
        archive.add_evaluation(archive.add_candidate(run, proposal("k9 = 1\n", task="level1/1_A"), 9),
                               result(ms=0.5, ref_ms=2.0))
    final.prepare(prep)
    now = {m["task"]: m["ours"]["file"] for m in json.loads((out / "final_meta.json").read_text())}
    assert now["level1/1_A"] != first["level1/1_A"] and now["level1/2_B"] == first["level1/2_B"]
    final.pending(argparse.Namespace(final=str(out), match="1_A", exclude=None))
    assert (out / "pending.txt").read_text() == f"{kb}/level1/1_A.py:ours/{now['level1/1_A']}\n"
    # a candidate still waiting for its campaign result can be timed ahead; it counts once it is the best
    with Archive(db) as archive:
        run = archive.start_run({}, 0)
        waiting = archive.add_candidate(run, proposal("k10 = 1\n", task="level1/2_B"), 10)
    final.prepare(argparse.Namespace(**{**vars(prep), "ahead": [waiting]}))
    final.pending(argparse.Namespace(final=str(out), match="2_B", exclude=None))
    assert (out / "pending.txt").read_text().splitlines() == [
        f"{kb}/level1/2_B.py:ours/{now['level1/2_B']}", f"{kb}/level1/2_B.py:ours/level1__2_B__c{waiting}.py"]
    assert (out / "ours" / f"level1__2_B__c{waiting}.py").read_text() == "k10 = 1\n"
    final.prepare(prep)
    summary = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "t"),
                                             results=[str(out / "results" / "call-1.jsonl")]))
    assert summary["faster_than_eager"] == 0  # the stale 1.9x is not the current best's
    # the current best's result: 1.09x whose interval reaches 1.00 is not faster beyond noise
    row_b = {"task": f"{kb}/level1/1_A.py", "candidate": str(out / "ours" / now["level1/1_A"]),
             "status": "correct", "correct": True, "speedup": 1.09, "speedup_interval": [0.95, 1.21]}
    (out / "results" / "call-2.jsonl").write_text(json.dumps(row_b) + "\n")
    results = [str(p) for p in sorted((out / "results").glob("*.jsonl"))]
    noisy = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "t2"), results=results))
    assert noisy["faster_than_eager"] == 0 and noisy["geomean_ours"] == 1.0
    noisy_md = (tmp_path / "t2" / "final_table.md").read_text()
    assert "1.09x (0.95–1.21)" in noisy_md
    # what is not credited is listed with its reason
    assert "- level1/1_A, ours: 1.09x over eager, within the timing's noise" in noisy_md
    assert "- level1/2_B, ours: not timed yet" in noisy_md
    assert "- level1/2_B, CUDA-L1: CUDA-L1 released no kernel for this task" in noisy_md
    assert "| level1/2_B | 1 (1) | not timed yet | - | no kernel |" in noisy_md
    (out / "results" / "call-2.jsonl").write_text(json.dumps({**row_b, "speedup_interval": [1.02, 1.17]}) + "\n")
    clear = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "t3"), results=results))
    assert clear["faster_than_eager"] == 1 and math.isclose(clear["geomean_ours"], math.sqrt(1.09))
    assert not (tmp_path / "t3" / "final_speedups.html").exists()  # these rows carry no eager time to plot against
    # timed without pairs (sets too big to hold twice): the two runs' interquartile ranges decide
    def unpaired(c_iqr: float) -> dict[str, Any]:
        timing = {"candidate": {"median_ms": 3.0, "iqr_ms": c_iqr}, "reference": {"median_ms": 3.3, "iqr_ms": 0.02}}
        return {**row_b, "speedup": 1.1, "speedup_interval": None, "timing": timing}
    (out / "results" / "call-2.jsonl").write_text(json.dumps(unpaired(0.05)) + "\n")
    tight = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "t4"), results=results))
    assert tight["faster_than_eager"] == 1 and math.isclose(tight["geomean_ours"], math.sqrt(1.1))
    assert "1.10x (unpaired 1.09–1.11)" in (tmp_path / "t4" / "final_table.md").read_text()
    (out / "results" / "call-2.jsonl").write_text(json.dumps(unpaired(0.7)) + "\n")
    wide = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "t5"), results=results))
    assert wide["faster_than_eager"] == 0 and wide["geomean_ours"] == 1.0
    # noise wider than the candidate's own time: still judged by the low end, never credited by default
    assert final._credited(unpaired(7.0)) == 1.0 and final._unpaired_range(unpaired(7.0))[1] == math.inf
    # a speedup with neither an interval nor timings to judge its noise by is not credited
    assert final._credited({**row_b, "speedup": 1.5, "speedup_interval": None}) == 1.0


def test_a_best_the_review_set_aside_is_timed_beside_the_next_best_and_not_claimed(tmp_path: Path, bench_script: Any) -> None:
    final = bench_script("kernelbench_final")
    kb = tmp_path / "KernelBench"
    (kb / "level2").mkdir(parents=True)
    (kb / "level2" / "22_X.py").write_text("# a program\n")
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps({"tasks": [{"task": "level2/22_X", "path": "level2/22_X.py"}]}))
    (tmp_path / "order.txt").write_text("")
    db, out = tmp_path / "kb.db", tmp_path / "final"
    with Archive(db) as archive:
        run = archive.start_run({}, 0)
        ids = []
        for step, (source, ms) in enumerate([("fp16_split = 1\n", 0.5), ("tf32x3 = 1\n", 1.0)]):
            ids.append(archive.add_candidate(run, proposal(source, task="level2/22_X"), step))
            archive.add_evaluation(ids[-1], result(ms=ms, ref_ms=2.0))
    with pytest.raises(SystemExit):
        final.set_aside(["137"])
    final.prepare(argparse.Namespace(archive=str(db), out=str(out), sample=str(sample), kernelbench=str(kb),
                                     cudal1=str(tmp_path / "order.txt"), set_aside=[f"{ids[0]}=3xFP16 split"]))
    meta = json.loads((out / "final_meta.json").read_text())[0]
    assert meta["ours"]["candidate_id"] == ids[1] and meta["flagged"]["candidate_id"] == ids[0]
    assert (out / "flagged" / meta["flagged"]["file"]).read_text() == "fp16_split = 1\n"
    rows = [{"task": f"{kb}/level2/22_X.py", "candidate": str(out / side / meta[side]["file"]), "status": "correct",
             "correct": True, "speedup": s, "speedup_interval": [s - 0.1, s + 0.1]}
            for side, s in (("ours", 1.6), ("flagged", 3.5))]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "t"),
                                             results=[str(tmp_path / "r.jsonl")]))
    assert math.isclose(summary["geomean_ours"], 1.6) and math.isclose(summary["geomean_ours_counting_set_aside"], 3.5)
    assert "| 3.50x (3.40–3.60): 3xFP16 split |" in (tmp_path / "t" / "final_table.md").read_text()
    # with the eager time recorded, the page plots each correct result once, with its task on hover
    timed = [{**r, "reference_ms": 2.0, "compile_ms": 1.6} for r in rows]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timed))
    final.table(argparse.Namespace(archive=str(db), final=str(out), out=str(tmp_path / "t"),
                                   results=[str(tmp_path / "r.jsonl")]))
    page = (tmp_path / "t" / "final_speedups.html").read_text()
    assert page.count("<circle class=\"dot\"") == 2 and "level2/22_X: ours (best verified) 1.60x" in page
    assert "level2/22_X: torch.compile 1.25x" in page


TASK = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(8)]
def get_init_inputs():
    return []
"""


def test_adopt_gives_a_pending_job_the_final_runs_result_of_the_same_candidate(tmp_path: Path, bench_script: Any) -> None:
    """A campaign job still pending whose candidate the final run timed ahead gets that result, only
    when source, task file and evaluator configuration are the campaign's; a task_error is not adopted."""
    from warpforge.candidate import Candidate
    from warpforge.task import load_task

    final = bench_script("kernelbench_final")
    task = tmp_path / "level1" / "1_A.py"
    task.parent.mkdir()
    task.write_text(TASK)
    box = tmp_path / "outbox"
    (box / "jobs").mkdir(parents=True)
    (box / "results").mkdir()
    config = {"device": "cuda", "trials": 5}
    digest = load_task(task).source_hash

    def job(key: str, source: str, task_hash: str = digest) -> None:
        (box / "jobs" / f"{key}.json").write_text(json.dumps(
            {"key": key, "task": str(task), "task_hash": task_hash, "label": f"candidate {key}", "source": source}))

    job("done", "k0 = 1\n")
    (box / "results" / "done.json").write_text(json.dumps({"task": "level1/1_A", "status": "correct", "config": config}))
    job("ahead", "k1 = 1\n")
    job("other_config", "k2 = 1\n")
    job("machine_failed", "k3 = 1\n")
    job("not_timed", "k4 = 1\n")
    job("task_changed", "k5 = 1\n", task_hash="0" * 16)

    def row(source: str, **extra: Any) -> dict[str, Any]:
        return {"task": str(task), "candidate": f"final/ours/level1__1_A__c{source[1]}.py",
                "candidate_id": Candidate(source).id, "status": "correct", "speedup": 1.5, "config": config, **extra}

    results = tmp_path / "call-1.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in [
        row("k1 = 1\n", speedup=1.2), row("k1 = 1\n"), row("k2 = 1\n", config={**config, "trials": 3}),
        row("k3 = 1\n", status="task_error"), row("k5 = 1\n")]))
    n = final.adopt(argparse.Namespace(outbox=str(box), results=[str(results)]))
    assert n == 1
    assert sorted(p.stem for p in (box / "results").glob("*.json")) == ["ahead", "done"]
    adopted = json.loads((box / "results" / "ahead.json").read_text())
    assert adopted["speedup"] == 1.5 and adopted["adopted_from"] == "level1__1_A__c1.py"  # the later row wins


GPU_PROFILE = {"method": "torch.profiler (CUDA)", "custom": [], "library": [], "pytorch": [], "other": []}


def test_the_cuda_l1_classes_name_the_exploits_the_exploit_tests_define(bench_script: Any) -> None:
    """kernelbench_summary.classify (issue 40): an output buffer handed back again and inputs
    written are exploits, as tests/test_exploits.py's output_buffer_reuse and mutate_inputs are, not
    policy or wrong answers; a correct kernel whose calls ran no GPU work but fills (CUDA-L1's old
    level2/66 returns a stored torch.ones) stays accepted and is credited 1.00x."""
    summary = bench_script("kernelbench_summary")
    reuse = {"status": "rejected", "stage": "verify",
             "reason": "the output of call 1 changed during later calls (an output buffer reused across calls or written late)"}
    kept = {"status": "rejected", "stage": "bench", "reason": "a timed call returned a buffer it did not allocate for that call"}
    writes = {"status": "rejected", "stage": "verify", "reason": "forward() modified its input tensors in place"}
    assert [summary.classify(r)[0] for r in (reuse, kept, writes)] == ["exploit"] * 3
    ones = {"status": "correct", "correct": True, "speedup": 9.0, "kernels": GPU_PROFILE}
    filled = {**ones, "kernels": {**GPU_PROFILE, "pytorch": ["void at::native::vectorized_elementwise_kernel<4, "
                                                              "at::native::FillFunctor<float> >(int, ...)"]}}
    honest = {**ones, "kernels": {**GPU_PROFILE, "custom": ["relu_kernel(float const*, float*, int)"]}}
    cpu = {**ones, "kernels": {"method": "torch.profiler (CPU)"}}
    for constant in (ones, filled):
        cls, why = summary.classify(constant)
        assert cls == "accepted" and why.startswith("a constant output")
        assert summary.credited_speedup(constant) == 1.0
    assert summary.classify(honest) == ("accepted", "") and summary.credited_speedup(honest) == 9.0
    assert summary.classify(cpu) == ("accepted", "") and summary.credited_speedup(cpu) == 9.0  # no GPU profile: not judged
    # what stays where it was
    assert summary.classify({"status": "rejected", "stage": "static", "reason": "the candidate imports time"})[0] == "policy"
    assert summary.classify({"status": "incorrect", "stage": "verify", "rel_l2_err": 0.5, "reason": "error"})[0] == "wrong"
    # the final table does not credit a constant output either
    final = bench_script("kernelbench_final")
    assert final._credited({**ones, "speedup_interval": [8.0, 10.0]}) == 1.0
    assert final._credited({**honest, "speedup_interval": [8.0, 10.0]}) == 9.0


def _row(task: str, ours: float | None, l1: float | None, **extra: Any) -> dict[str, Any]:
    def side(s: float | None) -> dict[str, Any] | None:
        return None if s is None else {"correct": s > 0, "status": "correct" if s > 0 else "incorrect", "speedup": abs(s)}
    return {"task": task, "ours": side(ours), "cudal1": side(l1), "has_kernel": {"ours": True, "cudal1": l1 is not None},
            "ours_credited": max(ours or 1.0, 1.0), "cudal1_credited": max(l1 or 1.0, 1.0), **extra}


def test_like_for_like_beside_coverage_and_cuda_l1_at_its_own_sizes(tmp_path: Path, bench_script: Any) -> None:
    """`compare`: the coverage geomean counts every task (1.00x where a side has no verified faster
    kernel); like for like takes only the tasks where both verified in the same setting; the old
    sizes' rows are matched to the table's tasks by level and id, whatever the file's name."""
    final = bench_script("kernelbench_final")
    rows = [_row("level1/1_A", 4.0, 1.0), _row("level1/2_B", 2.0, -1.0), _row("level1/3_C", 9.0, None),
            _row("level1/4_D", 1.5, 1.2, like_for_like=False)]  # a task whose two sides ran on two kinds of GPU
    table = tmp_path / "final_table.json"
    table.write_text(json.dumps({"summary": {"gpu": "H100"}, "rows": rows}))
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in [
        {"task": "old/level1/1_A_renamed.py", "candidate": "final_old/cudal1/level1__1_A.py", "status": "correct",
         "correct": True, "speedup": 1.6, "speedup_interval": [1.5, 1.7]},
        {"task": "old/level1/2_B.py", "candidate": "final_old/ours/x.py", "status": "correct", "correct": True,
         "speedup": 5.0, "speedup_interval": [4.0, 6.0]}]))  # not CUDA-L1's: left out
    got = final.compare(argparse.Namespace(table=str(table), old_sizes=[str(old)]))
    assert math.isclose(got["coverage"]["geomean_ours"], (4.0 * 2.0 * 9.0 * 1.5) ** 0.25)
    assert math.isclose(got["coverage"]["geomean_cudal1"], 1.2 ** 0.25)
    lf = got["like_for_like"]
    assert lf["tasks"] == 1 and lf["names"] == ["level1/1_A"] and lf["geomean_ours"] == 4.0 and lf["geomean_cudal1"] == 1.0
    o = got["old_sizes"]
    assert (o["kernels"], o["timed"], o["verified"]) == (3, 1, 1) and math.isclose(o["geomean_over_all_tasks"], 1.6 ** 0.25)
    # the table's own flag: same kind of GPU and the same task file
    a = {"correct": True, "task": "kb/level1/1_A.py", "hardware": {"gpu": "H100"}}
    assert final._same_setting(a, dict(a)) and not final._same_setting(a, {**a, "hardware": {"gpu": "H200"}})
    assert not final._same_setting(a, {**a, "task": "old/level1/1_A.py"}) and not final._same_setting(a, None)


def test_prepare_old_pairs_cuda_l1_with_the_revision_it_was_written_for(tmp_path: Path, bench_script: Any) -> None:
    """`prepare-old` finds each task at the old revision by level and id (names changed since) and
    refuses a checkout whose files are not the release's ref_code."""
    final = bench_script("kernelbench_final")
    ref, kernel = tmp_path / "kb" / "cudal1" / "level3" / "37_LSTMCn.py", tmp_path / "kb" / "cudal1" / "L3_37.py"
    ref.parent.mkdir(parents=True)
    ref.write_text("batch_size = 10\n")
    kernel.write_text("class ModelNew: pass\n")
    (tmp_path / "order.txt").write_text(f"{ref}:{kernel}\n")
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps({"tasks": [{"task": "level3/37_LSTMCn", "path": "level3/37_LSTMCn.py"},
                                            {"task": "level3/3_X", "path": "level3/3_X.py"}]}))
    old = tmp_path / "old" / "KernelBench" / "level3"
    old.mkdir(parents=True)
    (old / "37_LTSMCn.py").write_text("batch_size = 10\n")
    args = argparse.Namespace(old_kernelbench=str(old.parent), out=str(tmp_path / "out"), sample=str(sample),
                              cudal1=str(tmp_path / "order.txt"))
    final.prepare_old(args)
    assert (tmp_path / "out" / "manifest.txt").read_text().splitlines()[1:] == [
        f"{old / '37_LTSMCn.py'}:cudal1/level3__37_LSTMCn.py"]
    assert (tmp_path / "out" / "cudal1" / "level3__37_LSTMCn.py").read_text() == "class ModelNew: pass\n"
    (old / "37_LTSMCn.py").write_text("batch_size = 1024\n")  # today's sizes: not the revision CUDA-L1 used
    with pytest.raises(SystemExit, match="not the KernelBench revision"):
        final.prepare_old(args)
