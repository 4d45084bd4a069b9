"""The agent tools: what an external coding agent may ask of warpforge, as plain Python.

`AgentTools` serves one agent session (one MCP server, or one CLI call). It lists and describes
tasks, evaluates candidates with one warm `Judge` per task (a few; the least recently used is
closed first), records every evaluation in the archive as strategy "agent" within one run per
session, and answers history, best-kernel and stepping-stone questions from the archive. Every
tool returns a JSON-ready dict; a bad request is {"error": {"code", "message"}}, never an
exception. Nothing here runs task or candidate code: candidates run in the evaluator's sandboxed
children, shapes come from a probe child (probe.py). A session serving untrusted requests (MCP) is
given `task_dirs`: its task arguments may then name suite tasks, archived tasks and task files
under those folders only. MCP types live in server.py, flags in warpforge.cli.agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import shutil
import sys
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec

from warpforge.agent.probe import TOLERANCE_POLICY, TaskProbe, candidate_rules, probe, roofline
from warpforge.archive import Archive, Attempt, hardware_key
from warpforge.candidate import Candidate
from warpforge.config import Device, EvalConfig, cuda_available
from warpforge.errors import ConfigError, HarnessError, TaskError, UsageError
from warpforge.evaluator import Evaluator
from warpforge.executor.evaluators import make_evaluator
from warpforge.propose import Proposal
from warpforge.search.features import features_of
from warpforge.search.retrieval import similarity, stepping_stones
from warpforge.task import Task, load_task, suite_paths, suite_task

MAX_SOURCE_BYTES = 1 << 20
"""A candidate larger than 1 MiB is refused before anything is recorded: real kernels are a few KiB."""
MAX_ANALYSIS_BYTES = 64 << 10
MAX_LIMIT = 100
"""history's `limit` and search_archive's `k` at most: more would flood an agent's context."""
MAX_JUDGES = 3
"""Tasks kept warm at once; each holds a reference process and spare candidate processes (GPU memory)."""
DEVICES = ("cpu", "cuda")
STRATEGY = "agent"

P = ParamSpec("P")


class Refused(UsageError):
    """A request a tool refuses; `code` is the machine-readable reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


# codes that mean warpforge failed, not the request: CLI exit code 1 (every other code is a usage error, 2)
FAILURE_CODES = frozenset({"harness_error", "internal_error"})


def tool(method: Callable[P, dict[str, Any]]) -> Callable[P, dict[str, Any]]:
    """The tool boundary: whatever goes wrong becomes an error dict; results become strict JSON."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        try:
            return json_safe(method(*args, **kwargs))
        except Refused as exc:
            return error(exc.code, str(exc))
        except TaskError as exc:
            return error("bad_task", str(exc))
        except ConfigError as exc:
            return error("bad_argument", str(exc))
        except UsageError as exc:
            return error("bad_request", str(exc))
        except HarnessError as exc:
            return error("harness_error", str(exc))
        except Exception as exc:  # noqa: BLE001  (a tool boundary: the server must outlive any bug of ours)
            if os.environ.get("WARPFORGE_DEBUG"):
                traceback.print_exc(file=sys.stderr)
            return error("internal_error", f"warpforge failed: {type(exc).__name__}: {exc}".splitlines()[0])

    return call


