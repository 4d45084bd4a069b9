"""The evaluator: static -> reference -> compile -> verify -> bench -> profile.

`evaluate(task, candidate, config)` evaluates one candidate; a `Judge` evaluates many for one
task and pays the start-up once. The candidate is parsed here (static.py), the task runs in a
reference child (reference.py), each candidate in a fresh sandboxed child of its own
(worker.py), and the verdict is decided in this process (verdict.py) from the evidence the
children send. The candidate never sees the reference outputs, and nothing it prints or does
to its own process can make it `correct`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import secrets
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch

from warpforge import languages
from warpforge.candidate import Candidate, EvalResult, Precompiled, PrecompileStatus, Timing
from warpforge.config import EvalConfig
from warpforge.errors import ConfigError, HarnessError, TaskError
from warpforge.evaluate import compile as compile_mod
from warpforge.evaluate.inputs import fingerprint_positions
from warpforge.evaluate import jail, leftovers
from warpforge.evaluate.paired import Rounds, pair_memory_note
from warpforge.evaluate import protocol
from warpforge.evaluate.presets import CPU_BYTES
from warpforge.evaluate.protocol import (Baseline, BaselineFailed, CandidateSpec, CheckFresh, Command, Compare,
                                         Compared, Draw, FreshChecked, Loaded, ParentView, ReferenceReady,
                                         ReferenceSpec, TaskFailed, Timed, TimeRound)
from warpforge.evaluate.sandbox import Child, ChildOutcome
from warpforge.evaluate.static import check_source
from warpforge.evaluate.verdict import (CONTENT_CACHE_RATIO, SPEED_OF_LIGHT_SLACK, Reference, comparison_from,
                                        confirm_content_cache, content_cache_rejected, content_cache_suspected,
                                        decide, fresh_calls_to_check, fresh_summaries, with_verdict)
from warpforge.evaluate.verify import (Comparison, RefSummary, degenerate_note, insensitive_note, tolerance_for,
                                        unfinite_note)
from warpforge.languages import needs_build
from warpforge.target import CPU, Target, build_target
from warpforge.task import Task

__all__ = ["CONTENT_CACHE_RATIO", "SPEED_OF_LIGHT_SLACK", "Judge", "content_cache_suspected", "evaluate", "needs_build",
           "precompile"]

FINGERPRINT_POSITIONS = 32
UNSANDBOXED = ("unsandboxed: the candidate ran without the OS sandbox (--no-sandbox), so it could read and write "
               "this machine's files and network; treat this verdict as untrusted")


def evaluate(task: Task, candidate: Candidate, config: EvalConfig) -> EvalResult:
    """Evaluate one candidate against one task (a `Judge` used once)."""
    with Judge(task, config.replace(spare_workers=0)) as judge:
        return judge.evaluate(candidate)


def precompile(source: str, config: EvalConfig, target: Target) -> Precompiled:
    """Import a candidate in a sandboxed child that sees no GPU, so the extensions it builds land
    in the compile cache under the key a GPU worker building for `target` looks up.

    Nothing of the candidate runs beyond its import and no verdict comes of it: a failure here is
    only reported (`status`), and the GPU worker's own evaluation gives the verdict. The same
    static policy, memory limit and time limit apply as to an evaluation."""
    cfg = config.resolved()
    start = time.monotonic()
    report = check_source(source)
    if report.syntax_error or report.rejected:
        return {"status": "skipped", "seconds": 0.0}
    root = Path(tempfile.mkdtemp(prefix="warpforge-precompile-", dir=os.environ.get("WARPFORGE_TMP_ROOT")))
    tmp, private = root / "work", root / "cache"
    tmp.mkdir()
    private.mkdir()
    key = compile_mod.cache_key(source, target)
    try:
        (tmp / "candidate.py").write_text(source)
        staged = None
        if cfg.safety.sandbox:
            staged = compile_mod.stage(cfg.transport.cache_dir, key, private)
            cache = compile_mod.private_env(jail.CACHE_MOUNT, target)
        else:
            cache = compile_mod.cache_env(cfg.transport.cache_dir, source, target)
        spec = CandidateSpec(str(tmp / "candidate.py"), "cpu", {**cache, "MAX_JOBS": "2"}, compile_only=True)
        (tmp / "spec.json").write_text(spec.to_json())
        env = {**_child_env(cfg.replace(device="cpu")), "TORCH_CUDA_ARCH_LIST": target.arch_list}
        for name in languages.env(CPU):  # it builds for the GPU: no language runs the CPU's way
            env.pop(name, None)
        child = Child("warpforge.evaluate.worker", [], env=env, cwd=str(tmp), output_limit_bytes=cfg.limits.output_limit_kb * 1024,
                      jail=_jail(cfg, tmp, private))
        watch = _folder_limit(cfg, [tmp, private])
        child.send(str(tmp / "spec.json"))
        outcome = child.wait(timeout_s=cfg.limits.timeout_s, mem_limit_mb=cfg.limits.mem_limit_gb * 1024, watch=watch)
        kinds = {m["type"] for m in outcome.messages}
        status: PrecompileStatus = ("crashed" if outcome.over_limit else "compiled" if "compiled" in kinds
                                    else "compile_error" if "compile_error" in kinds
                                    else "timeout" if outcome.timed_out else "crashed")
        if cfg.safety.sandbox and status == "compiled":
            compile_mod.publish(cfg.transport.cache_dir, key, private, staged)
    finally:
        leftovers.remove_tree(root)
    return {"status": status, "seconds": round(time.monotonic() - start, 3)}


class Judge:
    """Evaluates candidates for one task, one after another, keeping the set-up alive.

    The reference process loads the task once, then draws fresh inputs (new seeds from OS
    entropy) and their float64 outputs for *every* candidate, so no candidate can reuse what an
    earlier one saw; the baselines are timed once, in that clean process. Every candidate
    still runs in a fresh sandboxed process of its own; `config.spare_workers` of them are kept
    started ahead, so their imports and CUDA context are paid while earlier
    candidates run or the caller prepares the next one. Spares are paused (SIGSTOP) whenever
    anything is timed, so their start-up never overlaps a measurement. Use as a context
    manager, or call `close()`.
    """

    def __init__(self, task: Task, config: EvalConfig) -> None:
        self.task = task
        # a task file that did not come from the operator runs its program only inside the sandbox
        self.sandbox_reference = config.safety.sandbox_reference or task.untrusted
        if self.sandbox_reference and not config.safety.sandbox:
            raise ConfigError(f"the task {task.name} did not come from you, so its program runs only inside the "
                              "sandbox, which --no-sandbox turned off: evaluate it with the sandbox on")
        if self.sandbox_reference:  # CUDA IPC between two sandboxes failed on an H100 (the candidate could not
            config = config.replace(cuda_ipc=False)  # open the handles): sets travel as files
        self.cfg = config.resolved()
        assert self.cfg.device is not None and self.cfg.size is not None and self.cfg.spare_workers is not None
        self.spares = self.cfg.spare_workers
        if self.cfg.safety.sandbox:
            jail.require()  # one sentence saying how to enable it, before anything starts
        # strict fp32 overrides a task's own TF32 opt-in: the user asked for true fp32
        self.allow_tf32 = not self.cfg.safety.strict_fp32 and (self.cfg.safety.allow_tf32 or bool(task.metadata.get("allow_tf32")))
        self.target = build_target(self.cfg.device)  # what candidates build for: their cache key, the baselines'
        # tmpfs when there is one: GPU-sized inputs and outputs cross between processes as files
        shm = "/dev/shm" if _free_gb("/dev/shm") > 16 else None
        # a pool worker's Judges live under the folder its pool removes when the worker dies
        self._tmp = Path(tempfile.mkdtemp(prefix="warpforge-", dir=os.environ.get("WARPFORGE_TMP_ROOT") or shm))
        self._init_seed = secrets.randbits(31)
        self._server: Child | None = None
        self._loaded = Loaded(None, None, {})
        self._server_started = 0.0
        self._baselines: dict[str, Timing] | None = None
        self._baseline_notes: list[str] = []
        self._workers: deque[tuple[Child, Path]] = deque()  # started, oldest first
        self._count = 0
        self._draws = 0
        self._staged: dict[str, tuple[int, int]] | None = None  # what the current candidate's private cache got
        self._unstaged = False  # the next candidate's private cache starts empty (a confirming run)

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the reference process and the waiting candidate processes; remove the temp files."""
        self._stop_workers()
        if self._server is not None:
            self._server.kill()
            self._server = None
        leftovers.remove_tree(self._tmp)

    def evaluate(self, candidate: Candidate) -> EvalResult:
        result = self._evaluate(candidate)
        if content_cache_rejected(result):  # confirmed on a fresh draw, in a fresh process, or not at all
            self._unstaged = True  # and from an empty compile cache: nothing the first run wrote reaches it
            try:
                result = confirm_content_cache(result, self._evaluate(candidate))
            finally:
                self._unstaged = False
        if not self.cfg.safety.sandbox:
            result = dataclasses.replace(result, warnings=(*result.warnings, UNSANDBOXED))
        return result

    def _evaluate(self, candidate: Candidate) -> EvalResult:
        cfg = self.cfg
        base = EvalResult("crashed", "", "static", task=self.task.name, candidate_id=candidate.id,
                          config=cfg.to_dict())
        report = check_source(candidate.source)
        if not cfg.safety.static_checks:
            report = dataclasses.replace(report, rejected=None)
        if report.syntax_error:
            return with_verdict(base, "compile_error", f"the candidate cannot be loaded: {report.syntax_error}", "static")
        if report.rejected:
            return with_verdict(base, "rejected", f"rejected before running: the candidate {report.rejected}", "static")
        for dead in [w for w in self._workers if w[0].proc.poll() is not None]:  # spares that died waiting
            self._workers.remove(dead)
            dead[0].kill()
            leftovers.remove_tree(dead[1].parent)
        # started before the reference process loads the task, so their imports overlap it
        self._top_up(self.spares + 1 if self._draws == 0 else 1)
        if self._server is not None and self._server.proc.poll() is not None:
            self._server.kill()  # died while idle (killed by the OOM killer or by a candidate): start another
            self._server = None
        if self._server is None:
            try:
                self._start_server()
            except TaskError:  # the task itself is broken: no candidate will run
                self._stop_workers()
                raise
        worker, workdir = self._workers.popleft()
        try:
            try:
                reference = self._draw(workdir, worker)
            except _ServerDied:  # between candidates, or killed by the last one: one more try with a new one
                self._start_server()
                reference = self._draw(workdir, worker)
            return self._run_candidate(worker, workdir, candidate, reference, report.kernel_names, base)
        except TaskError:  # the task itself is broken: no candidate will run, stop the spares too
            self._stop_workers()
            raise
        finally:
            worker.kill()
            leftovers.remove_tree(workdir.parent)
            if self._server is not None:
                self._top_up()

    # -- the candidate process ---------------------------------------------------------------

    def _start_worker(self) -> tuple[Child, Path]:
        """A candidate process that imports torch and starts CUDA, then waits for a spec; it reads
        nothing of any candidate before that."""
        self._count += 1
        workdir = self._tmp / f"candidate-{self._count}" / "work"
        workdir.mkdir(parents=True)
        (workdir.parent / "cache").mkdir()
        worker = Child("warpforge.evaluate.worker", [], env=_child_env(self.cfg), cwd=str(workdir),
                       output_limit_bytes=self.cfg.limits.output_limit_kb * 1024,
                       jail=_jail(self.cfg, workdir, workdir.parent / "cache", hidden=(str(self._tmp),)))
        self._workers.append((worker, workdir))
        return worker, workdir

    def _stop_workers(self) -> None:
        while self._workers:
            self._workers.popleft()[0].kill()

    def _top_up(self, count: int | None = None) -> None:
        """Start candidate processes until `count` (default: the spares) are waiting."""
        while len(self._workers) < (self.spares if count is None else count):
            self._start_worker()

    def _run_candidate(self, worker: Child, workdir: Path, candidate: Candidate, reference: Reference,
                       kernel_names: tuple[str, ...], base: EvalResult) -> EvalResult:
        cfg = self.cfg
        base = dataclasses.replace(base, hardware=reference.loaded.hardware,
                                   tolerance=reference.tolerances[0].to_dict() if reference.tolerances else {})
        positions = [fingerprint_positions(n, FINGERPRINT_POSITIONS, secrets.randbits(31)).tolist()
                     for n in reference.numels]
        out_bytes = sum(n * d.itemsize for n, d in zip(reference.numels, reference.dtypes))
        candidate_path = workdir / "candidate.py"
        candidate_path.write_text(candidate.source)
        spec = CandidateSpec(
            candidate_path=str(candidate_path), inputs_path=str(workdir / "inputs.pt"), workdir=str(workdir),
            device=str(cfg.device), init_seed=self._init_seed, positions=positions, bench_seed=secrets.randbits(31),
            verify_sets=reference.verify_sets,
            poison_bytes=int(min(4 * out_bytes + (64 << 20), 2 << 30 if cfg.device == "cuda" else 256 << 20)),
            timing=cfg.timing.to_dict(), profile=cfg.profile and cfg.bench,
            kernel_names=list(kernel_names), env=self._cache_env(candidate, workdir.parent / "cache"),
            share_outputs=cfg.device == "cuda" and cfg.transport.cuda_ipc, strict_fp32=cfg.safety.strict_fp32)
        staged = self._staged
        spec_path = workdir / "spec.json"
        spec_path.write_text(spec.to_json())
        paused: list[Child] = []
        view = ParentView()

        def reference_round(first: bool) -> dict[str, Any]:
            started = time.monotonic()
            try:
                return self._time_reference_round(positions, first)
            finally:
                view.add_seconds("reference_rounds", started)

        view.rounds = (Rounds(cfg.timing.paired_rounds, cfg.timing.timing_bound, reference_round, random.Random(secrets.randbits(31)),
                              cfg.timing.process_spread or 0.0)
                       if cfg.bench and cfg.timing.paired_rounds and reference.paired else None)

        def on_message(message: dict[str, Any]) -> Command | None:
            rounds = view.rounds
            if message["type"] in ("bench", "bench_round"):
                if view.answered_rounds >= view.requested_rounds:
                    view.unrequested += 1  # not asked for: a forged message, which decide() rejects
                    return None
                view.answered_rounds += 1
                if rounds is None or not rounds.after_candidate(message.get("timing")):
                    return Command.END
                rounds.start_round()
                view.requested_rounds += 1
                return Command.AGAIN
            if message["type"] != "verified" or view.comparison is not None:
                return None
            # the files this harness told it to write, whatever paths the message names
            files = [str(workdir / f"out_{i}.pt") for i in range(reference.verify_sets)]
            started = time.monotonic()
            view.comparison, view.summaries = self._compare(files, reference, positions)
            view.add_seconds("compare", started)
            if not (view.comparison.ok and cfg.bench):
                return Command.STOP
            paused.extend(child for child, _ in self._workers)  # no spare's start-up during the timed calls
            for child in paused:
                child.pause()
            if rounds is not None:
                rounds.start_round()
            view.requested_rounds = 1
            return Command.BENCH

        mem_limit_mb = candidate_memory_mb(cfg, workdir)  # (before it runs: it may replace its inputs file)
        watch = _folder_limit(cfg, [workdir, workdir.parent / "cache"],
                              reference.verify_sets * leftovers.output_file_limit(out_bytes))
        worker.send(str(spec_path))
        view.sent = time.monotonic()
        try:
            outcome = worker.wait(timeout_s=cfg.limits.timeout_s, mem_limit_mb=mem_limit_mb, on_message=on_message,
                                  watch=watch)
        finally:
            for child in paused:
                child.resume()
        if view.comparison is not None and view.comparison.ok and cfg.bench:
            started = time.monotonic()
            view.summaries.update(self._check_fresh(outcome, reference, positions))
            view.add_seconds("fresh_checks", started)
        result = decide(outcome, view, reference, cfg, base)
        built = any(m["type"] == "compiled" for m in outcome.messages) and not outcome.over_limit
        if cfg.safety.sandbox and built:  # what a successful build made, nothing else (compile.build_products)
            compile_mod.publish(cfg.transport.cache_dir, compile_mod.cache_key(candidate.source, self.target),
                                workdir.parent / "cache", staged)
        return result

    def _time_reference_round(self, positions: list[list[int]], first: bool = False) -> dict[str, Any]:
        """One paired round of the task's program, in the reference process, on the current draw
        (fingerprinting its outputs at the candidate's positions between calls, as the candidate does),
        with the budget the candidate's run in the same round has: its first run's, else a round's."""
        assert self._server is not None
        self._server.send(protocol.request_json(TimeRound(secrets.randbits(31), self.cfg.timing.to_dict(), first,
                                                          positions)))
        timed = protocol.first(self._server_round("timed"), Timed)
        if timed is None:
            raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'timed' message")
        return dict(timed.timing)

    def _check_fresh(self, outcome: ChildOutcome, reference: Reference,
                     positions: list[list[int]]) -> dict[tuple[int, ...], RefSummary]:
        """References for a few timed calls on fresh content of each round, picked now that the
        candidate's process has ended (verdict.fresh_calls_to_check): their inputs made again and
        run in the reference process."""
        calls = fresh_calls_to_check(outcome, reference.sets, random.Random(secrets.randbits(63)))
        if not calls:
            return {}
        assert self._server is not None
        self._server.send(protocol.request_json(CheckFresh(calls, positions)))
        checked = protocol.first(self._server_round("fresh_checked"), FreshChecked)
        if checked is None:
            raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'fresh_checked' message")
        return fresh_summaries(calls, checked)

    def _cache_env(self, candidate: Candidate, private: Path) -> dict[str, str]:
        """Where the candidate's toolchains cache their builds: a private copy of its own entry when
        sandboxed, the shared cache when not."""
        if not self.cfg.safety.sandbox:
            return compile_mod.cache_env(self.cfg.transport.cache_dir, candidate.source, self.target)
        self._staged = {} if self._unstaged else \
            compile_mod.stage(self.cfg.transport.cache_dir, compile_mod.cache_key(candidate.source, self.target), private)
        return compile_mod.private_env(jail.CACHE_MOUNT, self.target)

    def _compare(self, files: list[str], reference: Reference,
                 positions: list[list[int]]) -> tuple[Comparison, dict[tuple[int, ...], RefSummary]]:
        """The reference process compares the candidate's outputs with the references it holds."""
        request = Compare(files, positions, [t.to_dict() for t in reference.tolerances])
        oversized = _oversized_outputs(files, reference)
        if oversized:
            return Comparison(False, oversized), {}
        try:
            assert self._server is not None
            self._server.send(protocol.request_json(request))
            compared = protocol.first(self._server_round("compared"), Compared)
            if compared is None:
                raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'compared' message")
            return comparison_from(compared)
        except _ServerDied as exc:
            if "host memory" in str(exc):  # files of the outputs' size: the reference's own cost, not a cheat
                # (the candidate's own memory is capped: candidate_memory_mb and the sandbox's /tmp)
                raise HarnessError(f"{exc}{HOST_MEMORY_HINT}") from None
            # the candidate's files are the only new thing it was given
            return Comparison(False, f"the reference process failed while reading the candidate's outputs: {exc}"), {}

    # -- the reference process ---------------------------------------------------------------

    def _start_server(self) -> None:
        cfg = self.cfg
        spec = ReferenceSpec(
            task_path=str(self.task.path), sizes=self.task.sizes(cfg.size or ""), device=str(cfg.device),
            init_seed=self._init_seed, allow_tf32=self.allow_tf32, compile_baseline=cfg.timing.compile_baseline,
            timing=cfg.timing.to_dict(), task_hash=self.task.source_hash,
            baseline_cache_dir=str(Path(cfg.transport.cache_dir) / "baselines" / str(self.target)) if cfg.timing.reuse_baselines else "",
            # a task with no CPU preset (KernelBench's files carry their GPU sizes only) is scaled down
            fit_bytes=CPU_BYTES if cfg.size == "cpu" and "cpu" not in (self.task.metadata.get("sizes") or {}) else 0,
            strict_fp32=cfg.safety.strict_fp32)
        spec_path = self._tmp / "reference_spec.json"
        reference_jail = None
        if self.sandbox_reference:  # a task from elsewhere: a copy of its file, no host caches, no home
            copy = self._tmp / "task" / self.task.path.name
            copy.parent.mkdir(exist_ok=True)
            copy.write_text(self.task.source)
            spec = dataclasses.replace(spec, task_path=str(copy), baseline_cache_dir="")
            env = _child_env(cfg)
            reference_jail = _jail(cfg, self._tmp, None)
        else:  # the operator's own task file, outside the sandbox (docs/evaluation.md): its home's caches
            env = {**_child_env(cfg), "HOME": os.path.expanduser("~"), "USER": os.environ.get("USER", "warpforge")}
        spec_path.write_text(spec.to_json())
        self._server_started = time.monotonic()
        self._server = Child("warpforge.evaluate.reference", [str(spec_path)], env=env,
                             output_limit_bytes=cfg.limits.output_limit_kb * 1024, jail=reference_jail)
        loaded = protocol.first(self._server_round("loaded"), Loaded)
        if loaded is None:
            raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'loaded' message")
        self._loaded = loaded

    def _server_round(self, until: str, on_message: Any = None) -> list[dict[str, Any]]:
        """Wait for the reference process's `until` message; its messages of this round."""
        server = self._server
        assert server is not None
        first = len(server.outcome.messages)
        limit_mb = reference_memory_mb(self.cfg)
        outcome = server.wait(timeout_s=self.cfg.limits.reference_timeout_s, mem_limit_mb=limit_mb, on_message=on_message,
                              until=until)
        messages = outcome.messages[first:]
        if messages and messages[-1]["type"] == until:
            return messages
        self._server = None  # it is dead (wait kills it in every other case); the next call starts another
        failed = protocol.first(messages, TaskFailed)
        if failed is not None:
            raise TaskError(failed.message)
        why = f"timed out after {self.cfg.limits.reference_timeout_s:g} s" if outcome.timed_out else \
            f"used more than the {limit_mb / 1024:.0f} GB of host memory it may" if outcome.out_of_memory else \
            "was killed by SIGKILL, not by warpforge (most likely the system's out-of-memory killer: the machine's " \
            "host memory ran out)" if outcome.returncode == -9 else f"exited with {outcome.returncode}"
        detail = outcome.output[-3000:] if os.environ.get("WARPFORGE_DEBUG") else \
            compile_mod.summarize_errors(outcome.output, 4)
        error = HarnessError if outcome.timed_out or until == "loaded" else _ServerDied
        raise error(f"the reference process for {self.task.name} {why}: {detail or 'no output'}"
                    + (OUT_OF_GPU_MEMORY if "OutOfMemoryError" in outcome.output else ""))

    def _draw(self, workdir: Path, worker: Child) -> Reference:
        """Fresh inputs (into the candidate's folder) and their reference outputs (kept by the
        reference process, which compares the candidate's outputs with them)."""
        cfg = self.cfg
        started = time.monotonic()
        time_baselines = bool(cfg.bench) and self._baselines is None
        seeds = [secrets.randbits(31) for _ in range(cfg.trials + (cfg.timing.unseen_bench_sets if cfg.bench else 0))]
        # the trials, then input sets used only by timed calls (never seen during verification)
        request = Draw(inputs_path=str(workdir / "inputs.pt"), trial_seeds=seeds, verify_sets=cfg.trials,
                       sets_budget_bytes=self._sets_budget(), time_baselines=time_baselines,
                       share_inputs=cfg.device == "cuda" and cfg.transport.cuda_ipc)

        paused: list[Child] = []

        def on_message(message: dict[str, Any]) -> str | None:
            if message["type"] != "reference" or not time_baselines:
                return None
            # the candidate processes' start-up must not slow the baselines down: stop them meanwhile
            paused.extend([worker, *(child for child, _ in self._workers)])
            for child in paused:
                child.pause()
            return "time"

        assert self._server is not None
        self._server.send(protocol.request_json(request))
        try:
            messages = self._server_round("drawn", on_message)
        finally:
            for child in paused:
                child.resume()
        data = protocol.first(messages, ReferenceReady)
        if data is None:
            raise HarnessError(f"the reference process for {self.task.name} sent no well-formed 'reference' message")
        if time_baselines:
            self._record_baselines(messages)
        dtypes = [getattr(torch, d.removeprefix("torch.")) for d in data.dtypes]
        def largest(j: int, k: int) -> float:  # over the draws; a NaN counts as infinite (max() would lose it)
            return max(v if v == v else math.inf for v in (errs[j][k] for errs in data.native_errors))

        worst = [(largest(j, 0), largest(j, 1)) for j in range(len(dtypes))]
        tolerances = [tolerance_for(d, self.task.metadata, self.allow_tf32, (w[0], w[1])) for d, w in zip(dtypes, worst)]
        degenerate = [n for j, w in enumerate(worst) if (n := degenerate_note(w[0], j, len(worst)))]
        degenerate += [n for j, w in enumerate(worst) if (n := unfinite_note(w, j, len(worst)))]
        degenerate += [n for j, (spread, tol) in enumerate(zip(data.spreads, tolerances))
                       if (n := insensitive_note(spread, tol, j, len(tolerances)))]
        # the first draw carries the reference process's start-up (and the baselines)
        seconds = time.monotonic() - (started if self._draws else self._server_started)
        self._draws += 1
        numels, sets = [int(n) for n in data.numels], int(data.sets)
        unpaired = pair_memory_note(sets, int(data.input_bytes),
                                    sum(n * d.itemsize for n, d in zip(numels, dtypes)),
                                    self._loaded.hardware.get("gpu_memory_gb")) \
            if cfg.device == "cuda" and cfg.bench and cfg.timing.paired_rounds else None
        return Reference(numels, sets, dtypes, tolerances, self._loaded, dict(self._baselines or {}),
                         [*self._baseline_notes, *data.notes, *degenerate, *([unpaired] if unpaired else [])],
                         seconds, int(data.verify_sets), paired=unpaired is None,
                         parts={str(k): float(v) for k, v in data.seconds.items()})

    def _sets_budget(self) -> int | None:
        """Bytes the reference's input sets and float64 outputs may take (config.limits.sets_memory_gb)."""
        if self.cfg.limits.sets_memory_gb is not None:
            return int(self.cfg.limits.sets_memory_gb * 2**30)
        total = self._loaded.hardware.get("gpu_memory_gb") if self.cfg.device == "cuda" else None
        return int(0.3 * float(total) * 2**30) if total else None

    def _record_baselines(self, messages: list[dict[str, Any]]) -> None:
        measured = protocol.every(messages, Baseline)
        baselines = {m.name: Timing.from_dict(m.timing) for m in measured}
        notes = [f"{m.name} baseline failed: {m.message}" for m in protocol.every(messages, BaselineFailed)]
        if any(m.cached for m in measured):
            notes.append("baseline timings reused from an earlier clean-process measurement on this machine "
                         "(--fresh-baselines to re-measure)")
        if "eager" not in baselines:
            raise HarnessError(f"the reference process of {self.task.name} sent no eager baseline timing")
        self._baselines, self._baseline_notes = baselines, notes


