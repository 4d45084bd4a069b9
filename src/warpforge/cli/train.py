"""`warpforge train data|sft|self-train|grpo|heldout|tiny-model`: the RL recipes from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from warpforge.errors import UsageError


def add_train_parser(sub: Any) -> None:
    from warpforge.cli.common import add_eval_options

    t = sub.add_parser("train", help="train kernel-writing models on warpforge rewards (SFT, self-training, GRPO)")
    ts = t.add_subparsers(dest="train_command", required=True)

    d = ts.add_parser("data", help="SFT rows and GRPO prompts from an archive, split by task")
    d.add_argument("--archive", required=True)
    d.add_argument("--out", required=True, help="folder for sft_train/sft_eval/grpo_train/grpo_eval .jsonl")
    d.add_argument("--tasks", nargs="*", help="tasks for GRPO prompts (default: the archive's tasks)")
    d.add_argument("--eval-fraction", type=float, default=0.2, help="share of tasks held out (by a hash of the name)")
    d.add_argument("--eval-tasks", nargs="*", default=[], help="hold out exactly these tasks instead")
    d.add_argument("--custom-only", action="store_true", help="SFT only on custom kernels, not PyTorch rewrites")
    d.add_argument("--device", choices=["cpu", "cuda"], default="cuda", help="the device the prompts target")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", required=True, help="Hugging Face model id or local folder")
        p.add_argument("--out", required=True, help="output folder (checkpoints, logs); re-running resumes")
        p.add_argument("--max-steps", type=int, default=100)
        p.add_argument("--batch-size", type=int, default=4)
        p.add_argument("--lr", type=float, default=1e-5)
        p.add_argument("--save-steps", type=int, default=50)
        p.add_argument("--lora", action="store_true", help="train LoRA adapters (PEFT) instead of all weights")
        p.add_argument("--cpu", action="store_true", help="train on the CPU")

    s = ts.add_parser("sft", help="supervised fine-tuning on verified kernels")
    common(s)
    s.add_argument("--data", required=True, help="sft_train.jsonl")

    g = ts.add_parser("grpo", help="GRPO with the evaluator's reward (CUDA-L1 shape)")
    common(g)
    g.add_argument("--data", required=True, help="grpo_train.jsonl (prompt, task)")
    g.add_argument("--archive", required=True, help="every scored completion is recorded here")
    g.add_argument("--num-generations", type=int, default=8)
    g.add_argument("--max-completion-length", type=int, default=4096)
    add_eval_options(g, device_help="where candidates are evaluated (default: cuda when a GPU is visible)")
    g.add_argument("--executor", choices=["local", "ray"], help="score each batch in parallel: local workers (one per GPU) or Ray")
    g.add_argument("--workers", type=int, help="evaluation workers (default: one per GPU)")
    g.add_argument("--ray-address", help="an existing Ray cluster (auto, ray://host:10001)")
    g.add_argument("--vllm-server", help="generate with a `trl vllm-serve` server at this URL (http://host:8000)")

    def sampling(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", required=True)
        p.add_argument("--tasks", nargs="+", required=True)
        p.add_argument("--archive", required=True)
        p.add_argument("--n", type=int, default=8, help="samples per task")
        p.add_argument("--max-new-tokens", type=int, default=4096)
        p.add_argument("--gen-device", default="cpu", help="where the model generates (cpu, cuda)")
        add_eval_options(p, device_help="where candidates are evaluated (default: cuda when a GPU is visible)")

    st = ts.add_parser("self-train", help="one self-training round: sample, keep what the evaluator accepts")
    sampling(st)
    st.add_argument("--sft", required=True, help="the SFT .jsonl to append accepted rows to")
    st.add_argument("--custom-only", action="store_true")

    h = ts.add_parser("heldout", help="pass@k and speedup@k of a model on held-out tasks")
    sampling(h)
    h.add_argument("--out", required=True, help="folder whose rounds.jsonl gets the result")
    h.add_argument("--k", type=int, default=1)

    pl = ts.add_parser("plot", help="reward curves, outcomes, losses and rounds of training runs (static HTML)")
    pl.add_argument("folders", nargs="+", help="--out folders of sft / grpo / heldout runs")
    pl.add_argument("--out", default="warpforge-train-report", help="output folder")

    m = ts.add_parser("tiny-model", help="a tiny random model and tokenizer (no download), for tests and smoke runs")
    m.add_argument("out")
    m.add_argument("--hidden", type=int, default=64, help="hidden size (default 64)")
    m.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")


def _eval_config(args: argparse.Namespace) -> Any:
    from warpforge.cli.common import config_from_args

    return config_from_args(args)


def _settings(args: argparse.Namespace) -> Any:
    from warpforge.train.recipes import TrainSettings

    return TrainSettings(max_steps=args.max_steps, batch_size=args.batch_size, learning_rate=args.lr,
                         save_steps=args.save_steps, lora=args.lora, use_cpu=args.cpu)


def cmd_train(args: argparse.Namespace) -> int:
    from warpforge.train import data, recipes

    c = args.train_command
    if c == "plot":
        from warpforge.train.plots import render

        print(render([Path(f) for f in args.folders], Path(args.out)))
        return 0
    if c == "tiny-model":
        from warpforge.train.tiny import build

        print(build(args.out, hidden=args.hidden, layers=args.layers))
        return 0
    if c == "data":
        from warpforge.archive import Archive

        if not Path(args.archive).exists():
            raise UsageError(f"archive {args.archive} does not exist")
        with Archive(args.archive, read_only=True) as archive:
            sft_rows = data.sft_rows(archive, custom_only=args.custom_only, device=args.device)
            tasks = args.tasks or [archive.task_path(t) or t for t in archive.tasks()]
            grpo_rows = data.grpo_rows(tasks, archive, device=args.device)
        out = Path(args.out)
        counts = {}
        for kind, rows in (("sft", sft_rows), ("grpo", grpo_rows)):
            train, held = data.split(rows, args.eval_fraction, args.eval_tasks)
            counts[f"{kind}_train"] = data.write_jsonl(train, out / f"{kind}_train.jsonl")
            counts[f"{kind}_eval"] = data.write_jsonl(held, out / f"{kind}_eval.jsonl")
        print(json.dumps(counts))
        return 0
    if c == "sft":
        print(json.dumps(recipes.sft(args.model, args.data, args.out, _settings(args))))
        return 0
    if c == "grpo":
        print(json.dumps(recipes.grpo(args.model, args.data, args.out, args.archive, _settings(args),
                                      config=_eval_config(args), num_generations=args.num_generations,
                                      max_completion_length=args.max_completion_length,
                                      vllm_server=args.vllm_server, executor=args.executor,
                                      workers=args.workers, ray_address=args.ray_address)))
        return 0
    if c == "self-train":
        print(json.dumps(recipes.self_train(args.model, args.tasks, args.sft, args.archive, config=_eval_config(args),
                                            n=args.n, max_new_tokens=args.max_new_tokens,
                                            custom_only=args.custom_only, device=args.gen_device)))
        return 0
    if c == "heldout":
        summary = recipes.heldout(args.model, args.tasks, args.out, args.archive, config=_eval_config(args), n=args.n,
                                  k=args.k, max_new_tokens=args.max_new_tokens, device=args.gen_device)
        print(json.dumps({k: v for k, v in summary.items() if k != "tasks"}))
        return 0
    print(f"unknown train command {c}", file=sys.stderr)
    return 2
