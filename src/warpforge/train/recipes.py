"""CUDA-L1's pipeline as recipes on TRL: SFT on verified kernels → self-training rounds →
contrastive GRPO with the evaluator's reward. Every phase resumes from its last checkpoint and
writes its log (`log.jsonl`: TRL's log history; `rounds.jsonl`: self-training and held-out
results) in its output folder; every scored completion is recorded in the archive with the
model and the step, so the report and the dataset exports see RL attempts like any other.
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warpforge import jsonl, metrics
from warpforge.archive import Archive
from warpforge.candidate import Candidate
from warpforge.config import EvalConfig
from warpforge.errors import UsageError
from warpforge.evaluate import Judge
from warpforge.propose import Proposal
from warpforge.propose.parse import parse_reply
from warpforge.reward import KernelReward, Reward, RewardConfig, RollingNormalizer
from warpforge.task import load_task
from warpforge.train import data


def _need_trl() -> None:
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError:
        raise UsageError("training needs TRL: pip install 'warpforge[train]'") from None


def last_checkpoint(out_dir: Path) -> str | None:
    """The newest checkpoint-N folder TRL wrote in `out_dir`, to resume from."""
    ckpts = sorted((p for p in out_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                   key=lambda p: int(p.name.split("-")[-1]))
    return str(ckpts[-1]) if ckpts else None


def _write_log(out_dir: Path, history: list[dict[str, Any]]) -> None:
    (out_dir / "log.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))


@dataclass
class TrainSettings:
    max_steps: int = 100
    batch_size: int = 4
    learning_rate: float = 1e-5
    save_steps: int = 50
    lora: bool = False
    seed: int = 0
    use_cpu: bool = False
    max_length: int = 16384
    """SFT: tokens of prompt + completion kept (TRL's default, 1024, cuts a task's prompt before its kernel)"""

    def common(self, out_dir: Path) -> dict[str, Any]:
        return dict(output_dir=str(out_dir), max_steps=self.max_steps, per_device_train_batch_size=self.batch_size,
                    learning_rate=self.learning_rate, logging_steps=1, save_steps=self.save_steps, report_to="none",
                    seed=self.seed, use_cpu=self.use_cpu, save_total_limit=2)


def _peft(settings: TrainSettings) -> Any:
    if not settings.lora:
        return None
    try:
        from peft import LoraConfig
    except ImportError:
        raise UsageError("--lora needs PEFT: pip install 'warpforge[train]'") from None
    return LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, task_type="CAUSAL_LM")


def sft(model: str, dataset: str | Path, out_dir: str | Path, settings: TrainSettings) -> dict[str, Any]:
    """Supervised fine-tuning on prompt → verified-kernel rows (TRL SFTTrainer, loss on the completion)."""
    _need_trl()
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer

    out = Path(out_dir)
    rows = data.read_jsonl(dataset)
    if not rows:
        raise UsageError(f"{dataset} holds no rows: nothing to train on")
    ds = load_dataset("json", data_files=str(dataset), split="train").select_columns(["prompt", "completion"])
    trainer = SFTTrainer(model=model, args=SFTConfig(**settings.common(out), completion_only_loss=True,
                                                             max_length=settings.max_length),
                         train_dataset=ds, peft_config=_peft(settings))
    trainer.train(resume_from_checkpoint=last_checkpoint(out))
    trainer.save_model(str(out / "final"))
    _write_log(out, trainer.state.log_history)
    return {"model": str(out / "final"), "steps": trainer.state.global_step, "rows": len(rows)}


class RecordedReward(KernelReward):
    """KernelReward that records every scored completion in an archive (run, model, step)."""

    __name__ = "warpforge_kernel_reward"

    def __init__(self, archive: Archive, run_id: str, model: str, config: EvalConfig,
                 reward_config: RewardConfig = RewardConfig(), normalizer: RollingNormalizer | None = None,
                 pool: Any = None, log_path: Path | None = None) -> None:
        super().__init__(config, reward_config, normalizer, pool=pool)
        self.archive, self.run_id, self.model, self.log_path = archive, run_id, model, log_path
        self._next = {t: max(self.archive.steps(run_id, t), default=-1) + 1 for t in archive.tasks()}
        self.log: list[dict[str, Any]] = []

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], task: Sequence[str] | None = None,
                 **kwargs: Any) -> list[float]:
        values = super().__call__(prompts, completions, task=task, **kwargs)
        state = kwargs.get("trainer_state")
        train_step = getattr(state, "global_step", None)
        for name, completion, prompt, r in zip(task or [], completions, prompts, self.last):
            record(self.archive, self.run_id, name, self.model, "grpo", str(prompt), _text(completion), r, self._next)
        statuses = Counter(r.status for r in self.last)
        entry = {"train_step": train_step, "rewards": values, "statuses": dict(statuses),
                 "mean_reward": sum(values) / len(values) if values else None}
        self.log.append(entry)
        if self.log_path is not None:  # as it happens: a crashed run keeps its reward curve
            jsonl.append(self.log_path, [entry])
        return values


def _text(completion: Any) -> str:
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def record(archive: Archive, run_id: str, task_name: str, model: str, strategy: str, prompt: str, reply: str,
           r: Reward, next_step: dict[str, int]) -> int:
    """One scored completion → a candidate row and (when it had a program) its evaluation."""
    task = load_task(task_name)
    if task.name not in next_step:
        archive.add_task(task)
        next_step[task.name] = max(archive.steps(run_id, task.name), default=-1) + 1
    parsed = parse_reply(reply)
    cand = Candidate(parsed.source, strategy=strategy) if parsed.source else None
    proposal = Proposal(task.name, strategy, model=model, candidate=cand, failure=parsed.failure if cand is None else "",
                        prompt=json.dumps([{"role": "user", "content": prompt}]), reply=reply, analysis=parsed.analysis)
    step = next_step[task.name]
    next_step[task.name] = step + 1
    cid = archive.add_candidate(run_id, proposal, step)
    if r.result is not None:
        archive.add_evaluation(cid, r.result)
    return cid


def grpo(model: str, dataset: str | Path, out_dir: str | Path, archive_path: str | Path, settings: TrainSettings, *,
         config: EvalConfig, num_generations: int = 8, max_completion_length: int = 4096,
         reward_config: RewardConfig = RewardConfig(transform="speedup", clip=(0.0, 10.0)),
         normalize: bool = True, vllm_server: str | None = None, executor: str | None = None,
         workers: int | None = None, ray_address: str | None = None) -> dict[str, Any]:
    """GRPO with the evaluator's reward (CUDA-L1: speedup, normalised by running statistics,
    clipped to ±1.5; exploits get the lowest value). Rows need `prompt` and `task`. With
    `vllm_server` (a `trl vllm-serve` URL) completions are generated there. With `executor`
    ("local": one worker per GPU; "ray": Ray actors) each batch is scored in parallel."""
    _need_trl()
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    out = Path(out_dir)
    ds = load_dataset("json", data_files=str(dataset), split="train").select_columns(["prompt", "task"])
    with Archive(archive_path) as archive:
        run_id = archive.start_run({"phase": "grpo", "model": model, "out": str(out)}, settings.seed,
                                   run_id=f"grpo-{out.name}")
        from warpforge.executor import EvalPool

        pool = EvalPool(config, executor, workers, ray_address) if executor else None
        reward = RecordedReward(archive, run_id, model, config, reward_config,
                                RollingNormalizer(k=1.5) if normalize else None, pool=pool,
                                log_path=out / "rewards.jsonl")
        vllm: dict[str, Any] = dict(use_vllm=True, vllm_mode="server", vllm_server_base_url=vllm_server) if vllm_server else {}
        args = GRPOConfig(**settings.common(out), num_generations=num_generations,
                          max_completion_length=max_completion_length, **vllm)
        reward_funcs: list[Any] = [reward]
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=ds,
                              peft_config=_peft(settings))
        try:
            trainer.train(resume_from_checkpoint=last_checkpoint(out))
            archive.finish_run(run_id, "done")
        except BaseException:
            archive.finish_run(run_id, "stopped")
            raise
        finally:
            reward.close()
            if pool is not None:
                pool.close()
        trainer.save_model(str(out / "final"))
    _write_log(out, trainer.state.log_history)
    return {"model": str(out / "final"), "steps": trainer.state.global_step, "scored": sum(len(e["rewards"]) for e in reward.log)}


def sample(model: str, tasks: Sequence[str], n: int, max_new_tokens: int, temperature: float = 1.0,
           device: str = "cpu", seed: int = 0, target: str = "cuda") -> dict[str, list[str]]:
    """n completions per task from a Hugging Face model generating on `device`; the prompt is the
    translate prompt for the `target` device, as in the SFT rows (`train data --device`)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise UsageError("sampling needs transformers: pip install 'warpforge[train]'") from None
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model)
    lm: Any = AutoModelForCausalLM.from_pretrained(model)
    lm = lm.to(device)
    out: dict[str, list[str]] = {}
    for name in tasks:
        ids = tok(data.translate_prompt(name, target), return_tensors="pt").to(device)
        gen = lm.generate(**ids, do_sample=True, temperature=temperature, max_new_tokens=max_new_tokens,
                          num_return_sequences=n, pad_token_id=tok.pad_token_id)
        out[name] = tok.batch_decode(gen[:, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


def _target(config: EvalConfig) -> str:
    """The device the candidates are evaluated on: what the prompts ask the model to write for."""
    return config.resolved().device or "cuda"


def score_samples(samples: dict[str, list[str]], config: EvalConfig, archive: Archive, run_id: str, model: str,
                  strategy: str) -> dict[str, list[Reward]]:
    """Evaluate every sample (one Judge per task) and record it in the archive."""
    from warpforge.reward import reward as reward_of

    scored: dict[str, list[Reward]] = OrderedDict()
    next_step: dict[str, int] = {}
    for name, completions in samples.items():
        with Judge(load_task(name), config) as judge:
            scored[name] = [reward_of(name, c, judge=judge) for c in completions]
        for c, r in zip(completions, scored[name]):
            record(archive, run_id, name, model, strategy, data.translate_prompt(name, _target(config)), c, r, next_step)
    return scored


def _scored_run(archive: Archive, run_id: str, samples: dict[str, list[str]], config: EvalConfig, model: str,
                strategy: str) -> dict[str, list[Reward]]:
    """score_samples inside a run that ends `done`, or `stopped` when anything goes wrong."""
    try:
        scored = score_samples(samples, config, archive, run_id, model, strategy)
    except BaseException:
        archive.finish_run(run_id, "stopped")
        raise
    archive.finish_run(run_id, "done")
    return scored


def self_train(model: str, tasks: Sequence[str], sft_path: str | Path, archive_path: str | Path, *, config: EvalConfig,
               n: int = 8, max_new_tokens: int = 4096, custom_only: bool = False, device: str = "cpu",
               round_name: str = "self-train") -> dict[str, Any]:
    """One self-training round: sample n per task, keep what the evaluator accepts (only custom
    kernels when asked), append those rows to the SFT set."""
    samples = sample(model, tasks, n, max_new_tokens, device=device, target=_target(config))
    with Archive(archive_path) as archive:
        run_id = archive.start_run({"phase": round_name, "model": model}, 0)
        scored = _scored_run(archive, run_id, samples, config, model, "self-train")
    kept = []
    for name, rewards in scored.items():
        for text, r in zip(samples[name], rewards):
            if r.result is None or not r.result.correct:
                continue
            if custom_only and (r.result.kernels or {}).get("kind") != "custom_kernel":
                continue
            source = parse_reply(text).source or ""
            kept.append({"task": load_task(name).name, "task_name": load_task(name).name, "task_path": name, "prompt": data.translate_prompt(name, _target(config)),
                         "completion": data.completion_text(source), "speedup": r.speedup, "source": round_name})
    data.write_jsonl(kept, sft_path, append=True)
    statuses = Counter(r.status for rs in scored.values() for r in rs)
    summary = {"round": round_name, "model": model, "generated": sum(len(v) for v in samples.values()),
               "accepted": len(kept), "statuses": dict(statuses)}
    jsonl.append(Path(sft_path).parent / "rounds.jsonl", [summary])
    return summary


def heldout(model: str, tasks: Sequence[str], out_dir: str | Path, archive_path: str | Path, *, config: EvalConfig,
            n: int = 4, k: int = 1, max_new_tokens: int = 4096, device: str = "cpu", label: str = "") -> dict[str, Any]:
    """pass@k and speedup@k on held-out tasks, appended to out_dir/rounds.jsonl."""
    samples = sample(model, tasks, n, max_new_tokens, device=device, target=_target(config))
    with Archive(archive_path) as archive:
        run_id = archive.start_run({"phase": "heldout", "model": model, "label": label}, 0)
        scored = _scored_run(archive, run_id, samples, config, model, "heldout")
    per_task = {}
    for name, rewards in scored.items():
        correct = sum(1 for r in rewards if r.result is not None and r.result.correct)
        speedups = [r.speedup if r.result is not None and r.result.correct else None for r in rewards]
        per_task[name] = {"pass_at_k": metrics.pass_at_k(len(rewards), correct, min(k, len(rewards))),
                          "speedup_at_k": metrics.speedup_at_k(speedups, min(k, len(rewards)))}
    summary = {"round": label or "heldout", "model": model, "k": k, "n": n,
               "pass_at_k": sum(v["pass_at_k"] for v in per_task.values()) / max(1, len(per_task)),
               "speedup_at_k": sum(v["speedup_at_k"] for v in per_task.values()) / max(1, len(per_task)),
               "tasks": per_task}
    jsonl.append(Path(out_dir) / "rounds.jsonl", [summary])
    return summary


__all__ = ["TrainSettings", "grpo", "heldout", "last_checkpoint", "record", "self_train", "sft"]