def reference_memory_mb(cfg: EvalConfig) -> float:
    """The reference process's host-memory limit: four times `mem_limit_gb` (at least 8 GB), or
    half the machine's memory when that is more. It holds every input set and its float64 outputs
    in host memory when they do not fit the GPU (KernelBench's 2025 sizes: 19 GB a set)."""
    try:
        machine_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        machine_mb = 0.0
    return max(max(cfg.limits.mem_limit_gb, 8) * 1024 * 4, machine_mb / 2)


HOST_MEMORY_HINT = (" (hint: the task's input sets and their float64 outputs did not fit this machine's memory; "
                    "fewer input sets (--trials), smaller sizes (--size) or a machine with more memory help)")


def _oversized_outputs(files: list[str], reference: Reference) -> str | None:
    """Why the candidate's outputs files are not read (far bigger than the outputs they should
    hold, a link, a FIFO), or None: the reference process reads them, and must not be made to run
    out of memory, read a host file or wait by a file the candidate chose (leftovers.py)."""
    expected = sum(n * d.itemsize for n, d in zip(reference.numels, reference.dtypes))
    why = next(((i, w) for i, path in enumerate(files) if (w := leftovers.refused_output(path, expected))), None)
    return f"trial {why[0] + 1}: {why[1]}" if why else None


