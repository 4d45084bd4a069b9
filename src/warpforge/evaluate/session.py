"""One candidate's run, from its spec to its verdict: the parent's side of a candidate process.

A `CandidateSession` gets a started candidate process (a spare of the Judge's), a fresh draw of
the reference process (reference_client.py) and the candidate. `run()` writes the spec, answers
the process's messages as they come (the verified outputs compared by the reference process,
then BENCH or STOP; each timed round paired with one of the reference's, then AGAIN or END),
checks a few timed calls on fresh content once it has ended, and decides the verdict from the
evidence (verdict.decide). What it knows lives in its `ParentView`; nothing the candidate
prints reaches it. The Judge keeps what outlasts a candidate: the spares, the reference
process, the compile caches.
"""

from __future__ import annotations

import dataclasses
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from warpforge.candidate import Candidate, EvalResult
from warpforge.config import EvalConfig
from warpforge.evaluate import leftovers
from warpforge.evaluate.children import candidate_memory_mb, folder_limit
from warpforge.evaluate.inputs import fingerprint_positions
from warpforge.evaluate.paired import Rounds
from warpforge.evaluate.protocol import CandidateSpec, Command, ParentView
from warpforge.evaluate.reference_client import ReferenceProcess
from warpforge.evaluate.sandbox import Child, ChildOutcome
from warpforge.evaluate.verdict import Reference, decide

FINGERPRINT_POSITIONS = 32
"""Secret positions of each output that every timed call's output is fingerprinted at."""


class CandidateSession:
    """One candidate in one candidate process, against one draw (see the module's docstring)."""

    def __init__(self, cfg: EvalConfig, server: ReferenceProcess, worker: Child, workdir: Path, reference: Reference,
                 spares: Callable[[], list[Child]]) -> None:
        self.cfg, self.server, self.worker, self.workdir, self.reference = cfg, server, worker, workdir, reference
        self.spares = spares
        """The Judge's waiting candidate processes, paused while anything is timed."""
        self.positions = [fingerprint_positions(n, FINGERPRINT_POSITIONS, secrets.randbits(31)).tolist()
                          for n in reference.numels]
        self.view = ParentView()
        self.paused: list[Child] = []

    def run(self, candidate: Candidate, kernel_names: tuple[str, ...], base: EvalResult, init_seed: int,
            cache_env: dict[str, str]) -> tuple[EvalResult, ChildOutcome]:
        """The verdict, and the candidate process's outcome (the Judge publishes what it built)."""
        cfg, reference, workdir = self.cfg, self.reference, self.workdir
        base = dataclasses.replace(base, hardware=reference.loaded.hardware,
                                   tolerance=reference.tolerances[0].to_dict() if reference.tolerances else {})
        out_bytes = sum(n * d.itemsize for n, d in zip(reference.numels, reference.dtypes))
        candidate_path = workdir / "candidate.py"
        candidate_path.write_text(candidate.source)
        spec = CandidateSpec(
            candidate_path=str(candidate_path), inputs_path=str(workdir / "inputs.pt"), workdir=str(workdir),
            device=str(cfg.device), init_seed=init_seed, positions=self.positions, bench_seed=secrets.randbits(31),
            verify_sets=reference.verify_sets,
            poison_bytes=int(min(4 * out_bytes + (64 << 20), 2 << 30 if cfg.device == "cuda" else 256 << 20)),
            timing=cfg.timing.to_dict(), profile=cfg.profile and cfg.bench,
            kernel_names=list(kernel_names), env=cache_env,
            share_outputs=cfg.device == "cuda" and cfg.transport.cuda_ipc, strict_fp32=cfg.safety.strict_fp32)
        spec_path = workdir / "spec.json"
        spec_path.write_text(spec.to_json())
        timing = cfg.timing
        self.view.rounds = (Rounds(timing.paired_rounds, timing.timing_bound, self._reference_round,
                                   random.Random(secrets.randbits(31)), timing.process_spread or 0.0)
                            if cfg.bench and timing.paired_rounds and reference.paired else None)
        mem_limit_mb = candidate_memory_mb(cfg, workdir)  # (before it runs: it may replace its inputs file)
        watch = folder_limit(cfg, [workdir, workdir.parent / "cache"],
                             reference.verify_sets * leftovers.output_file_limit(out_bytes))
        self.worker.send(str(spec_path))
        self.view.sent = time.monotonic()
        try:
            outcome = self.worker.wait(timeout_s=cfg.limits.timeout_s, mem_limit_mb=mem_limit_mb,
                                       on_message=self._on_message, watch=watch)
        finally:
            for child in self.paused:
                child.resume()
        if self.view.comparison is not None and self.view.comparison.ok and cfg.bench:
            started = time.monotonic()
            self.view.summaries.update(self.server.check_fresh(outcome, reference, self.positions))
            self.view.add_seconds("fresh_checks", started)
        return decide(outcome, self.view, reference, cfg, base), outcome

    def _on_message(self, message: dict[str, Any]) -> Command | None:
        """The parent's answer to one message of the candidate process, if it takes one."""
        view, rounds = self.view, self.view.rounds
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
        files = [str(self.workdir / f"out_{i}.pt") for i in range(self.reference.verify_sets)]
        started = time.monotonic()
        view.comparison, view.summaries = self.server.compare(files, self.reference, self.positions)
        view.add_seconds("compare", started)
        if not (view.comparison.ok and self.cfg.bench):
            return Command.STOP
        self.paused.extend(self.spares())  # no spare's start-up during the timed calls
        for child in self.paused:
            child.pause()
        if rounds is not None:
            rounds.start_round()
        view.requested_rounds = 1
        return Command.BENCH

    def _reference_round(self, first: bool) -> dict[str, Any]:
        """The reference's half of a paired round, with the budget of the candidate's run in it."""
        started = time.monotonic()
        try:
            return self.server.time_round(self.positions, first)
        finally:
            self.view.add_seconds("reference_rounds", started)
