"""The RL pipeline end to end on the CPU, with a tiny random model and a tokenizer trained on the
fly (no downloads): data from an archive -> SFT -> a self-training round -> GRPO with the real
evaluator's reward -> resume -> held-out pass@k. Skipped without the train extra."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from warpforge.archive import Archive  # noqa: E402
from warpforge.cli import main  # noqa: E402
from warpforge.config import EvalConfig  # noqa: E402
from warpforge.reward import KernelReward, RewardConfig  # noqa: E402
from warpforge.train import data, recipes  # noqa: E402
from warpforge.train.tiny import build  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "candidates"
CPU = EvalConfig(device="cpu", bench=False, trials=2)



def _runs(db: Path) -> dict[str, int]:
    with Archive(db, read_only=True) as archive:
        return {r.id: len(archive.attempts(run_id=r.id)) for r in archive.runs()}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("train")
    build(d / "tiny")
    # one verified kernel in the archive, recorded the way an agent would
    assert main(["agent", "eval", "level1/relu", str(ROOT / "examples/relu_cpp.py"), "--archive", str(d / "a.db"),
                 "--device", "cpu"]) == 0
    return d


@pytest.mark.slow  # a C++ build on a fresh cache, 30-40 s: the slow lane (README)
def test_data_is_split_by_task(workdir: Path) -> None:
    out = workdir / "d"
    assert main(["train", "data", "--archive", str(workdir / "a.db"), "--out", str(out), "--tasks", "level1/relu",
                 "level1/softmax", "--eval-tasks", "level1/softmax", "--device", "cpu"]) == 0
    sft = data.read_jsonl(out / "sft_train.jsonl")
    assert len(sft) == 1 and sft[0]["task_name"] == "level1/relu" and "```python" in sft[0]["completion"]
    assert "class ModelNew" in sft[0]["completion"] and "level1/relu" not in {r["task_name"] for r in data.read_jsonl(out / "sft_eval.jsonl")}
    grpo_train, grpo_eval = data.read_jsonl(out / "grpo_train.jsonl"), data.read_jsonl(out / "grpo_eval.jsonl")
    assert [r["task_name"] for r in grpo_train] == ["level1/relu"] and [r["task_name"] for r in grpo_eval] == ["level1/softmax"]
    # the hash split is stable and honours the fraction roughly
    names = [f"task{i}" for i in range(400)]
    held = [n for n in names if data.is_eval_task(n, 0.25)]
    assert 60 < len(held) < 140 and held == [n for n in names if data.is_eval_task(n, 0.25)]


@pytest.mark.slow  # a C++ build on a fresh cache, 30-40 s: the slow lane (README)
def test_sft_self_training_grpo_and_resume(workdir: Path) -> None:
    d = workdir / "d"
    if not (d / "sft_train.jsonl").exists():
        test_data_is_split_by_task(workdir)
    s = recipes.TrainSettings(max_steps=2, batch_size=1, save_steps=1, use_cpu=True, learning_rate=1e-3)
    out = recipes.sft(str(workdir / "tiny"), d / "sft_train.jsonl", workdir / "sft", s)
    assert out["steps"] == 2 and Path(out["model"], "config.json").exists()
    logged = [json.loads(line) for line in (workdir / "sft/log.jsonl").read_text().splitlines()]
    assert any("loss" in h for h in logged)

    before = sum(_runs(workdir / "a.db").values())
    round1 = recipes.self_train(out["model"], ["level1/relu"], d / "sft_train.jsonl", workdir / "a.db", config=CPU,
                                n=2, max_new_tokens=16)
    assert round1["generated"] == 2 and sum(round1["statuses"].values()) == 2
    assert len(data.read_jsonl(d / "sft_train.jsonl")) == 1 + round1["accepted"]
    assert sum(_runs(workdir / "a.db").values()) == before + 2  # every sample recorded
    assert json.loads((d / "rounds.jsonl").read_text().splitlines()[-1])["round"] == "self-train"
    with Archive(workdir / "a.db", read_only=True) as archive:  # sampled with the prompt it was trained on
        sft_prompt = data.read_jsonl(d / "sft_train.jsonl")[0]["prompt"]
        [last] = archive.attempts(run_id=archive.runs()[-1].id)[-1:]
        assert json.loads(last.prompt)[0]["content"] == sft_prompt == data.translate_prompt("level1/relu", "cpu")

    g = recipes.TrainSettings(max_steps=2, batch_size=2, save_steps=1, use_cpu=True, learning_rate=1e-3)
    first = recipes.grpo(out["model"], d / "grpo_train.jsonl", workdir / "grpo", workdir / "a.db", g, config=CPU,
                         num_generations=2, max_completion_length=16)
    assert first["steps"] == 2 and first["scored"] == 4  # 2 steps x 1 prompt x 2 generations
    runs = _runs(workdir / "a.db")
    assert runs["grpo-grpo"] == 4
    rewards = [json.loads(line) for line in (workdir / "grpo/rewards.jsonl").read_text().splitlines()]
    assert len(rewards) == 2 and all(len(r["rewards"]) == 2 for r in rewards)
    assert recipes.last_checkpoint(workdir / "grpo") is not None

    g.max_steps = 3  # a re-run resumes from checkpoint-2: one more step, two more completions
    again = recipes.grpo(out["model"], d / "grpo_train.jsonl", workdir / "grpo", workdir / "a.db", g, config=CPU,
                         num_generations=2, max_completion_length=16)
    assert again["steps"] == 3 and again["scored"] == 2 and _runs(workdir / "a.db")["grpo-grpo"] == 6

    # the same run scored on a pool of worker processes (what --executor local does on GPUs)
    g.max_steps = 4
    pooled = recipes.grpo(out["model"], d / "grpo_train.jsonl", workdir / "grpo", workdir / "a.db", g, config=CPU,
                          num_generations=2, max_completion_length=16, executor="local", workers=2)
    assert pooled["steps"] == 4 and pooled["scored"] == 2 and _runs(workdir / "a.db")["grpo-grpo"] == 8

    held = recipes.heldout(out["model"], ["level1/softmax"], workdir / "eval", workdir / "a.db", config=CPU, n=2, k=1,
                           max_new_tokens=16)
    assert held["pass_at_k"] == 0.0 and (workdir / "eval/rounds.jsonl").exists()

    # the page of reward curves, outcomes, losses and rounds
    assert main(["train", "plot", str(workdir / "grpo"), str(workdir / "sft"), str(d), str(workdir / "eval"),
                 "--out", str(workdir / "page")]) == 0
    page = (workdir / "page/index.html").read_text()
    assert page.count("<h2>") == 4 and "Reward per scored batch" in page and "Training loss" in page
    assert page.count('class="chart lines"') >= 2 and "no_program" in page and "heldout" in page and "self-train" in page
    assert main(["train", "plot", str(workdir / "nope"), "--out", str(workdir / "page")]) == 2


@pytest.mark.slow  # a C++ build on a fresh cache, 30-40 s: the slow lane (README)
@pytest.mark.parametrize("pooled", [False, True], ids=["in-process", "worker-pool"])
def test_exploit_completions_get_the_exploit_reward(pooled: bool) -> None:
    """In this process or on a pool of workers (how a GRPO batch is scored in parallel), the
    same completions get the same statuses, and cheating scores lowest."""
    from warpforge.executor import EvalPool

    cheat = f"```python\n{(FIX / 'background_thread.py').read_text()}\n```"
    honest = f"```python\n{(ROOT / 'examples/relu_cpp.py').read_text()}\n```"
    wrong = f"```python\n{(FIX / 'zeros_output.py').read_text()}\n```"
    pool = EvalPool(CPU, "local", workers=2) if pooled else None
    reward = KernelReward(CPU, RewardConfig(), pool=pool)
    matmul = str(ROOT / "tests/fixtures/tasks/matmul.py")
    try:
        values = reward(["p"] * 4, [cheat, "no code here", honest, wrong], task=[matmul, "level1/relu", "level1/relu", matmul])
    finally:
        reward.close()
        if pool is not None:
            pool.close()
    assert [r.status for r in reward.last] == ["rejected", "no_program", "correct", "runtime_error"]
    assert values[0] == RewardConfig().rejected < values[1] < values[2]
    assert all(r.result is not None for i, r in enumerate(reward.last) if i != 1)  # kept for the archive


def test_train_cli_errors(tmp_path: Path, capsys: Any) -> None:
    assert main(["train", "data", "--archive", str(tmp_path / "none.db"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", "sft", "--model", "x", "--out", str(tmp_path / "o"), "--data", str(tmp_path / "none.jsonl")]) == 2
