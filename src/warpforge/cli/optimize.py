"""`warpforge optimize`: the command-line face of the loop (argument parsing and output only).

    warpforge optimize TASK_OR_DIR... --llm PROVIDER:MODEL [--base-url URL] [--device cpu|cuda]
                       [--archive PATH] [--max-candidates N] [--strategy evolve|best-of-n] ...

Exit codes: 0 when at least one task's best candidate (archive.best_attempt of the run) is faster
than eager PyTorch beyond the noise (archive.improves_on_eager; with --target-speedup: when every
task's best reached it), 1 otherwise (a result, not a failure), 2 for usage and configuration
errors (no LLM configured, unreachable endpoint, unknown task), 130 after Ctrl-C; running the
same command again resumes the run from the archive. A run that finished under this budget is not
run again: one sentence says so, the model is asked nothing, and the exit code is its result's
(a larger --max-candidates continues it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warpforge import languages
from warpforge.archive import Archive, target_reached
from warpforge.cli.archive import DEFAULT_ARCHIVE
from warpforge.errors import ConfigError, UsageError
from warpforge.task import Task

if TYPE_CHECKING:
    from warpforge.config import EvalConfig
    from warpforge.propose.llm import LLMClient, ModelSpec
    from warpforge.search.loop import OptimizeConfig, RunSummary

NO_LLM = ("no LLM configured: pass --llm PROVIDER:MODEL, e.g. --llm openai:gpt-4o (with OPENAI_API_KEY set), "
          "--llm anthropic:claude-sonnet-4-5 (with ANTHROPIC_API_KEY set), --llm openai:MODEL --base-url "
          "http://localhost:8000/v1 for a local vLLM or Ollama server, --llm 'cmd:claude -p' for a command-line "
          "agent, or --llm inbox:DIR to answer request files yourself (or set WARPFORGE_LLM)")


def add_optimize_parser(sub: Any) -> None:
    p = sub.add_parser("optimize", help="let an LLM write faster kernels for tasks, verified and timed, into an archive",
                       description="Propose, verify and time kernels for each TASK (a task file, a directory of "
                                   "them, a suite name such as level1/softmax or level1) with an LLM in an "
                                   "evolutionary loop; every attempt goes into the archive, and a run resumes.")
    p.add_argument("tasks", nargs="+", metavar="TASK_OR_DIR")
    add_search_options(p)


def add_search_options(p: argparse.ArgumentParser) -> None:
    """Every option of `warpforge optimize` but its tasks (the LLM, the search, its budget, where
    candidates are evaluated, the evaluation options): `cmd_optimize` reads them all, so a verb
    that optimises tasks it made itself (`model optimize`) takes them too."""
    p.add_argument("--llm", action="append", default=[], metavar="PROVIDER:MODEL",
                   help="openai:MODEL (any OpenAI-compatible endpoint), anthropic:MODEL, replay:FILE.jsonl, "
                        "'cmd:COMMAND' (a program per request: prompt on stdin, reply on stdout, e.g. 'cmd:claude -p') "
                        "or inbox:DIR (request files answered by reply files); cmd(NAME):... records NAME; "
                        "repeat for an ensemble, MODEL@WEIGHT to weight it (default: $WARPFORGE_LLM)")
    p.add_argument("--base-url", help="endpoint of an OpenAI-compatible server, e.g. http://localhost:8000/v1")
    p.add_argument("--archive", default=DEFAULT_ARCHIVE, help=f"SQLite archive (default {DEFAULT_ARCHIVE})")
    p.add_argument("--max-candidates", type=int, default=16, help="proposals per task (default 16)")
    p.add_argument("--strategy", default="evolve", help="evolve (default) or best-of-n")
    p.add_argument("--language", default="any", help=f"ask for {', '.join(languages.names())} or any (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--generation-size", type=int, default=4, help="proposals planned together and asked concurrently")
    p.add_argument("--concurrency", type=int, default=4, help="LLM requests in flight at most (default 4)")
    p.add_argument("--selection", choices=["weight", "bandit"], default="weight",
                   help="how an ensemble picks a model per call: by weight, or a bandit on verified improvements")
    p.add_argument("--price", action="append", default=[], metavar="PROVIDER:MODEL=IN,OUT",
                   help="USD per million prompt and completion tokens, overriding the built-in table")
    p.add_argument("--max-tokens-total", type=int, help="stop the run after this many LLM tokens")
    p.add_argument("--max-cost", type=float, help="stop the run after this much LLM spend (USD)")
    p.add_argument("--max-gpu-seconds", type=float, help="stop after this many seconds of evaluation")
    p.add_argument("--max-wall-seconds", type=float, help="stop after this many seconds")
    p.add_argument("--target-speedup", type=float, help="stop a task once it is this much faster than eager")
    p.add_argument("--llm-timeout", type=float, default=300.0, help="seconds per LLM request (default 300)")
    p.add_argument("--executor", choices=["local", "ray"],
                   help="evaluate each generation in parallel: local workers (one per GPU) or a Ray cluster")
    p.add_argument("--workers", type=int, help="evaluation workers for --executor (default: one per GPU)")
    p.add_argument("--ray-address", help="an existing Ray cluster for --executor ray (auto, ray://host:10001)")
    p.add_argument("--outbox", metavar="DIR",
                   help="evaluate elsewhere: write each candidate as a job file into DIR/jobs and wait for its result in "
                        "DIR/results (written there by `warpforge eval-batch --jobs DIR` on the GPU machine); "
                        "--device names the device the jobs are meant for")
    p.add_argument("--parallel-tasks", type=int, metavar="N",
                   help="optimise N tasks at once (default 1; with --outbox, all: every generation's jobs of all "
                        "tasks are then waiting together, for one batch on the GPU machine)")
    p.add_argument("--no-live", action="store_true", help="plain progress lines instead of the live table")
    p.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    from warpforge.cli.common import add_eval_options

    add_eval_options(p)


def cmd_optimize(args: argparse.Namespace) -> int:
    from warpforge.config import EvalConfig
    from warpforge.propose.llm import LLMClient, parse_model_specs
    from warpforge.search.loop import Budget, OptimizeConfig

    specs = args.llm or [s for s in os.environ.get("WARPFORGE_LLM", "").split(",") if s.strip()]
    if not specs:
        raise ConfigError(NO_LLM)
    models = parse_model_specs(specs, args.base_url, _prices(args.price))
    llm = LLMClient(models, timeout_s=args.llm_timeout, concurrency=args.concurrency, selection=args.selection,
                    seed=args.seed)
    from warpforge.cli.common import config_from_args

    if args.outbox and args.executor:
        raise UsageError("--outbox and --executor both say where candidates are evaluated: pass one")
    # (an outbox's jobs are evaluated on another machine: this one needs no GPU for --device cuda)
    eval_cfg = config_from_args(args, check_device=not args.outbox)
    config = OptimizeConfig(
        strategy=args.strategy, eval=eval_cfg, seed=args.seed, generation_size=args.generation_size,
        language=args.language,
        budget=Budget(candidates=args.max_candidates, tokens=args.max_tokens_total, cost_usd=args.max_cost,
                      gpu_seconds=args.max_gpu_seconds, wall_seconds=args.max_wall_seconds,
                      target_speedup=args.target_speedup))
    summary = _finished(args, config, models)
    already_finished = summary is not None
    if summary is not None:  # nothing is left to do under this budget: the model is asked nothing
        target = f", --target-speedup {args.target_speedup:g}" if args.target_speedup is not None else ""
        print(f"warpforge: run {summary.run_id} in {args.archive} is already finished under this budget "
              f"(--max-candidates {args.max_candidates}{target}), so the model was asked nothing; pass a larger "
              "--max-candidates to continue it", file=sys.stderr)
    else:
        llm.check()
        summary = _optimize(args, llm, config, eval_cfg)
        if summary is None:
            return 130
    result = {
        "run_id": summary.run_id, "archive": str(args.archive), "stopped_by": summary.stopped_by,
        "already_finished": already_finished,
        "tokens": summary.tokens, "cost_usd": round(summary.cost_usd, 6),
        "tasks": [{"task": o.task, "attempts": o.attempts, "duplicates": o.duplicates, "improved": o.improved,
                   "best_candidate_id": o.best.id if o.best else None,
                   "speedup": o.best.speedup if o.best else None,
                   "claim": o.best.claim.to_dict() if o.best else None,
                   "speedup_vs_compile": o.best.speedup_vs_compile if o.best else None} for o in summary.outcomes],
    }
    if args.json:
        print(json.dumps(result))
    improved = [o for o in summary.outcomes if o.improved]
    for o in summary.outcomes:
        best = f"best #{o.best.id}: {o.best.claim.words()}" if o.best else "no correct, timed attempt"
        print(f"  {o.task}: {best} ({o.attempts} attempt{'' if o.attempts == 1 else 's'})", file=sys.stderr)
    print(f"warpforge: {len(improved)} of {len(summary.outcomes)} tasks proven faster than eager PyTorch; "
          f"{summary.tokens} tokens, ${summary.cost_usd:.2f}; archive {args.archive} (run {summary.run_id})"
          + (f"; stopped: {summary.stopped_by}" if summary.stopped_by else ""), file=sys.stderr)
    repeats = sum(o.duplicates for o in summary.outcomes)
    if repeats:
        print(f"warpforge: {repeats} of the replies repeated an earlier candidate (recorded as duplicates, not "
              "evaluated again)", file=sys.stderr)
    if args.target_speedup is not None:
        reached = all(target_reached(o.best, args.target_speedup) for o in summary.outcomes)
        return 0 if reached and summary.outcomes else 1
    return 0 if improved else 1


def load_tasks(names: list[str], archive: Archive) -> list[Task]:
    """Task files, directories of them, suite names (level1/softmax) and levels (level1), or the
    name of a task the archive already holds."""
    from warpforge.task import load_task, tasks_named

    tasks: list[Task] = []
    for name in names:
        try:
            tasks.extend(tasks_named(name))
        except UsageError:
            stored = None if Path(name).is_dir() else archived_task(archive, name)
            if stored is None:
                raise
            tasks.append(stored)
    return list({t.name: t for t in tasks}.values())


def archived_task(archive: Archive, name: str) -> Task | None:
    """The task the archive holds under `name`, written out beside the archive (task code runs from
    a file); None if it holds none."""
    from warpforge.task import load_task

    source = archive.task_source(name)
    if source is None:
        return None
    stored = Path(f"{archive.path}.tasks") / f"{name.replace('/', '__')}.py"
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(source)
    return load_task(stored)


def _prices(items: list[str]) -> dict[str, tuple[float, float]]:
    prices = {}
    for item in items:
        name, _, values = item.partition("=")
        try:
            price_in, price_out = (float(v) for v in values.split(","))
        except ValueError:
            raise ConfigError(f"--price {item!r}: write PROVIDER:MODEL=IN,OUT in USD per million tokens, "
                              "e.g. openai:gpt-4o=2.5,10") from None
        prices[name] = (price_in, price_out)
    return prices


def _finished(args: argparse.Namespace, config: OptimizeConfig, models: list[ModelSpec]) -> RunSummary | None:
    """The summary of this command's run when it finished and this budget leaves it nothing to do
    (search/loop.py:finished_run), read before anything is asked or started; else None."""
    from warpforge.search.loop import finished_run

    if not Path(args.archive).is_file():
        return None
    with Archive(args.archive) as archive:
        return finished_run(archive, config, load_tasks(args.tasks, archive), [m.name for m in models])


def _optimize(args: argparse.Namespace, llm: LLMClient, config: OptimizeConfig,
              eval_cfg: EvalConfig) -> RunSummary | None:
    """Run the loop with its live view and evaluation pool; None after Ctrl-C."""
    from warpforge.search.display import ProgressView
    from warpforge.search.loop import Optimizer

    with Archive(args.archive) as archive:
        tasks = load_tasks(args.tasks, archive)
        view = ProgressView([t.name for t in tasks], live=False if args.no_live else None)
        pool: Any = None
        if args.executor:
            from warpforge.executor import EvalPool

            pool = EvalPool(eval_cfg, args.executor, args.workers, args.ray_address)
        elif args.outbox:
            from warpforge.executor.outbox import OutboxPool

            pool = OutboxPool(args.outbox)
            print(f"warpforge: candidates go to {pool.jobs} as job files; evaluate them where the GPU is with "
                  f"`warpforge eval-batch --jobs {args.outbox}` and bring {pool.results} back: the loop waits for "
                  "them (stop it any time; the same command resumes)", file=sys.stderr)
        parallel = args.parallel_tasks or (len(tasks) if args.outbox else 1)
        try:
            with view:
                return Optimizer(archive, llm, config, on_progress=view.update, pool=pool).run(tasks, parallel)
        except KeyboardInterrupt:
            print(f"warpforge: stopped; run the same command again to resume from {args.archive}", file=sys.stderr)
            return None
        finally:
            if pool is not None:
                pool.close()