def candidate_memory_mb(cfg: EvalConfig, workdir: Path) -> float:
    """The candidate process's host-memory limit: `mem_limit_gb`, plus twice its input file (it
    reads every input set into host memory before moving it to the GPU; a KernelBench task's
    sets can take more than the limit itself)."""
    try:
        inputs = (workdir / "inputs.pt").stat().st_size
    except OSError:
        inputs = 0
    return cfg.limits.mem_limit_gb * 1024 + 2 * inputs / 2**20


OUT_OF_GPU_MEMORY = (" -- out of GPU memory: the task's input sets, their float64 outputs and two timing processes "
                     "did not fit; try a smaller --sets-memory-gb, --paired-rounds 0 (the reference timed once, "
                     "before the candidate holds its inputs) or a GPU with more memory")


class _ServerDied(HarnessError):
    """The reference process died during a draw (not a task error, not a time-out)."""


def _free_gb(path: str) -> float:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0.0
    return st.f_bavail * st.f_frsize / 2**30 if os.access(path, os.W_OK) else 0.0


def _folder_limit(cfg: EvalConfig, folders: list[Path], outputs_bytes: int = 0) -> leftovers.FolderLimit:
    """What watches a candidate's folders while it runs (from now: what they hold is the harness's)."""
    return leftovers.FolderLimit(folders, int(cfg.limits.work_limit_gb * 2**30), outputs_bytes,
                                 "EvalConfig.work_limit_gb or $WARPFORGE_WORK_LIMIT_GB raises the limit")


