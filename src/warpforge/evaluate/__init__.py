"""The evaluator: static -> reference -> compile -> verify -> bench -> profile.

`evaluate(task, candidate, config)` evaluates one candidate; a `Judge` evaluates many for one
task and pays the start-up once (`evaluate_many`: a group against one shared draw). The
candidate is parsed here (static.py), the task runs in a reference child (reference.py, driven
through reference_client.py), each candidate in a fresh sandboxed child of its own (worker.py,
driven by a session.py `CandidateSession`), and the verdict is decided in this process
(verdict.py) from the evidence the children send. The candidate never sees the reference
outputs, and nothing it prints or does to its own process can make it `correct`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from warpforge import languages
from warpforge.candidate import Candidate, EvalResult, Precompiled, PrecompileStatus
from warpforge.config import EvalConfig
from warpforge.errors import ConfigError, TaskError
from warpforge.evaluate import compile as compile_mod
from warpforge.evaluate import jail, leftovers
from warpforge.evaluate.children import child_env, child_jail, folder_limit, free_gb
from warpforge.evaluate.protocol import CandidateSpec
from warpforge.evaluate.reference_client import ReferenceProcess, ServerDied
from warpforge.evaluate.sandbox import Child
from warpforge.evaluate.session import CandidateSession
from warpforge.evaluate.static import check_source
from warpforge.evaluate.verdict import (CONTENT_CACHE_RATIO, SPEED_OF_LIGHT_SLACK, Reference, confirm_content_cache,
                                        content_cache_rejected, content_cache_suspected, with_verdict)
from warpforge.languages import needs_build
from warpforge.target import CPU, Target, build_target
from warpforge.task import Task

__all__ = ["CONTENT_CACHE_RATIO", "SPEED_OF_LIGHT_SLACK", "Judge", "content_cache_suspected", "evaluate", "needs_build",
           "precompile"]

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
        env = {**child_env(cfg.replace(device="cpu")), "TORCH_CUDA_ARCH_LIST": target.arch_list}
        for name in languages.env(CPU):  # it builds for the GPU: no language runs the CPU's way
            env.pop(name, None)
        child = Child("warpforge.evaluate.worker", [], env=env, cwd=str(tmp), output_limit_bytes=cfg.limits.output_limit_kb * 1024,
                      jail=child_jail(cfg, tmp, private))
        watch = folder_limit(cfg, [tmp, private])
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
        shm = "/dev/shm" if free_gb("/dev/shm") > 16 else None
        # a pool worker's Judges live under the folder its pool removes when the worker dies
        self._tmp = Path(tempfile.mkdtemp(prefix="warpforge-", dir=os.environ.get("WARPFORGE_TMP_ROOT") or shm))
        self._init_seed = secrets.randbits(31)
        self.reference = ReferenceProcess(task, self.cfg, self._tmp, self._init_seed, self.allow_tf32, self.target,
                                          self.sandbox_reference)
        self._workers: deque[tuple[Child, Path]] = deque()  # started, oldest first
        self._count = 0
        self._staged: dict[str, tuple[int, int]] | None = None  # what the current candidate's private cache got
        self._unstaged = False  # the next candidate's private cache starts empty (a confirming run)

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the reference process and the waiting candidate processes; remove the temp files."""
        self._stop_workers()
        self.reference.kill()
        leftovers.remove_tree(self._tmp)

    def evaluate(self, candidate: Candidate) -> EvalResult:
        return self._finish(candidate, self._evaluate(candidate))

    def evaluate_many(self, candidates: Sequence[Candidate]) -> list[EvalResult]:
        """A batch verdict: the candidates of one group, one after another, against ONE fresh draw
        of input sets (and their float64 outputs, held by the reference process) instead of one
        draw each. Each still runs in a fresh sandboxed process of its own, gets its own copy of
        the inputs file, its own secret fingerprint positions and timing seeds, and the same
        static checks, verification, timing and verdict as `evaluate` gives it alone.

        What keeps one member from answering for another on the shared sets: its work folder and
        private /tmp are gone with its process, and its build products reach the shared compile
        cache only once the whole group is judged (`_Group.close`), so no later member of the
        group stages them. A member that trips the content-cache probe is confirmed on a fresh
        draw of its own, as `evaluate` does; the next member then draws the group's sets anew (the
        reference process holds one draw at a time), as it does after the reference process died.

        Not shared: each member still pays its own paired rounds with the reference (one schedule
        interleaving the reference with every member is issue 44's later part). Unsandboxed (no
        private /tmp) or with CUDA IPC on (the handles map one writable allocation into every
        process that opens them) nothing keeps members apart on shared sets, so each draws its
        own there, exactly as `evaluate` does."""
        if not self.cfg.safety.sandbox or (self.cfg.device == "cuda" and self.cfg.transport.cuda_ipc):
            return [self.evaluate(candidate) for candidate in candidates]
        self._count += 1
        group = _Group(self._tmp / f"group-{self._count}")
        try:
            return [self._finish(candidate, self._evaluate(candidate, group)) for candidate in candidates]
        finally:
            group.close(self.cfg.transport.cache_dir)

    def _finish(self, candidate: Candidate, result: EvalResult) -> EvalResult:
        """The content-cache probe's confirmation, and the unsandboxed warning."""
        if content_cache_rejected(result):  # confirmed on a fresh draw, in a fresh process, or not at all
            self._unstaged = True  # and from an empty compile cache: nothing the first run wrote reaches it
            try:
                result = confirm_content_cache(result, self._evaluate(candidate))
            finally:
                self._unstaged = False
        if not self.cfg.safety.sandbox:
            result = dataclasses.replace(result, warnings=(*result.warnings, UNSANDBOXED))
        return result

    def _evaluate(self, candidate: Candidate, group: _Group | None = None) -> EvalResult:
        """One candidate on a fresh draw of its own, or on `group`'s shared draw."""
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
        self._top_up(self.spares + 1 if self.reference.draws == 0 else 1)
        try:
            self.reference.ready()
        except TaskError:  # the task itself is broken: no candidate will run
            self._stop_workers()
            raise
        worker, workdir = self._workers.popleft()

        def to_pause() -> list[Child]:  # while the baselines are timed: this candidate's process and the spares
            return [worker, *self._spares()]

        try:
            if group is None:
                reference = self._draw(workdir, to_pause)
            else:
                reference = group.hand_over(workdir, self.reference, lambda folder: self._draw(folder, to_pause))
            session = CandidateSession(cfg, self.reference, worker, workdir, reference, self._spares)
            env = self._cache_env(candidate, workdir.parent / "cache")
            staged = self._staged  # what its private cache got (publish adds only what the build made)
            result, outcome = session.run(candidate, report.kernel_names, base, self._init_seed, env)
            built = any(m["type"] == "compiled" for m in outcome.messages) and not outcome.over_limit
            key = compile_mod.cache_key(candidate.source, self.target)
            if cfg.safety.sandbox and built and group is not None:  # once the group is judged
                group.defer(key, workdir.parent / "cache", staged)
            elif cfg.safety.sandbox and built:  # what a successful build made, nothing else (compile.build_products)
                compile_mod.publish(cfg.transport.cache_dir, key, workdir.parent / "cache", staged)
            return result
        except TaskError:  # the task itself is broken: no candidate will run, stop the spares too
            self._stop_workers()
            raise
        finally:
            worker.kill()
            leftovers.remove_tree(workdir.parent)
            if self.reference.child is not None:
                self._top_up()

    def _draw(self, folder: Path, to_pause: Callable[[], list[Child]]) -> Reference:
        """A fresh draw, its inputs file written into `folder`."""
        try:
            return self.reference.draw(folder, to_pause)
        except ServerDied:  # between candidates, or killed by the last one: one more try with a new one
            self.reference.start()
            return self.reference.draw(folder, to_pause)

    # -- the candidate process ---------------------------------------------------------------

    def _start_worker(self) -> tuple[Child, Path]:
        """A candidate process that imports torch and starts CUDA, then waits for a spec; it reads
        nothing of any candidate before that."""
        self._count += 1
        workdir = self._tmp / f"candidate-{self._count}" / "work"
        workdir.mkdir(parents=True)
        (workdir.parent / "cache").mkdir()
        worker = Child("warpforge.evaluate.worker", [], env=child_env(self.cfg), cwd=str(workdir),
                       output_limit_bytes=self.cfg.limits.output_limit_kb * 1024,
                       jail=child_jail(self.cfg, workdir, workdir.parent / "cache", hidden=(str(self._tmp),)))
        self._workers.append((worker, workdir))
        return worker, workdir

    def _spares(self) -> list[Child]:
        """The candidate processes waiting for a candidate."""
        return [child for child, _ in self._workers]

    def _stop_workers(self) -> None:
        while self._workers:
            self._workers.popleft()[0].kill()

    def _top_up(self, count: int | None = None) -> None:
        """Start candidate processes until `count` (default: the spares) are waiting."""
        while len(self._workers) < (self.spares if count is None else count):
            self._start_worker()

    def _cache_env(self, candidate: Candidate, private: Path) -> dict[str, str]:
        """Where the candidate's toolchains cache their builds: a private copy of its own entry when
        sandboxed, the shared cache when not."""
        if not self.cfg.safety.sandbox:
            return compile_mod.cache_env(self.cfg.transport.cache_dir, candidate.source, self.target)
        self._staged = {} if self._unstaged else \
            compile_mod.stage(self.cfg.transport.cache_dir, compile_mod.cache_key(candidate.source, self.target), private)
        return compile_mod.private_env(jail.CACHE_MOUNT, self.target)


