"""`warpforge train plot`: reward curves, outcomes, losses and round results of training runs,
as a static page (inline SVG, the report's style), from the logs the recipes write:
`rewards.jsonl` (one line per scored GRPO batch), `log.jsonl` (TRL's log history) and
`rounds.jsonl` (self-training and held-out results)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from warpforge import jsonl
from warpforge.errors import UsageError
from warpforge.report import plots

STATUS_ORDER = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected", "task_error",
                "no_program")


def run_view(folder: Path) -> dict[str, Any]:
    rewards, history, rounds = jsonl.read(folder / "rewards.jsonl"), jsonl.read(folder / "log.jsonl"), jsonl.read(folder / "rounds.jsonl")
    view: dict[str, Any] = {"name": folder.name, "path": str(folder), "reward_chart": None, "status_chart": None,
                            "loss_chart": None, "rounds": []}
    means = [(float(i), float(r["mean_reward"])) for i, r in enumerate(rewards, 1) if r.get("mean_reward") is not None]
    best = [(float(i), float(max(r["rewards"]))) for i, r in enumerate(rewards, 1) if r.get("rewards")]
    if means:
        view["reward_chart"] = plots.line_chart([("mean reward", means), ("best in batch", best)],
                                                x_label="scored batch", y_label="reward")
    statuses: Counter[str] = Counter()
    for r in rewards:
        statuses.update(r.get("statuses") or {})
    if statuses:
        view["status_chart"] = plots.stacked_bars([(folder.name, dict(statuses))], STATUS_ORDER)
    losses = [(float(h["step"]), float(h["loss"])) for h in history if "loss" in h and "step" in h]
    if losses:
        view["loss_chart"] = plots.line_chart([("loss", losses)], x_label="step", y_label="loss")
    for r in rounds:
        view["rounds"].append(SimpleNamespace(
            round=r.get("round", ""), model=r.get("model", ""), generated=r.get("generated"), accepted=r.get("accepted"),
            pass_at_k=r.get("pass_at_k"), speedup_at_k=r.get("speedup_at_k"), k=r.get("k"),
            statuses=", ".join(f"{k} {v}" for k, v in (r.get("statuses") or {}).items())))
    return view


def render(folders: list[Path], out_dir: Path) -> Path:
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise UsageError(f"not a folder: {', '.join(missing)} (give the --out folders of `warpforge train`)")
    from warpforge.report.html import environment

    runs = [SimpleNamespace(**run_view(f)) for f in folders]
    page = environment().get_template("train.html").render(
        runs=runs, view=SimpleNamespace(path=", ".join(str(f) for f in folders)), generated=time.time(),
        status_colors=plots.STATUS_COLORS, root="")
    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