def _jail(cfg: EvalConfig, workdir: Path, cache: Path | None, hidden: tuple[str, ...] = ()) -> jail.Jail | None:
    """The sandbox of a candidate process (None with --no-sandbox), or of an untrusted task's
    reference process: its work folder and private compile cache (if any) writable, the shared
    caches hidden, /tmp and /dev/shm capped at its memory limit."""
    if not cfg.safety.sandbox:
        return None
    return jail.Jail(str(workdir), cache=str(cache or ""), hidden=(os.path.realpath(cfg.transport.cache_dir), *hidden),
                     tmp_bytes=int(min(cfg.limits.mem_limit_gb, 4) * 2**30))


# glibc's malloc on the CPU, the same fixed settings in the reference and the candidate process.
# By default glibc serves a buffer above its mmap threshold with a fresh mmap (page faults and
# the kernel's zeroing inside the timed call) and raises that threshold (up to 32 MiB) and the
# trim threshold as the process frees such buffers, so whether a 128 KiB-32 MiB buffer costs
# page faults depends on the process's allocation history: an A/A mse_loss (2 MiB buffers)
# read 1.9x, 513 minor faults per call in the reference process and 0 in the candidate's.
# Fixed: buffers up to 32 MiB (glibc's largest threshold) come from the heap, which is never
# trimmed, so neither process faults on them after warm-up; larger ones are fresh mmaps in both.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1099511627776"


def _child_env(cfg: EvalConfig) -> dict[str, str]:
    """The children's allow-listed environment (no keys or tokens); a candidate's own
    compile-cache folders come in its spec."""
    env = jail.environment()
    env.update(languages.env(build_target(str(cfg.device))))  # a language's own (Triton's interpreter on the CPU)
    if cfg.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        threads = str(cfg.cpu_threads or 1)  # the same count for the reference and the candidate
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
        env["GLIBC_TUNABLES"] = MALLOC_TUNABLES  # the same allocator behaviour in both (see MALLOC_TUNABLES)
    return env