class _Group:
    """The shared draw of one `Judge.evaluate_many` call and what its members leave for later: the
    inputs file, written by the reference process into the group's folder (under the Judge's
    temporary folder, which no sandbox shows), and the private compile caches of members whose
    build succeeded, published when the group is closed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()
        self.reference: Reference | None = None
        self.drawn_at: tuple[Child | None, int] = (None, -1)
        """The reference process and its draw count right after the group's draw: it holds the
        group's sets only while both are unchanged (a restart, or a confirming run's draw, drops them)."""
        self.caches: list[tuple[str, Path, dict[str, tuple[int, int]] | None]] = []

    def hand_over(self, workdir: Path, server: ReferenceProcess, draw: Callable[[Path], Reference]) -> Reference:
        """The group's draw for the member in `workdir` (drawn now if the reference process does not
        hold it): a copy of its inputs file in the member's own folder. A copy, not a hard link: a
        link is one file, which the member could write in place under the next member's inputs."""
        first = self.reference is None or self.drawn_at != (server.child, server.draws)
        if first:
            self.reference = draw(self.folder)
            self.drawn_at = (server.child, server.draws)
        assert self.reference is not None
        shutil.copyfile(self.folder / "inputs.pt", workdir / "inputs.pt")
        # the draw's seconds are counted once, in the stage times of the member that drew it
        return self.reference if first else dataclasses.replace(self.reference, seconds=0.0, parts={})

    def defer(self, key: str, cache: Path, staged: dict[str, tuple[int, int]] | None) -> None:
        """Keep a member's private compile cache (its process has ended) until the group is judged."""
        kept = self.folder / f"cache-{len(self.caches)}"
        os.rename(cache, kept)
        self.caches.append((key, kept, staged))

    def close(self, cache_dir: str) -> None:
        """Publish the members' build products (compile.publish), then remove the group's folder."""
        try:
            for key, cache, staged in self.caches:
                compile_mod.publish(cache_dir, key, cache, staged)
        finally:
            leftovers.remove_tree(self.folder)
