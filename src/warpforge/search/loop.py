"""The optimisation loop: plan → prompt → LLM → parse → evaluate → archive, one generation at a time.

For each task, a strategy (best_of_n.py, evolve.py) plans a generation of `generation_size`
slots from the attempts recorded *before* that generation; the LLM calls of a generation run
concurrently (daemon threads; the client limits requests in flight) and each reply is
evaluated as soon as it arrives (by the run's `Evaluator`: in process through the task's Judge, or on a
worker pool), so LLM calls overlap evaluations.
Every proposal and every evaluation is written to the archive when it happens. Steps are
numbered in advance, so a run killed at any point resumes where it stopped: recorded
candidates are not proposed again, evaluated ones are not evaluated again, and a candidate
recorded but not yet evaluated is evaluated first; a run has one owner process at a time (a
second optimize on the same live run refuses), and a larger budget continues a finished run
(resume.py). A reply repeating a program the run already has is recorded as a duplicate, not
evaluated again, and the next generation's prompts say so. Given the same seed and recorded
replies (the `replay` provider) a run plans the same prompts.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from warpforge.archive import Archive, Attempt, RunLock, best_attempt, improves_on_eager, target_reached
from warpforge.candidate import Candidate, EvalResult
from warpforge.config import EvalConfig
from warpforge.errors import ConfigError
from warpforge.evaluator import Evaluator, LocalEvaluator
from warpforge.executor.evaluators import make_evaluator
from warpforge.propose import DUPLICATE, Proposal, duplicate_of
from warpforge.propose.llm import Completion, LLMClient, LLMError
from warpforge.propose.parse import parse_reply, parse_review
from warpforge.propose.prompts import PromptContext, Variant, render
from warpforge.search.best_of_n import best_of_n
from warpforge.search.evolve import evolve
from warpforge.search.features import features_of
from warpforge.search.plan import Plan, Strategy, beats, incumbent, result_field
from warpforge.search.resume import latest_run, run_keys, work_left
from warpforge.search.retrieval import stepping_stones
from warpforge.task import Task

STRATEGIES: dict[str, Strategy] = {"evolve": evolve, "best-of-n": best_of_n}


@dataclass(frozen=True)
class Budget:
    candidates: int = 16
    """Replies per task, i.e. model calls: a failed reply and a duplicate (one repeating an earlier
    candidate) each use one, as they cost tokens, so a model that only repeats itself still ends."""
    tokens: int | None = None
    """Prompt + completion tokens for the whole run, across tasks and resumes."""
    cost_usd: float | None = None
    """LLM spend for the whole run, from the configured prices."""
    gpu_seconds: float | None = None
    """Evaluation wall seconds in this invocation."""
    wall_seconds: float | None = None
    """Wall seconds of this invocation."""
    target_speedup: float | None = None
    """Stop a task once its best verified candidate is this much faster than eager PyTorch."""


@dataclass(frozen=True)
class OptimizeConfig:
    strategy: str = "evolve"
    budget: Budget = Budget()
    eval: EvalConfig = EvalConfig()
    seed: int = 0
    generation_size: int = 4
    """Slots planned together; their LLM calls run concurrently."""
    language: str = "any"
    """What the prompts ask for: a kernel language's name (languages.names()) or any."""
    review_above: float = 10.0
    """A verified speedup above this is audited by a second LLM call (CUDA-L1 checked > ~10x)."""
    max_tokens: int = 8192

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}: choose one of {', '.join(STRATEGIES)}")
        if self.generation_size < 1 or self.budget.candidates < 1:
            raise ConfigError("--max-candidates and the generation size must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TaskProgress:
    """What the live display shows for one task (mutable; the loop updates it)."""

    task: str
    state: str = "waiting"
    proposed: int = 0
    """Replies with a new program or a failure; duplicates are counted apart."""
    duplicates: int = 0
    """Replies that repeated a program the run already had (not evaluated again)."""
    evaluated: int = 0
    correct: int = 0
    best_speedup: float | None = None
    """archive.best_attempt of the run's attempts so far: the number every other view shows."""
    improved: bool = False
    """That attempt passes archive.improves_on_eager."""
    best_claim: str = "no correct attempt yet"
    """That attempt's speed claim in words (claim.Claim.words), or why there is none."""
    tokens: int = 0
    cost_usd: float = 0.0
    last: str = ""


@dataclass(frozen=True)
class TaskOutcome:
    task: str
    best: Attempt | None
    """archive.best_attempt of the run's attempts of this task."""
    attempts: int
    """Recorded replies of the run, duplicates not included."""
    improved: bool
    """archive.improves_on_eager(best): faster than eager PyTorch beyond the noise."""
    duplicates: int = 0
    """Replies that repeated a program the run already had."""


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    outcomes: tuple[TaskOutcome, ...]
    stopped_by: str
    """"" when every task used its budget or reached its target; else the budget that ran out."""
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class _Totals:
    tokens: int = 0
    cost_usd: float = 0.0
    gpu_seconds: float = 0.0
    started: float = field(default_factory=time.monotonic)


class Optimizer:
    """Runs the loop for a list of tasks against one archive (see the module docstring)."""

    def __init__(self, archive: Archive, llm: LLMClient, config: OptimizeConfig,
                 on_progress: Callable[[TaskProgress], None] | None = None, pool: Any = None,
                 evaluator: Evaluator | None = None) -> None:
        self.archive, self.llm, self.cfg = archive, llm, config
        self.eval_cfg = config.eval.resolved()
        self.evaluator: Evaluator = evaluator or make_evaluator(self.eval_cfg, pool=pool, max_judges=1)
        """Where candidates are evaluated (evaluator.py): by default in this process, one after
        another through the task's Judge; with `pool` (an `executor.EvalPool`), a generation's
        candidates in parallel on its workers (one per GPU, or Ray actors)."""
        self._owns_evaluator = evaluator is None
        self.on_progress = on_progress or (lambda p: None)
        self.totals = _Totals()
        self._totals_lock = threading.Lock()  # tasks optimised in parallel add to the totals from their threads
        self._gpu = ""  # the GPU's name, from the first evaluation's hardware record (the parent starts no CUDA)

    def run(self, tasks: Sequence[Task], parallel: int = 1) -> RunSummary:
        """Optimise every task; `parallel` tasks at once (only on a pool: its workers, or an outbox
        whose jobs another machine evaluates), so one generation's candidates of all of them wait
        for evaluation together."""
        if parallel > 1 and isinstance(self.evaluator, LocalEvaluator):
            raise ConfigError("optimising several tasks at once needs --executor or --outbox: evaluations in this "
                              "process run one at a time, and two at once on one GPU would time each other")
        run_id, lock = self._claim_run(tasks)
        with lock:  # held until the run ends: a second optimize on this archive cannot resume it meanwhile
            try:
                return self._run(run_id, tasks, max(1, parallel))
            finally:
                if self._owns_evaluator:
                    self.evaluator.close()

    def _run(self, run_id: str, tasks: Sequence[Task], parallel: int = 1) -> RunSummary:
        self.totals.tokens = sum((a.prompt_tokens or 0) + (a.completion_tokens or 0)
                                 for a in self.archive.attempts(run_id=run_id))
        self.totals.cost_usd = sum(a.cost_usd or 0.0 for a in self.archive.attempts(run_id=run_id))
        outcomes, stopped_by = [], ""
        progress = {t.name: TaskProgress(t.name) for t in tasks}
        try:
            if parallel > 1:
                for task in tasks:
                    self.archive.add_task(task)
                with ThreadPoolExecutor(min(parallel, len(tasks)), thread_name_prefix="task") as threads:
                    stops = list(threads.map(lambda t: self._run_task(run_id, t, progress[t.name]), tasks))
                outcomes = [self._outcome(run_id, t) for t in tasks]
                stopped_by = next((s for s in stops if s), "")
            else:
                for task in tasks:
                    self.archive.add_task(task)
                    stopped_by = self._run_task(run_id, task, progress[task.name])
                    outcomes.append(self._outcome(run_id, task))
                    if stopped_by:
                        break
        except KeyboardInterrupt:
            self.archive.finish_run(run_id, "stopped")
            raise
        self.archive.finish_run(run_id, "stopped" if stopped_by else "done")
        return RunSummary(run_id, tuple(outcomes), stopped_by, self.totals.tokens, self.totals.cost_usd)

    def _claim_run(self, tasks: Sequence[Task]) -> tuple[str, RunLock]:
        """Resume the latest run with the same configuration and tasks, whatever its budget (a
        finished one continues as far as this budget goes), else start one; either way locked
        for this process (ConfigError, one sentence, when another one has it)."""
        config = run_config(self.cfg, tasks, [m.name for m in self.llm.specs])
        run = latest_run(self.archive, config)
        if run is not None:
            lock = self.archive.lock_run(run.id)  # before its status is touched: a live run is left as it is
            return self.archive.start_run(json.loads(run.config), self.cfg.seed, run_id=run.id), lock
        run_id = self.archive.start_run({**config, "key": run_keys(config)[0]}, self.cfg.seed)
        # another optimize may see the new run before we lock it: then it owns it and we refuse
        return run_id, self.archive.lock_run(run_id)

    # -- one task ------------------------------------------------------------------------------

    def _run_task(self, run_id: str, task: Task, progress: TaskProgress) -> str:
        cfg, size = self.cfg, self.cfg.generation_size
        recorded = self.archive.steps(run_id, task.name)
        self._show(progress, recorded.values(), "resuming" if recorded else "starting")
        for attempt in self.archive.unevaluated(run_id, task.name):  # left by a run that was killed
            self._evaluate(task, attempt)
        for gen_start in range(0, cfg.budget.candidates, size):
            stop = self._stop_reason(run_id, task)
            if stop:
                self._show(progress, self.archive.steps(run_id, task.name).values(), stop)
                return "" if stop.startswith("target") else stop
            recorded = self.archive.steps(run_id, task.name)
            slots = [s for s in range(gen_start, min(gen_start + size, cfg.budget.candidates)) if s not in recorded]
            if not slots:
                continue
            before = [a for a in recorded.values() if a.step < gen_start]
            stones = stepping_stones(self.archive, task.name, task.source)
            plans = STRATEGIES[cfg.strategy](before, stones, size, gen_start // size, cfg.seed)
            # the previous generation's replies that repeated a program: its prompts ask for something else
            repeated = tuple(dict.fromkeys(n for a in before if a.step >= gen_start - size
                                           for n in [duplicate_of(a.failure)] if n is not None))
            self._generation(run_id, task, {s: dataclasses.replace(plans[s - gen_start], repeated=repeated)
                                            for s in slots}, progress)
        steps = self.archive.steps(run_id, task.name)
        self._show(progress, steps.values(), "done")
        return ""

    def _generation(self, run_id: str, task: Task, plans: dict[int, Plan], progress: TaskProgress) -> None:
        """Propose every slot concurrently; evaluate each reply as it arrives (on a worker pool:
        submitted as it arrives, recorded as results come back)."""
        replies: queue.Queue[tuple[int, Proposal]] = queue.Queue()
        pending: dict[Future[EvalResult], tuple[Attempt, float]] = {}
        for step, plan in plans.items():
            threading.Thread(target=lambda s=step, p=plan: replies.put((s, self._propose(run_id, task, s, p))),
                             name=f"propose-{task.name}-{step}", daemon=True).start()
        for _ in plans:
            step, proposal = replies.get()
            plan = plans[step]
            with self._totals_lock:
                self.totals.tokens += proposal.prompt_tokens + proposal.completion_tokens
                self.totals.cost_usd += proposal.cost_usd
            self.archive.add_llm_call(run_id, task.name, proposal.model, plan.strategy, proposal.prompt_tokens,
                                      proposal.completion_tokens, proposal.cost_usd, proposal.seconds,
                                      proposal.failure if proposal.failure.startswith("LLM") else "")
            proposal = self._dedupe(run_id, task, proposal)
            source = proposal.candidate.source if proposal.candidate else None
            features = features_of(source) if source else None
            candidate_id = self.archive.add_candidate(
                run_id, proposal, step, parents=plan.parent_ids, island=plan.island,
                features=features.to_dict() if features else None, language=features.language if features else "unknown")
            self.archive.drop_request(run_id, task.name, step)
            repeat = duplicate_of(proposal.failure)
            progress.last = f"step {step}: {plan.strategy}" + (
                f" repeated candidate #{repeat}" if repeat is not None else
                f" failed: {proposal.failure}" if proposal.failure else "")
            self._show(progress, self.archive.steps(run_id, task.name).values(), "evaluating")
            if proposal.candidate is not None:
                attempt = self.archive.attempt(candidate_id)
                started = time.monotonic()
                future = self.evaluator.submit(task, _candidate(attempt))
                if future.done():  # evaluated in this thread (a LocalEvaluator): record it now
                    self._record(attempt, future.result(), started)
                else:
                    pending[future] = (attempt, started)
            self._show(progress, self.archive.steps(run_id, task.name).values(), "proposing")
        for future in as_completed(pending):
            attempt, started = pending[future]
            self._record(attempt, future.result(), started)

    def _propose(self, run_id: str, task: Task, step: int, plan: Plan) -> Proposal:
        """Runs in a proposer thread: never raises (a failure is a Proposal with a reason), so the
        loop waiting for this slot always gets an answer."""
        try:
            return self._ask(run_id, task, step, plan)
        except Exception as exc:  # noqa: BLE001  (a thread boundary: whatever broke becomes this slot's failure)
            return Proposal(task.name, plan.strategy, failure=f"proposing failed: {type(exc).__name__}: {exc}")

    def _ask(self, run_id: str, task: Task, step: int, plan: Plan) -> Proposal:
        # a run killed while the model worked on this step sends the same request again: the
        # prompt rendered now would differ (retrieval sees what other tasks found since), and an
        # inbox reply, already written or on its way, answers only the request it was asked
        stored = self.archive.request(run_id, task.name, step)
        if stored is not None and stored[:2] == (plan.strategy, list(plan.parent_ids)):
            messages = stored[2]
        else:
            messages = render(plan.strategy, self._context(task, plan))
            self.archive.set_request(run_id, task.name, step, plan.strategy, plan.parent_ids, messages)
        prompt = json.dumps(messages)
        try:
            completion: Completion = self.llm.complete(messages, max_tokens=self.cfg.max_tokens)
        except LLMError as exc:
            return Proposal(task.name, plan.strategy, failure=f"LLM call failed: {exc}", prompt=prompt)
        previous = plan.current.source if plan.current is not None and plan.strategy in ("repair", "optimise") else None
        parsed = parse_reply(completion.text, previous=previous, finish_reason=completion.finish_reason,
                             require_analysis=plan.strategy == "contrastive")
        candidate = Candidate(parsed.source, parents=tuple(str(i) for i in plan.parent_ids), strategy=plan.strategy,
                              model=completion.model) if parsed.source else None
        return Proposal(task.name, plan.strategy, completion.model, candidate, parsed.failure, prompt, completion.text,
                        parsed.analysis, completion.prompt_tokens, completion.completion_tokens, completion.cost_usd,
                        completion.seconds)

    def _context(self, task: Task, plan: Plan) -> PromptContext:
        hardware = self.eval_cfg.device or "cpu"
        current = plan.current
        return PromptContext(
            task_name=task.name, task_source=task.source, device=hardware,
            gpu=self._gpu, language=self.cfg.language,
            current=_variant(current) if current else None,
            compile_log=(result_field(current, "compile_log") or current.reason or "") if current else "",
            resources=_resources(current) if current else "",
            profile=json.dumps(result_field(current, "kernels", {}))[:4000] if current else "",
            variants=tuple(_variant(a) for a in plan.variants), parents=tuple(_variant(a) for a in plan.parents),
            stepping_stones=tuple(_variant(a) for a in plan.stones), repeated=plan.repeated)

    def _dedupe(self, run_id: str, task: Task, proposal: Proposal) -> Proposal:
        """A program this task's run already has (evaluated, or on its way) is recorded as a
        duplicate of it and not evaluated again (tinygrad skips duplicates); another run may be
        on other hardware, so its results are not reused."""
        if proposal.candidate is None:
            return proposal
        for a in self.archive.attempts(task=task.name, run_id=run_id):
            if a.source is not None and a.source_hash == proposal.candidate.id:
                return dataclasses.replace(proposal, candidate=None, failure=DUPLICATE.format(id=a.id))
        return proposal

    def _evaluate(self, task: Task, attempt: Attempt) -> None:
        started = time.monotonic()
        self._record(attempt, self.evaluator.submit(task, _candidate(attempt)).result(), started)

    def _record(self, attempt: Attempt, result: EvalResult, started: float) -> None:
        """Store one evaluation (from its task's thread: the archive serialises the writes of tasks optimised
        in parallel), credit the model, review."""
        before = incumbent([a for a in self.archive.attempts(task=attempt.task, run_id=attempt.run_id)
                            if a.id != attempt.id])
        with self._totals_lock:
            self.totals.gpu_seconds += time.monotonic() - started
        self._gpu = self._gpu or str(result.hardware.get("gpu", ""))
        evaluation_id = self.archive.add_evaluation(attempt.id, result)
        evaluated = self.archive.attempt(attempt.id)
        if attempt.model:
            self.llm.record(attempt.model, beats(evaluated, before))
        if result.correct and (result.speedup or 0.0) > self.cfg.review_above:
            self._review(evaluation_id, evaluated, result)

    def _review(self, evaluation_id: int, attempt: Attempt, result: EvalResult) -> None:
        """A second LLM reads a suspiciously fast candidate and records its finding. Advisory only:
        the evaluator's verdict stands (it is the guarantee; this is a second line of defence)."""
        task_source = self.archive.task_source(attempt.task) or ""
        ctx = PromptContext(task_name=attempt.task, task_source=task_source, device=self.eval_cfg.device or "cpu",
                            current=_variant(attempt))
        try:
            completion = self.llm.complete(render("review", ctx), max_tokens=2048)
        except LLMError as exc:
            self.archive.set_review(evaluation_id, {"verdict": "unclear", "finding": f"review call failed: {exc}"})
            return
        self.archive.add_llm_call(attempt.run_id, attempt.task, completion.model, "review", completion.prompt_tokens,
                                  completion.completion_tokens, completion.cost_usd, completion.seconds)
        self.totals.tokens += completion.prompt_tokens + completion.completion_tokens
        self.totals.cost_usd += completion.cost_usd
        verdict, finding = parse_review(completion.text)
        self.archive.set_review(evaluation_id, {"verdict": verdict, "finding": finding, "model": completion.model,
                                                "speedup": result.speedup})

    # -- budgets and reporting -----------------------------------------------------------------

    def _stop_reason(self, run_id: str, task: Task) -> str:
        b, t = self.cfg.budget, self.totals
        if b.tokens is not None and t.tokens >= b.tokens:
            return f"token budget spent ({t.tokens} of {b.tokens})"
        if b.cost_usd is not None and t.cost_usd >= b.cost_usd:
            return f"cost budget spent (${t.cost_usd:.2f} of ${b.cost_usd:.2f})"
        if b.gpu_seconds is not None and t.gpu_seconds >= b.gpu_seconds:
            return f"evaluation-time budget spent ({t.gpu_seconds:.0f} s of {b.gpu_seconds:.0f} s)"
        if b.wall_seconds is not None and time.monotonic() - t.started >= b.wall_seconds:
            return f"wall-time budget spent ({b.wall_seconds:.0f} s)"
        best = best_attempt(self.archive.attempts(task=task.name, run_id=run_id))
        if b.target_speedup is not None and target_reached(best, b.target_speedup):
            return f"target speedup {b.target_speedup:g}x reached"
        return ""

    def _show(self, progress: TaskProgress, attempts: Any, state: str) -> None:
        attempts = list(attempts)
        best = best_attempt(attempts)  # what archive ls/best and the report show for this run
        progress.state = state
        progress.duplicates = sum(duplicate_of(a.failure) is not None for a in attempts)
        progress.proposed = len(attempts) - progress.duplicates
        progress.evaluated = sum(1 for a in attempts if a.status is not None)
        progress.correct = sum(1 for a in attempts if a.correct)
        progress.best_speedup = best.speedup if best else None
        progress.improved = best is not None and improves_on_eager(best)
        progress.best_claim = best.claim.words() if best else (
            "no correct attempt yet" if not progress.correct else "not timed")
        progress.tokens = sum((a.prompt_tokens or 0) + (a.completion_tokens or 0) for a in attempts)
        progress.cost_usd = sum(a.cost_usd or 0.0 for a in attempts)
        self.on_progress(progress)

    def _outcome(self, run_id: str, task: Task) -> TaskOutcome:
        return _outcome(self.archive, run_id, task)


def run_config(cfg: OptimizeConfig, tasks: Sequence[Task], models: Sequence[str]) -> dict[str, Any]:
    """What a run is recorded with (its key, resume.py, leaves the budget out)."""
    return {**cfg.to_dict(), "tasks": [t.name for t in tasks], "models": list(models)}


def finished_run(archive: Archive, cfg: OptimizeConfig, tasks: Sequence[Task],
                 models: Sequence[str]) -> RunSummary | None:
    """The summary of this configuration's run when it finished and this budget leaves it nothing
    to do (the model is then not asked anything); None when there is no such run or work is left
    (Optimizer.run resumes or continues it)."""
    run = latest_run(archive, run_config(cfg, tasks, models))
    b = cfg.budget
    if run is None or run.status != "done" or any(work_left(archive, run.id, t.name, b.candidates, b.target_speedup)
                                                   for t in tasks):
        return None
    attempts = archive.attempts(run_id=run.id)
    return RunSummary(run.id, tuple(_outcome(archive, run.id, t) for t in tasks), "",
                      sum(a.tokens for a in attempts), sum(a.cost_usd or 0.0 for a in attempts))


def _outcome(archive: Archive, run_id: str, task: Task) -> TaskOutcome:
    attempts = archive.attempts(task=task.name, run_id=run_id)
    best = best_attempt(attempts)
    repeats = sum(duplicate_of(a.failure) is not None for a in attempts)
    return TaskOutcome(task.name, best, len(attempts) - repeats, best is not None and improves_on_eager(best), repeats)


def _candidate(attempt: Attempt) -> Candidate:
    assert attempt.source is not None
    return Candidate(attempt.source, strategy=attempt.strategy or "", model=attempt.model or "")


def _variant(a: Attempt) -> Variant:
    return Variant(source=a.source or "", status=a.status or "not evaluated", speedup=a.speedup,
                   reason=a.reason or a.failure or "", analysis=a.analysis or "", task=a.task, candidate_id=a.id)


def _resources(a: Attempt) -> str:
    """What the evaluator knows of the candidate's resources: the compiler log's summary lines."""
    log = str(result_field(a, "compile_log") or "")
    lines = [ln for ln in log.splitlines() if any(k in ln for k in ("registers", "spill", "smem", "shared"))]
    return "\n".join(lines[:20])
