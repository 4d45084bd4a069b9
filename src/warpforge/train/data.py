"""Training data from an archive: SFT rows split by task, GRPO prompts, self-training rounds.

Rows are plain dicts written as JSONL (Hugging Face `datasets.load_dataset("json", ...)` reads
them; TRL's trainers take the `prompt` / `completion` and `prompt` / `task` columns as they are).
The split is by *task*, decided by a hash of the task name (stable across runs and machines),
so an evaluation task never appears in training data, whichever archive the rows come from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from warpforge import jsonl
from warpforge.archive import Archive
from warpforge.errors import UsageError
from warpforge.propose.prompts import PromptContext, Variant, pick_contrastive, render
from warpforge.task import load_task


def is_eval_task(name: str, eval_fraction: float, eval_tasks: Sequence[str] = ()) -> bool:
    """True for held-out tasks: named in `eval_tasks`, or in the hash-chosen `eval_fraction`."""
    if eval_tasks:
        return name in eval_tasks
    digest = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    return digest / 0xFFFFFFFF < eval_fraction


def prompt_text(messages: list[dict[str, str]]) -> str:
    """Chat messages as one plain-text prompt (for models without a chat template)."""
    return "\n\n".join(f"### {m['role']}\n{m['content']}" for m in messages) + "\n\n### assistant\n"


def translate_prompt(task_name: str, device: str = "cuda", language: str = "any") -> str:
    task = load_task(task_name)
    return prompt_text(render("translate", PromptContext(task.name, task.source, device, language=language)))


def completion_text(source: str) -> str:
    return f"```python\n{source.rstrip()}\n```\n"


def sft_rows(archive: Archive, *, custom_only: bool = False, device: str = "cuda") -> list[dict[str, Any]]:
    """Every verified (correct) candidate of every task, one row per distinct program."""
    rows, seen = [], set()
    for a in archive.attempts():
        if not a.correct or not a.source or a.source_hash in seen:
            continue
        if custom_only and a.kernels_kind != "custom_kernel":
            continue
        seen.add(a.source_hash)
        task = archive.task_path(a.task) or a.task
        rows.append({"task": a.task, "task_name": a.task, "task_path": task, "prompt": translate_prompt(task, device),
                     "completion": completion_text(a.source), "speedup": a.speedup, "candidate_id": a.id,
                     "kernels_kind": a.kernels_kind, "source": "archive"})
    return rows


def grpo_rows(tasks: Iterable[str], archive: Archive | None = None, *, k: int = 3, device: str = "cuda",
              seed: int = 0) -> list[dict[str, Any]]:
    """One prompt per task: contrastive (the task plus `k` scored earlier variants from different
    performance buckets, CUDA-L1's format) when the archive has enough timed variants, else translate."""
    import random

    rng = random.Random(seed)
    rows = []
    for name in tasks:
        task = load_task(name)
        variants: list[Variant] = []
        if archive is not None:
            variants = [Variant(a.source or "", a.status or "", a.speedup, a.reason or "", a.analysis or "", a.task, a.id)
                        for a in archive.attempts(task.name) if a.timed and a.source]
        if len(variants) >= 2:
            picked = pick_contrastive(variants, k, rng)
            ctx = PromptContext(task.name, task.source, device, variants=picked)
            strategy = "contrastive"
        else:
            ctx, strategy = PromptContext(task.name, task.source, device), "translate"
        # `task` is what the reward loads (the name or path given); `task_name` what the split uses
        rows.append({"prompt": prompt_text(render(strategy, ctx)), "task": name, "task_name": task.name,
                     "strategy": strategy})
    return rows


def split(rows: list[dict[str, Any]], eval_fraction: float, eval_tasks: Sequence[str] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, held out) by task name; `eval_tasks` may name tasks by suite name or by path."""
    names = {load_task(t).name for t in eval_tasks}
    held_out = [is_eval_task(r.get("task_name") or r["task"], eval_fraction, sorted(names)) for r in rows]
    return [r for r, h in zip(rows, held_out) if not h], [r for r, h in zip(rows, held_out) if h]


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path, append: bool = False) -> int:
    """Write the file whole (or append rows durably)."""
    return jsonl.append(path, rows) if append else jsonl.write(path, rows)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    if not Path(path).is_file():
        raise UsageError(f"dataset {path} does not exist: build it with `warpforge train data`")
    return jsonl.read(path)