def json_safe(value: Any) -> Any:
    """Strict JSON: a non-finite float (an error of inf) becomes null, as in the dataset exports."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


class AgentTools:
    """One agent session's tools over the archive at `archive_path` (created at the first evaluation).

    `device` is the default for evaluations (None: CUDA when a GPU is visible, else the CPU);
    `agent_name` is recorded as the model of every attempt; `eval_config` sets everything else
    about evaluations. `task_dirs`: the folders whose task files requests may name, for a session
    whose requests are untrusted (MCP); None lets them name any file (the operator's own CLI verbs
    and code). Thread-safe: evaluations and probes run one at a time (they must not
    disturb each other's timings); archive queries run alongside. Close it (or use `with`) to stop
    the warm evaluators and mark the session's run done.
    """

    def __init__(self, archive_path: str | Path, *, device: str | None = None, agent_name: str = "agent",
                 interface: str = "mcp", eval_config: EvalConfig | None = None, max_judges: int = MAX_JUDGES,
                 executor: str | None = None, workers: int | None = None, ray_address: str | None = None,
                 task_dirs: Sequence[str | Path] | None = None) -> None:
        if device not in (None, *DEVICES):
            raise ConfigError(f"device must be cpu or cuda, not {device!r}")
        self.archive_path = Path(archive_path)
        self.device = device
        self.agent_name = agent_name or "agent"
        self.interface = interface
        self.eval_config = eval_config or EvalConfig()
        self.max_judges = max_judges
        if executor not in (None, "local", "ray"):
            raise ConfigError(f"executor must be local or ray, not {executor!r}")
        self.executor, self.workers, self.ray_address = executor, workers, ray_address
        self.task_dirs = None if task_dirs is None else tuple(Path(d).resolve() for d in task_dirs)
        self._evaluators: dict[str, Evaluator] = {}  # device -> its evaluator (evaluator.py)
        self._record_lock = threading.Lock()
        self._archive_handle: Archive | None = None
        self._archive_lock = threading.Lock()
        self._busy = threading.Lock()
        self._run_id: str | None = None
        self._steps: dict[str, int] = {}
        self._probes: dict[tuple[str, str, str], TaskProbe] = {}
        self._verdicts: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()
        self._closing = False

    def __enter__(self) -> AgentTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, status: str = "done") -> None:
        """Stop every warm evaluator, mark this session's run `status` (done, or stopped after a signal)
        and close the archive. Idempotent; a second call while one is under way returns at once."""
        if self._closing:
            return
        self._closing = True
        while self._evaluators:
            self._evaluators.popitem()[1].close()
        with self._archive_lock:
            if self._archive_handle is not None:
                if self._run_id is not None:
                    self._archive_handle.finish_run(self._run_id, status)
                self._archive_handle.close()
                self._archive_handle = None

    @property
    def run_id(self) -> str | None:
        """The archive run this session records into (None until its first evaluation)."""
        return self._run_id

    # -- the tools --------------------------------------------------------------------------------

    @tool
    def list_tasks(self) -> dict[str, Any]:
        """The suite's tasks, then tasks only the archive knows, each with its attempts and best speedup."""
        archive = self._archive()
        summaries = {s.task: s for s in archive.task_summaries()} if archive else {}
        rows = []
        for path in suite_paths():
            task = load_task(path)
            s = summaries.pop(task.name, None)
            rows.append({"name": task.name, "description": task.metadata.get("description", ""), "level": task.level,
                         "attempts": s.attempts if s else 0, "correct": s.correct if s else 0,
                         "best_speedup": s.best_speedup if s else None})
        for name, s in sorted(summaries.items()):  # tasks only the archive knows (given as files earlier)
            rows.append({"name": name, "description": "", "level": None, "attempts": s.attempts, "correct": s.correct,
                         "best_speedup": s.best_speedup})
        return {"tasks": rows}

    @tool
    def get_task(self, task: str, device: str | None = None) -> dict[str, Any]:
        """The reference, shapes, tolerance, hardware, roofline, recorded baselines and candidate rules."""
        config = self._config(device)
        loaded = self._task(task)
        assert config.device is not None and config.size is not None
        allow_tf32 = config.safety.allow_tf32 or bool(loaded.metadata.get("allow_tf32"))
        key = (loaded.source_hash, config.device, config.size)
        with self._busy:
            found = self._probes.get(key) or probe(loaded, config.device, config.size, allow_tf32)
            self._probes[key] = found
        machine = hardware_key(found.hardware)
        best = self._best_attempt(loaded.name, machine)
        return {
            "task": loaded.name, "path": str(loaded.path), "level": loaded.level,
            "description": loaded.metadata.get("description", ""), "source": loaded.source,
            "device": config.device, "size_preset": config.size, "sizes": loaded.metadata.get("sizes") or {},
            "init_inputs": found.init_inputs, "inputs": found.inputs, "outputs": found.outputs,
            "tolerance": {"outputs": found.tolerances, "trials": config.trials, "policy": TOLERANCE_POLICY},
            "hardware": found.hardware, "hardware_key": machine,
            "roofline": roofline(found, config.device, allow_tf32),
            "baselines": self._baselines(loaded.name, machine, config),
            "best": _brief(best),
            "candidate_rules": candidate_rules(), "notes": list(found.notes),
        }

    @tool
    def evaluate(self, task: str, source: str, device: str | None = None, analysis: str = "",
                 parents: list[int] | None = None) -> dict[str, Any]:
        """Verify and time `source` with the task's warm Judge; record it. The verdict plus `attempt_id`."""
        _check_source(source)
        if len(analysis.encode()) > MAX_ANALYSIS_BYTES:
            raise Refused("bad_argument", f"the analysis is over {MAX_ANALYSIS_BYTES >> 10} KiB: keep it to the "
                                          "reasoning behind this candidate")
        config = self._config(device)
        loaded = self._task(task)
        archive = self._archive(create=True)
        assert archive is not None
        parent_ids = tuple(_parent_ids(archive, parents))
        candidate = Candidate(source, strategy=STRATEGY, model=self.agent_name)
        # in process, one evaluation at a time; on an executor, its workers keep each GPU to one
        with self._busy if self.executor is None else contextlib.nullcontext():
            with self._record_lock:
                attempt_id = self._record(archive, loaded, candidate, analysis, parent_ids)
            result = self._evaluator(config).submit(loaded, candidate).result()
            if self.executor is not None and result.status == "task_error":  # a worker could not load the task
                raise HarnessError(f"the {self.executor} executor's worker could not evaluate it: {result.reason}")
            verdict = json_safe({**result.to_dict(samples=False), "attempt_id": attempt_id})
            with self._record_lock:
                archive.add_evaluation(attempt_id, result)
                self._verdicts[(loaded.name, str(config.device), candidate.id)] = verdict  # for profile
                while len(self._verdicts) > 64:
                    self._verdicts.popitem(last=False)
        return verdict

    @tool
    def profile(self, task: str, source: str, device: str | None = None) -> dict[str, Any]:
        """What ran and where the time went; reuses this session's evaluation of the same source."""
        _check_source(source)
        config = self._config(device)
        name = self._task(task).name
        verdict = self._verdicts.get((name, str(config.device), Candidate(source).id))
        reused = verdict is not None
        if verdict is None:
            verdict = self.evaluate(task, source, device)
            if "error" in verdict:
                return verdict
        keys = ("task", "attempt_id", "candidate_id", "status", "correct", "reason", "stage", "speedup", "claim",
                "candidate_ms", "reference_ms", "compile_ms", "kernels", "roofline", "compile_log", "output_tail",
                "stage_seconds", "hardware")
        return {**{k: verdict.get(k) for k in keys}, "reused_evaluation": reused, "nsight_compute": _nsight_compute()}

    @tool
    def history(self, task: str, limit: int = 10, include_source: bool = True) -> dict[str, Any]:
        """The task's `limit` latest evaluated attempts (any run, any proposer), newest first."""
        _check_count("limit", limit)
        name, _ = self._known(task)
        archive = self._archive()
        attempts = archive.recent(name, limit) if archive else []
        best = archive.best(name) if archive else None
        return {"task": name, "best": _brief(best), "attempts": [_attempt(a, include_source) for a in attempts]}

    @tool
    def search_archive(self, task: str, k: int = 3) -> dict[str, Any]:
        """The best verified attempts of the `k` most similar other tasks (search/retrieval.py)."""
        _check_count("k", k)
        name, source = self._known(task)
        archive = self._archive()
        if archive is None:
            return {"task": name, "stepping_stones": []}
        return {"task": name, "stepping_stones": [
            {"task": a.task, "similarity": round(similarity(source, archive.task_source(a.task) or ""), 3),
             **_attempt(a, True)} for a in stepping_stones(archive, name, source, k)]}

    @tool
    def best(self, task: str, hardware_key: str | None = None) -> dict[str, Any]:
        """archive.best_attempt of the task: the highest-speedup correct, timed attempt (one machine if a key is given)."""
        name, _ = self._known(task)
        found = self._best_attempt(name, hardware_key or None)
        return {"task": name, "hardware_key": hardware_key or None, "found": found is not None,
                "best": _attempt(found, True) if found else None}

    # -- helpers ----------------------------------------------------------------------------------

    def _archive(self, create: bool = False) -> Archive | None:
        """The session's archive connection; None while the file does not exist and nothing must be written."""
        with self._archive_lock:
            if self._archive_handle is None and (create or self.archive_path.is_file()):
                self._archive_handle = Archive(self.archive_path)
            return self._archive_handle

    def _config(self, device: str | None) -> EvalConfig:
        chosen = device or self.device
        if chosen is not None and chosen not in DEVICES:
            raise Refused("unknown_device", f"device {chosen!r} is not one of cpu, cuda: pass cpu or cuda, or leave it out")
        if chosen == "cuda" and not cuda_available():
            raise Refused("device_unavailable", "device cuda was asked for but torch sees no CUDA GPU here: "
                                                "pass cpu, or leave the device out")
        resolved: Device | None = "cpu" if chosen == "cpu" else "cuda" if chosen == "cuda" else None
        return dataclasses.replace(self.eval_config, device=resolved).resolved()

    def _task(self, name: str) -> Task:
        """A task to run: a suite name, a task file, or a task only the archive holds (written out to a file)."""
        from warpforge.cli.optimize import archived_task, load_tasks

        if not name or not name.strip():
            raise Refused("unknown_task", "no task given: pass a suite task name such as level1/softmax (see "
                                          "list_tasks) or the path of a task file")
        archive = self._archive()
        if self.task_dirs is not None:  # an untrusted request: no folders, no paths outside task_dirs
            found = self._file_task(name) or (archived_task(archive, name) if archive else None)
            if found is None:
                raise Refused("unknown_task", _unknown(name))
            return found
        try:
            tasks = load_tasks([name], archive) if archive else [load_task(name)]
        except TaskError:
            raise
        except UsageError:
            raise Refused("unknown_task", _unknown(name)) from None
        if len(tasks) != 1:
            raise Refused("unknown_task", f"{name!r} names {len(tasks)} tasks: give one, such as {tasks[0].name}")
        return tasks[0]

    def _known(self, name: str) -> tuple[str, str]:
        """(name, reference source) of a task to look up: loadable here, or recorded in the archive."""
        if not name or not name.strip():
            raise Refused("unknown_task", _unknown(name))
        task = self._file_task(name)
        if task is not None:
            return task.name, task.source
        archive = self._archive()
        source = archive.task_source(name) if archive else None
        if source is None and not (archive and name in archive.tasks()):
            raise Refused("unknown_task", _unknown(name))
        return name, source or ""

    def _file_task(self, name: str) -> Task | None:
        """The task in the file `name` names, None if there is none this session may read: any file
        for a trusted session; otherwise a suite task, or a .py file inside task_dirs (symbolic links
        resolved). A path outside them is None whether or not it exists, so a refusal reveals nothing."""
        if self.task_dirs is None:
            try:
                return load_task(name)
            except TaskError:
                raise
            except UsageError:
                return None
        path = suite_task(name)
        if path is None:
            try:
                path = Path(name).resolve()
            except (OSError, ValueError, RuntimeError):  # a NUL byte, a link loop: no task either way
                return None
            inside = path.suffix == ".py" and any(path.is_relative_to(d) for d in self.task_dirs)
            if not (inside and path.is_file()):
                return None
        return load_task(path)

    def _evaluator(self, config: EvalConfig) -> Evaluator:
        """The device's evaluator, started on first use: in process, a warm Judge per task (one
        evaluation at a time); with an executor, its workers (worker processes, or Ray actors)."""
        device = str(config.device)
        with self._record_lock:
            evaluator = self._evaluators.get(device)
            if evaluator is None:
                evaluator = make_evaluator(config, executor=self.executor, workers=self.workers,
                                           ray_address=self.ray_address, label=f"attempt of {self.agent_name}",
                                           max_judges=self.max_judges)
                self._evaluators[device] = evaluator
        return evaluator

    def _record(self, archive: Archive, task: Task, candidate: Candidate, analysis: str,
                parents: tuple[int, ...]) -> int:
        """Record the attempt before it is evaluated (a killed session leaves it unevaluated, as the loop does)."""
        if self._run_id is None:
            self._run_id = archive.start_run({"mode": "agent", "agent": self.agent_name, "interface": self.interface,
                                              "device": self.device or "auto", "eval": self.eval_config.to_dict()}, seed=0)
        archive.add_task(task)
        step = self._steps.get(task.name, 0)
        self._steps[task.name] = step + 1
        features = features_of(candidate.source)
        proposal = Proposal(task=task.name, strategy=STRATEGY, model=self.agent_name, candidate=candidate,
                            analysis=analysis)
        return archive.add_candidate(self._run_id, proposal, step, parents=parents, features=features.to_dict(),
                                     language=features.language)

    def _best_attempt(self, task: str, machine: str | None) -> Attempt | None:
        archive = self._archive()
        return archive.best(task, hardware_key=machine) if archive else None

    def _baselines(self, task: str, machine: str | None, config: EvalConfig) -> dict[str, Any] | None:
        """Eager / torch.compile timings recorded for this task, machine, device and size preset (None if none yet)."""
        archive = self._archive()
        if archive is None or machine is None:
            return None
        for a in archive.recent(task, 20, hardware_key=machine):
            recorded = (a.result or {}).get("config", {})
            same_setting = recorded.get("size") == config.size and recorded.get("device") == config.device
            if a.reference_ms is not None and same_setting:
                return {"eager_ms": a.reference_ms, "torch_compile_ms": a.compile_ms, "from_attempt_id": a.id,
                        "measured_at": a.evaluated_at}
        return None


def _unknown(name: str) -> str:
    return (f"unknown task {name!r}: give a suite task name such as level1/softmax (see list_tasks or "
            "`warpforge agent tasks`), the path of a task file (over MCP, one in a folder the server was given "
            "with --task-dir), or a task recorded in the archive")


def _check_source(source: str) -> None:
    if not isinstance(source, str) or not source.strip():
        raise Refused("empty_source", "the source is empty: pass the full Python source of a file that defines "
                                      "class ModelNew(nn.Module)")
    size = len(source.encode(errors="replace"))
    if size > MAX_SOURCE_BYTES:
        raise Refused("source_too_large", f"the source is {size} bytes, over the {MAX_SOURCE_BYTES >> 20} MiB limit: "
                                          "send the kernel file itself, without embedded data")


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise Refused("bad_argument", f"{name} must be a whole number from 1 to {MAX_LIMIT}, not {value!r}")


def _parent_ids(archive: Archive, parents: list[int] | None) -> list[int]:
    ids = []
    for p in parents or ():
        if isinstance(p, bool) or not isinstance(p, int):
            raise Refused("bad_argument", f"parents must be attempt ids (integers), not {p!r}")
        try:
            archive.attempt(p)
        except UsageError:
            raise Refused("bad_argument", f"no attempt #{p} in the archive: parents must be attempt_id values from "
                                          "evaluate or history") from None
        ids.append(p)
    return ids


def _brief(a: Attempt | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {"attempt_id": a.id, "speedup": a.speedup, "claim": a.claim.words(), "improved": a.claim.faster,
            "candidate_ms": a.candidate_ms, "hardware_key": a.hardware_key}


def _attempt(a: Attempt, include_source: bool) -> dict[str, Any]:
    row = {"attempt_id": a.id, "source_hash": a.source_hash, "run_id": a.run_id, "step": a.step,
           "strategy": a.strategy, "model": a.model, "language": a.language, "status": a.status, "correct": a.correct,
           "stage": a.stage, "reason": a.reason, "speedup": a.speedup, "claim": a.claim.words(),
           "improved": a.claim.faster, "speedup_vs_compile": a.speedup_vs_compile, "candidate_ms": a.candidate_ms, "candidate_iqr_ms": a.candidate_iqr_ms, "reference_ms": a.reference_ms,
           "kernels_kind": a.kernels_kind, "hardware_key": a.hardware_key, "parents": list(a.parents),
           "analysis": a.analysis, "compile_log": (a.result or {}).get("compile_log", ""),
           "evaluated_at": a.evaluated_at}
    if include_source:
        row["source"] = a.source
    return row


def _nsight_compute() -> dict[str, Any]:
    """Nsight Compute is not run: it would run the candidate outside the evaluator's sandbox."""
    path = shutil.which("ncu")
    note = (f"found at {path} but not run by warpforge: it would run the candidate outside the sandbox; profile a "
            "copy yourself" if path else "not installed here (no ncu on PATH)")
    return {"available": path is not None, "used": False,
            "note": note + "; `kernels` comes from torch.profiler on CUDA and from a call trace on the CPU"}
