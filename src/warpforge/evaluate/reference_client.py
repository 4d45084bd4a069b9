"""The parent's handle on the reference process (reference.py): it starts the process, and has
one method per request of protocol.py (draw, compare, time_round, check_fresh), each sending the
request and waiting for its answer. It keeps what lasts between candidates: what the task
loaded, the baselines timed in the first draw, the number of draws. A Judge holds one and
restarts it when it dies; a candidate's session (session.py) talks to it through these methods.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from warpforge.candidate import Timing
from warpforge.config import EvalConfig
from warpforge.errors import HarnessError, TaskError
from warpforge.evaluate import compile as compile_mod
from warpforge.evaluate import leftovers, protocol
from warpforge.evaluate.children import child_env, child_jail, reference_memory_mb
from warpforge.evaluate.paired import pair_memory_note
from warpforge.evaluate.presets import CPU_BYTES
from warpforge.evaluate.protocol import (Baseline, BaselineFailed, CheckFresh, Compare, Compared, Draw, FreshChecked,
                                         Loaded, ReferenceReady, ReferenceSpec, TaskFailed, Timed, TimeRound)
from warpforge.evaluate.sandbox import Child, ChildOutcome
from warpforge.evaluate.verdict import Reference, comparison_from, fresh_calls_to_check, fresh_summaries
from warpforge.evaluate.verify import (Comparison, RefSummary, degenerate_note, insensitive_note, tolerance_for,
                                        unfinite_note)
from warpforge.target import Target
from warpforge.task import Task


HOST_MEMORY_HINT = (" (hint: the task's input sets and their float64 outputs did not fit this machine's memory; "
                    "fewer input sets (--trials), smaller sizes (--size) or a machine with more memory help)")


OUT_OF_GPU_MEMORY = (" -- out of GPU memory: the task's input sets, their float64 outputs and two timing processes "
                     "did not fit; try a smaller --sets-memory-gb, --paired-rounds 0 (the reference timed once, "
                     "before the candidate holds its inputs) or a GPU with more memory")


class ServerDied(HarnessError):
    """The reference process died during a draw (not a task error, not a time-out)."""


def oversized_outputs(files: list[str], reference: Reference) -> str | None:
    """Why the candidate's outputs files are not read (far bigger than the outputs they should
    hold, a link, a FIFO), or None: the reference process reads them, and must not be made to run
    out of memory, read a host file or wait by a file the candidate chose (leftovers.py)."""
    expected = sum(n * d.itemsize for n, d in zip(reference.numels, reference.dtypes))
    why = next(((i, w) for i, path in enumerate(files) if (w := leftovers.refused_output(path, expected))), None)
    return f"trial {why[0] + 1}: {why[1]}" if why else None


class ReferenceProcess:
    """The reference process of one task, seen from the parent (see the module's docstring)."""

    def __init__(self, task: Task, cfg: EvalConfig, tmp: Path, init_seed: int, allow_tf32: bool, target: Target,
                 sandboxed: bool) -> None:
        self.task, self.cfg, self.tmp, self.init_seed = task, cfg, tmp, init_seed
        self.allow_tf32, self.target, self.sandboxed = allow_tf32, target, sandboxed
        self.child: Child | None = None
        self.loaded = Loaded(None, None, {})
        self.started = 0.0
        self.baselines: dict[str, Timing] | None = None
        self.baseline_notes: list[str] = []
        self.draws = 0

    def ready(self) -> None:
        """Started, and alive: one that died while idle (the OOM killer, a candidate) is replaced."""
        if self.child is None or self.child.proc.poll() is not None:
            self.start()

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()
            self.child = None

    def start(self) -> None:
        """Start the reference process (a fresh one: a dead or idle-killed one is replaced) and
        wait until it has loaded the task."""
        self.kill()
        cfg = self.cfg
        spec = ReferenceSpec(
            task_path=str(self.task.path), sizes=self.task.sizes(cfg.size or ""), device=str(cfg.device),
            init_seed=self.init_seed, allow_tf32=self.allow_tf32, compile_baseline=cfg.timing.compile_baseline,
            timing=cfg.timing.to_dict(), task_hash=self.task.source_hash,
            baseline_cache_dir=str(Path(cfg.transport.cache_dir) / "baselines" / str(self.target)) if cfg.timing.reuse_baselines else "",
            # a task with no CPU preset (KernelBench's files carry their GPU sizes only) is scaled down
            fit_bytes=CPU_BYTES if cfg.size == "cpu" and "cpu" not in (self.task.metadata.get("sizes") or {}) else 0,
            strict_fp32=cfg.safety.strict_fp32)
        spec_path = self.tmp / "reference_spec.json"
        reference_jail = None
        if self.sandboxed:  # a task from elsewhere: a copy of its file, no host caches, no home
            copy = self.tmp / "task" / self.task.path.name
            copy.parent.mkdir(exist_ok=True)
            copy.write_text(self.task.source)
            spec = dataclasses.replace(spec, task_path=str(copy), baseline_cache_dir="")
            env = child_env(cfg)
            reference_jail = child_jail(cfg, self.tmp, None)
        else:  # the operator's own task file, outside the sandbox (docs/evaluation.md): its home's caches
            env = {**child_env(cfg), "HOME": os.path.expanduser("~"), "USER": os.environ.get("USER", "warpforge")}
        spec_path.write_text(spec.to_json())
        self.started = time.monotonic()
        self.child = Child("warpforge.evaluate.reference", [str(spec_path)], env=env,
                             output_limit_bytes=cfg.limits.output_limit_kb * 1024, jail=reference_jail)
        loaded = protocol.first(self._round("loaded"), Loaded)
        if loaded is None:
            raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'loaded' message")
        self.loaded = loaded

    def _round(self, until: str, on_message: Any = None) -> list[dict[str, Any]]:
        """Wait for the reference process's `until` message; its messages of this round."""
        server = self.child
        assert server is not None
        first = len(server.outcome.messages)
        limit_mb = reference_memory_mb(self.cfg)
        outcome = server.wait(timeout_s=self.cfg.limits.reference_timeout_s, mem_limit_mb=limit_mb, on_message=on_message,
                              until=until)
        messages = outcome.messages[first:]
        if messages and messages[-1]["type"] == until:
            return messages
        self.child = None  # it is dead (wait kills it in every other case); the next call starts another
        failed = protocol.first(messages, TaskFailed)
        if failed is not None:
            raise TaskError(failed.message)
        why = f"timed out after {self.cfg.limits.reference_timeout_s:g} s" if outcome.timed_out else \
            f"used more than the {limit_mb / 1024:.0f} GB of host memory it may" if outcome.out_of_memory else \
            "was killed by SIGKILL, not by warpforge (most likely the system's out-of-memory killer: the machine's " \
            "host memory ran out)" if outcome.returncode == -9 else f"exited with {outcome.returncode}"
        detail = outcome.output[-3000:] if os.environ.get("WARPFORGE_DEBUG") else \
            compile_mod.summarize_errors(outcome.output, 4)
        error = HarnessError if outcome.timed_out or until == "loaded" else ServerDied
        raise error(f"the reference process for {self.task.name} {why}: {detail or 'no output'}"
                    + (OUT_OF_GPU_MEMORY if "OutOfMemoryError" in outcome.output else ""))

    def draw(self, workdir: Path, to_pause: Callable[[], list[Child]]) -> Reference:
        """Fresh inputs (into the candidate's folder) and their reference outputs (kept by the
        reference process, which compares the candidate's outputs with them). While the baselines
        are timed, the processes `to_pause()` names are paused (SIGSTOP)."""
        cfg = self.cfg
        started = time.monotonic()
        time_baselines = bool(cfg.bench) and self.baselines is None
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
            paused.extend(to_pause())
            for child in paused:
                child.pause()
            return "time"

        assert self.child is not None
        self.child.send(protocol.request_json(request))
        try:
            messages = self._round("drawn", on_message)
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
        seconds = time.monotonic() - (started if self.draws else self.started)
        self.draws += 1
        numels, sets = [int(n) for n in data.numels], int(data.sets)
        unpaired = pair_memory_note(sets, int(data.input_bytes),
                                    sum(n * d.itemsize for n, d in zip(numels, dtypes)),
                                    self.loaded.hardware.get("gpu_memory_gb")) \
            if cfg.device == "cuda" and cfg.bench and cfg.timing.paired_rounds else None
        return Reference(numels, sets, dtypes, tolerances, self.loaded, dict(self.baselines or {}),
                         [*self.baseline_notes, *data.notes, *degenerate, *([unpaired] if unpaired else [])],
                         seconds, int(data.verify_sets), paired=unpaired is None,
                         parts={str(k): float(v) for k, v in data.seconds.items()})

    def compare(self, files: list[str], reference: Reference,
                 positions: list[list[int]]) -> tuple[Comparison, dict[tuple[int, ...], RefSummary]]:
        """The reference process compares the candidate's outputs with the references it holds."""
        request = Compare(files, positions, [t.to_dict() for t in reference.tolerances])
        oversized = oversized_outputs(files, reference)
        if oversized:
            return Comparison(False, oversized), {}
        try:
            assert self.child is not None
            self.child.send(protocol.request_json(request))
            compared = protocol.first(self._round("compared"), Compared)
            if compared is None:
                raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'compared' message")
            return comparison_from(compared)
        except ServerDied as exc:
            if "host memory" in str(exc):  # files of the outputs' size: the reference's own cost, not a cheat
                # (the candidate's own memory is capped: candidate_memory_mb and the sandbox's /tmp)
                raise HarnessError(f"{exc}{HOST_MEMORY_HINT}") from None
            # the candidate's files are the only new thing it was given
            return Comparison(False, f"the reference process failed while reading the candidate's outputs: {exc}"), {}

    # -- the reference process ---------------------------------------------------------------

    def time_round(self, positions: list[list[int]], first: bool = False) -> dict[str, Any]:
        """One paired round of the task's program, in the reference process, on the current draw
        (fingerprinting its outputs at the candidate's positions between calls, as the candidate does),
        with the budget the candidate's run in the same round has: its first run's, else a round's."""
        assert self.child is not None
        self.child.send(protocol.request_json(TimeRound(secrets.randbits(31), self.cfg.timing.to_dict(), first,
                                                          positions)))
        timed = protocol.first(self._round("timed"), Timed)
        if timed is None:
            raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'timed' message")
        return dict(timed.timing)

    def check_fresh(self, outcome: ChildOutcome, reference: Reference,
                     positions: list[list[int]]) -> dict[tuple[int, ...], RefSummary]:
        """References for a few timed calls on fresh content of each round, picked now that the
        candidate's process has ended (verdict.fresh_calls_to_check): their inputs made again and
        run in the reference process."""
        calls = fresh_calls_to_check(outcome, reference.sets, random.Random(secrets.randbits(63)))
        if not calls:
            return {}
        assert self.child is not None
        self.child.send(protocol.request_json(CheckFresh(calls, positions)))
        checked = protocol.first(self._round("fresh_checked"), FreshChecked)
        if checked is None:
            raise HarnessError(f"the reference process for {self.task.name} sent a malformed 'fresh_checked' message")
        return fresh_summaries(calls, checked)

    def _sets_budget(self) -> int | None:
        """Bytes the reference's input sets and float64 outputs may take (config.limits.sets_memory_gb)."""
        if self.cfg.limits.sets_memory_gb is not None:
            return int(self.cfg.limits.sets_memory_gb * 2**30)
        total = self.loaded.hardware.get("gpu_memory_gb") if self.cfg.device == "cuda" else None
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
        self.baselines, self.baseline_notes = baselines, notes
