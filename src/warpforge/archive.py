"""The archive: every run, task, candidate, evaluation and LLM call, in one SQLite file.

Written as results arrive (each write is its own committed transaction, WAL mode), so a run
killed at any point resumes from what was recorded (`steps`, `unevaluated`). One connection
guarded by a lock serves every thread; `read_only=True` opens an existing archive without
changing anything (the report). The schema is a contract other modules and tools read directly
(docs/archive.md). This module stores and queries; it does not choose what to try next (search/),
render reports or export datasets (report/), and it never deletes or migrates rows. LLM text is
stored redacted (redact.py); `lock_run` gives a run one owner process at a time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from warpforge import languages
from warpforge.candidate import EvalResult
from warpforge.errors import ConfigError, UsageError
from warpforge.claim import Claim, claim_of
from warpforge.propose import Proposal, duplicate_of
from warpforge.redact import redact, redact_data
from warpforge.task import Task

SCHEMA_VERSION = "1"
RUN_STATUSES = ("running", "done", "stopped")
TABLES = frozenset({"meta", "runs", "tasks", "candidates", "evaluations", "llm_calls"})

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs(id TEXT PRIMARY KEY, started REAL, finished REAL, status TEXT, config TEXT,
    seed INTEGER);
CREATE TABLE IF NOT EXISTS tasks(name TEXT PRIMARY KEY, path TEXT, source_hash TEXT, source TEXT, metadata TEXT);
CREATE TABLE IF NOT EXISTS candidates(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, task TEXT, step INTEGER,
    source_hash TEXT, source TEXT, language TEXT, parents TEXT, strategy TEXT, model TEXT, island INTEGER,
    features TEXT, prompt TEXT, reply TEXT, analysis TEXT, failure TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER, cost_usd REAL, llm_seconds REAL, created REAL,
    UNIQUE(run_id, task, step));
CREATE TABLE IF NOT EXISTS evaluations(id INTEGER PRIMARY KEY AUTOINCREMENT, candidate_id INTEGER, run_id TEXT,
    task TEXT, status TEXT, correct INTEGER, stage TEXT, reason TEXT, speedup REAL, speedup_vs_compile REAL,
    candidate_ms REAL, candidate_iqr_ms REAL, reference_ms REAL, compile_ms REAL, kernels_kind TEXT,
    hardware TEXT, hardware_key TEXT, result TEXT, review TEXT, created REAL);
CREATE TABLE IF NOT EXISTS llm_calls(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, task TEXT, model TEXT,
    role TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, cost_usd REAL, seconds REAL, error TEXT,
    created REAL);
CREATE TABLE IF NOT EXISTS requests(run_id TEXT, task TEXT, step INTEGER, strategy TEXT, parents TEXT,
    messages TEXT, created REAL, PRIMARY KEY(run_id, task, step));
CREATE INDEX IF NOT EXISTS candidates_task ON candidates(task);
CREATE INDEX IF NOT EXISTS candidates_source_hash ON candidates(source_hash);
CREATE INDEX IF NOT EXISTS evaluations_candidate ON evaluations(candidate_id);
CREATE INDEX IF NOT EXISTS evaluations_task_correct ON evaluations(task, correct);
"""

_REQUESTS_TABLE = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS requests"):SCHEMA.index("CREATE INDEX")]

# An attempt is a candidate row joined with its latest evaluation (the highest evaluation id).
_ATTEMPTS = """
SELECT c.*, e.id AS evaluation_id, e.status, e.correct, e.stage, e.reason, e.speedup, e.speedup_vs_compile,
       e.candidate_ms, e.candidate_iqr_ms, e.reference_ms, e.compile_ms, e.kernels_kind, e.hardware,
       e.hardware_key, e.result, e.review, e.created AS evaluated_at
FROM candidates c LEFT JOIN evaluations e ON e.id = (SELECT MAX(id) FROM evaluations WHERE candidate_id = c.id)
"""


@dataclass(frozen=True)
class Attempt:
    """One proposal for one task (a `candidates` row) with its latest evaluation (None if none yet)."""

    id: int
    run_id: str
    task: str
    step: int
    source_hash: str | None = None
    """Candidate.id; None (and source None) when the proposal produced no program (see `failure`)."""
    source: str | None = None
    language: str = "unknown"
    parents: tuple[int, ...] = ()
    """Candidate ids (this archive's) of the attempts shown in the prompt."""
    strategy: str = ""
    model: str = ""
    island: int | None = None
    features: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""
    reply: str = ""
    analysis: str = ""
    failure: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    llm_seconds: float = 0.0
    created: float = 0.0
    evaluation_id: int | None = None
    status: str | None = None
    correct: bool | None = None
    stage: str | None = None
    reason: str | None = None
    speedup: float | None = None
    speedup_vs_compile: float | None = None
    candidate_ms: float | None = None
    candidate_iqr_ms: float | None = None
    reference_ms: float | None = None
    compile_ms: float | None = None
    kernels_kind: str | None = None
    hardware: dict[str, Any] | None = None
    hardware_key: str | None = None
    result: dict[str, Any] | None = None
    """EvalResult.to_dict(samples=True) as stored."""
    review: dict[str, Any] | None = None
    evaluated_at: float | None = None

    def __hash__(self) -> int:  # the generated hash would fail on the dict fields
        return hash((self.id, self.evaluation_id))

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def timed(self) -> bool:
        """Verified correct and timed: it has a positive, finite speedup to compare."""
        return bool(self.correct) and _positive(self.speedup) and _positive(self.candidate_ms)

    @property
    def claim(self) -> Claim:
        """What this attempt's latest evaluation may say about its speed (claim.py)."""
        result = dict(self.result or {})
        timing = dict(result.get("timing") or {})  # a row without (all of) its result: the columns
        timing["candidate"] = timing.get("candidate") or {"median_ms": self.candidate_ms, "iqr_ms": self.candidate_iqr_ms}
        timing["reference"] = timing.get("reference") or {"median_ms": self.reference_ms}
        return claim_of({**result, "status": self.status, "timing": timing})



@dataclass(frozen=True)
class RunRow:
    id: str
    started: float
    finished: float | None
    status: str
    config: str
    """The resolved run configuration, as stored (JSON text)."""
    seed: int


@dataclass(frozen=True)
class TaskSummary:
    task: str
    attempts: int
    evaluated: int
    correct: int
    best_speedup: float | None
    best_candidate_id: int | None
    improved: bool
    """The best attempt passes `improves_on_eager`."""
    best_claim: str
    """The best attempt's speed claim in words (claim.Claim.words), or why there is no best."""
    tokens: int
    cost_usd: float
    duplicates: int = 0
    """Replies that repeated an earlier candidate of their run (propose.duplicate_of): not in `attempts`."""


def best_attempt(attempts: Iterable[Attempt]) -> Attempt | None:
    """THE best kernel of a task, for every view (live table, optimize's summary and exit code,
    `archive ls/best`, the report, the exports): among the correct, timed attempts given, proven
    wins first (`improves_on_eager`), then the highest lower end of the speedup's interval, then
    the highest point estimate, the lowest id on a tie (claim.Claim.rank). A 1.09x whose interval
    reaches 1.00 (KernelBench level3/24's untouched program, timed against itself) never outranks
    a 1.05x that is faster for sure. The caller picks the scope (one run, one machine, the archive)."""
    return max((a for a in attempts if a.timed), key=lambda a: (*a.claim.rank, -a.id), default=None)


def improves_on_eager(attempt: Attempt) -> bool:
    """THE rule for "improved": verified, timed, and a proven win over eager PyTorch — the
    speedup's interval lies above 1 (claim.py, whatever its width; rows recorded under the older
    width rule are re-read under this one)."""
    return attempt.timed and attempt.claim.faster


def target_reached(best: Attempt | None, target: float) -> bool:
    """THE rule for `--target-speedup`: the task's best (`best_attempt`) reaches `target` and, for a
    target above 1, is faster than eager beyond the noise. With `best_attempt` ranking such
    attempts first, a later attempt can only keep the target reached, never undo it."""
    if best is None or not (best.speedup or 0.0) >= target:
        return False
    return target <= 1.0 or improves_on_eager(best)


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v) and v > 0


def hardware_key(hardware: Mapping[str, Any]) -> str | None:
    """Which machine a timing belongs to: 12 hex of sha256 over (GPU or CPU, driver, torch, CUDA).
    Speedups measured under different keys are not comparable."""
    if not hardware:
        return None
    ident = [hardware.get("gpu") or hardware.get("cpu"), hardware.get("driver"), hardware.get("torch"),
             hardware.get("cuda")]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:12]


def _to_json(value: Any) -> str:
    # Python's encoder, as `warpforge eval --json` writes it: non-finite floats (a max_abs_err of
    # inf) round-trip as Infinity / NaN; the dataset exports turn them into null.
    return json.dumps(value, sort_keys=True, default=str)


def _from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _decode(raw: bytes) -> str:
    # Text written by other tools need not be valid UTF-8; one bad byte must not make a row unreadable.
    return raw.decode("utf-8", errors="replace")


class Archive:
    """The SQLite archive at `path` (created with its parent folders when missing), or with
    `read_only=True` an existing archive opened `mode=ro`: nothing is created or changed, so it
    is safe beside a running search, and every write raises UsageError."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.Lock()
        if read_only:
            self._open_read_only()
            return
        if self.path.is_dir():
            raise UsageError(f"archive path {self.path} is a directory: give a file path such as {self.path}/warpforge-archive.db")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: autocommit, each statement is committed when it returns.
            self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open archive {self.path} ({exc}): give a writable file path") from None
        self._conn.row_factory = sqlite3.Row
        self._conn.text_factory = _decode
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise UsageError(f"{self.path} is not a warpforge archive ({exc}): give another --archive path") from None
        except UsageError:
            self._conn.close()
            raise

    def _open(self) -> None:
        # Look before changing anything: a foreign database must not be switched to WAL.
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise UsageError(f"{self.path} is an SQLite database but not a warpforge archive: give another --archive path")
        if "meta" in tables:
            self._check_version()
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed result survives a power cut too, not only a killed process; results
        # arrive about once a second, so one fsync each costs nothing that matters.
        self._conn.execute("PRAGMA synchronous=FULL")
        if not tables:
            self._conn.executescript(f"BEGIN IMMEDIATE;{SCHEMA}INSERT OR IGNORE INTO meta VALUES "
                                     f"('schema_version', '{SCHEMA_VERSION}');COMMIT;")
        elif "requests" not in tables:  # added within schema 1: an archive from before gets it, nothing else changes
            self._conn.execute(_REQUESTS_TABLE)

    def _open_read_only(self) -> None:
        hint = "pass the path of the archive that warpforge optimize wrote"
        if not self.path.is_file():
            raise UsageError(f"archive {self.path} does not exist: {hint}")
        try:
            # as_uri: a '?', '#' or '%' in the path must not be read as part of the URI.
            self._conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0,
                                         check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open archive {self.path} ({exc}): check that it is readable") from None
        self._conn.row_factory = sqlite3.Row
        self._conn.text_factory = _decode
        try:
            tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if TABLES - tables:
                raise UsageError(f"{self.path} is not a warpforge archive (it has no "
                                 f"{', '.join(sorted(TABLES - tables))} table): {hint}")
            self._check_version()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if exc.sqlite_errorname == "SQLITE_NOTADB":
                raise UsageError(f"{self.path} is not an SQLite file: {hint}") from None
            raise UsageError(f"cannot read archive {self.path} ({exc}): check that it and its folder are "
                             "readable") from None
        except UsageError:
            self._conn.close()
            raise

    def _check_version(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None or row[0] != SCHEMA_VERSION:
            raise UsageError(f"{self.path} has archive schema version {row[0] if row else 'unknown'} but this "
                             f"warpforge reads version {SCHEMA_VERSION}: upgrade warpforge or use another --archive path")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check_writable(self) -> None:
        if self.read_only:
            raise UsageError(f"archive {self.path} is open read-only: open it with Archive(path) to write to it")

    def _write(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        self._check_writable()
        with self._lock:
            return self._conn.execute(sql, params)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    # -- writes ----------------------------------------------------------------------------------

    def start_run(self, config: dict[str, Any], seed: int, run_id: str | None = None) -> str:
        """Record a new run and return its id; an existing `run_id` is resumed (status back to
        running; its stored config and seed are kept)."""
        if run_id is not None:
            self._write("INSERT INTO runs VALUES (?, ?, NULL, 'running', ?, ?) "
                        "ON CONFLICT(id) DO UPDATE SET status='running', finished=NULL",
                        (run_id, time.time(), _to_json(config), seed))
            return run_id
        while True:  # a fresh id never resumes someone else's run, even within the same second
            run_id = f"run-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
            if self._write("INSERT OR IGNORE INTO runs VALUES (?, ?, NULL, 'running', ?, ?)",
                           (run_id, time.time(), _to_json(config), seed)).rowcount == 1:
                return run_id

    def lock_run(self, run_id: str) -> RunLock:
        """Take run `run_id` for this process (see `RunLock`); ConfigError when another process has it."""
        return RunLock(self.path, run_id).acquire()

    def finish_run(self, run_id: str, status: str) -> None:
        if status not in RUN_STATUSES:
            raise UsageError(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}")
        if self._write("UPDATE runs SET status=?, finished=? WHERE id=?", (status, time.time(), run_id)).rowcount == 0:
            raise UsageError(f"no run {run_id!r} in archive {self.path}: start it with start_run first")

    def add_task(self, task: Task) -> None:
        self._write("INSERT INTO tasks VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET path=excluded.path, "
                    "source_hash=excluded.source_hash, source=excluded.source, metadata=excluded.metadata",
                    (task.name, str(task.path), task.source_hash, task.source, _to_json(task.metadata)))

    def add_candidate(self, run_id: str, proposal: Proposal, step: int, *, parents: Sequence[int] = (),
                      island: int | None = None, features: Mapping[str, Any] | None = None,
                      language: str = "unknown") -> int:
        """Record one proposal (with or without a program); idempotent on (run_id, task, step)."""
        if language not in (known := (*languages.names(), "unknown")):
            raise UsageError(f"language {language!r} is not one of {', '.join(known)}")
        self._check_writable()
        cand = proposal.candidate
        with self._lock:
            self._conn.execute(
                "INSERT INTO candidates(run_id, task, step, source_hash, source, language, parents, strategy, model, "
                "island, features, prompt, reply, analysis, failure, prompt_tokens, completion_tokens, cost_usd, "
                "llm_seconds, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(run_id, task, step) DO NOTHING",
                (run_id, proposal.task, step, cand.id if cand else None, cand.source if cand else None, language,
                 _to_json([int(p) for p in parents]), proposal.strategy, proposal.model, island,
                 # evaluation text arrives redacted (EvalResult); LLM text and errors do not
                 _to_json(dict(features or {})), redact(proposal.prompt), redact(proposal.reply),
                 redact(proposal.analysis), redact(proposal.failure),
                 proposal.prompt_tokens, proposal.completion_tokens, proposal.cost_usd, proposal.seconds, time.time()))
            row = self._conn.execute("SELECT id FROM candidates WHERE run_id=? AND task=? AND step=?",
                                     (run_id, proposal.task, step)).fetchone()
        return int(row[0])

    def set_request(self, run_id: str, task: str, step: int, strategy: str, parents: Sequence[int],
                    messages: list[dict[str, str]]) -> None:
        """The messages sent to the model for one step, kept until the step's candidate is recorded:
        a run killed while the model worked sends the same request again when it resumes (an
        inbox or a cache then finds the reply), instead of a new prompt the reply does not answer."""
        self._write("INSERT OR REPLACE INTO requests VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (run_id, task, step, strategy, _to_json([int(p) for p in parents]),
                     _to_json([{**m, "content": redact(m["content"])} for m in messages]), time.time()))

    def request(self, run_id: str, task: str, step: int) -> tuple[str, list[int], list[dict[str, str]]] | None:
        """(strategy, parent ids, messages) of a step's request that has no candidate yet, or None."""
        rows = self._read("SELECT strategy, parents, messages FROM requests WHERE run_id=? AND task=? AND step=?",
                          (run_id, task, step))
        if not rows:
            return None
        return str(rows[0]["strategy"]), list(json.loads(rows[0]["parents"])), list(json.loads(rows[0]["messages"]))

    def drop_request(self, run_id: str, task: str, step: int) -> None:
        self._write("DELETE FROM requests WHERE run_id=? AND task=? AND step=?", (run_id, task, step))

    def add_evaluation(self, candidate_id: int, result: EvalResult) -> int:
        self._check_writable()
        cand = self._read("SELECT run_id, task FROM candidates WHERE id=?", (candidate_id,))
        if not cand:
            raise UsageError(f"no candidate #{candidate_id} in archive {self.path}: add it with add_candidate first")
        timing = result.candidate
        cursor = self._write(
            "INSERT INTO evaluations(candidate_id, run_id, task, status, correct, stage, reason, speedup, "
            "speedup_vs_compile, candidate_ms, candidate_iqr_ms, reference_ms, compile_ms, kernels_kind, hardware, "
            "hardware_key, result, review, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
            (candidate_id, cand[0]["run_id"], cand[0]["task"], result.status, int(result.correct), result.stage,
             result.reason, result.speedup, result.speedup_vs_compile, timing.median_ms if timing else None,
             timing.iqr_ms if timing else None, result.reference.median_ms if result.reference else None,
             result.compiled_reference.median_ms if result.compiled_reference else None,
             result.kernels.get("kind"), _to_json(result.hardware), hardware_key(result.hardware),
             _to_json(result.to_dict(samples=True)), time.time()))
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def set_review(self, evaluation_id: int, review: Mapping[str, Any]) -> None:
        if self._write("UPDATE evaluations SET review=? WHERE id=?",
                       (_to_json(redact_data(dict(review))), evaluation_id)).rowcount == 0:
            raise UsageError(f"no evaluation #{evaluation_id} in archive {self.path}")

    def add_llm_call(self, run_id: str, task: str, model: str, role: str, prompt_tokens: int,
                     completion_tokens: int, cost_usd: float, seconds: float, error: str = "") -> None:
        self._write("INSERT INTO llm_calls(run_id, task, model, role, prompt_tokens, completion_tokens, cost_usd, "
                    "seconds, error, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, task, model, role, prompt_tokens, completion_tokens, cost_usd, seconds, redact(error),
                     time.time()))

    # -- queries ---------------------------------------------------------------------------------

    def _attempts(self, where: str = "", params: Sequence[Any] = (), order: str = "c.id") -> list[Attempt]:
        rows = self._read(f"{_ATTEMPTS} {'WHERE ' + where if where else ''} ORDER BY {order}", params)
        return [_attempt(r) for r in rows]

    def steps(self, run_id: str, task: str) -> dict[int, Attempt]:
        """Every recorded step of one run and task (what a resumed run must not propose again)."""
        return {a.step: a for a in self._attempts("c.run_id=? AND c.task=?", (run_id, task), "c.step")}

    def unevaluated(self, run_id: str, task: str) -> list[Attempt]:
        """Candidates with a program but no evaluation (a run was killed between the two), by step."""
        return self._attempts("c.run_id=? AND c.task=? AND c.source IS NOT NULL AND e.id IS NULL",
                              (run_id, task), "c.step")

    def attempts(self, task: str | None = None, run_id: str | None = None,
                 correct: bool | None = None) -> list[Attempt]:
        """Attempts in recording order; `correct=False` means evaluated and not correct."""
        clauses: list[str] = []
        params: list[Any] = []
        if task is not None:
            clauses.append("c.task=?")
            params.append(task)
        if run_id is not None:
            clauses.append("c.run_id=?")
            params.append(run_id)
        if correct is not None:
            clauses.append("e.correct=?")
            params.append(int(correct))
        return self._attempts(" AND ".join(clauses), params)

    def best(self, task: str, hardware_key: str | None = None) -> Attempt | None:
        """`best_attempt` of all of `task`'s attempts in the archive (on one machine if a key is given)."""
        where = "c.task=? AND e.correct=1 AND e.candidate_ms IS NOT NULL"  # rows with a NULL speedup: see _speedup
        params: list[Any] = [task]
        if hardware_key is not None:
            where += " AND e.hardware_key=?"
            params.append(hardware_key)
        return best_attempt(self._attempts(where, params))

    def recent(self, task: str, limit: int, hardware_key: str | None = None) -> list[Attempt]:
        """The task's `limit` most recently evaluated attempts, newest first (on one machine if a key is given)."""
        where = "c.task=? AND e.id IS NOT NULL"
        params: list[Any] = [task]
        if hardware_key is not None:
            where += " AND e.hardware_key=?"
            params.append(hardware_key)
        return self._attempts(where, params, f"e.id DESC LIMIT {max(int(limit), 0)}")

    def attempt(self, candidate_id: int) -> Attempt:
        found = self._attempts("c.id=?", (candidate_id,))
        if not found:
            raise UsageError(f"no candidate #{candidate_id} in archive {self.path}: see `warpforge archive ls`")
        return found[0]

    def lineage(self, candidate_id: int) -> list[Attempt]:
        """Every ancestor (parents, their parents ...), oldest first, then the candidate itself."""
        me = self.attempt(candidate_id)
        seen: dict[int, Attempt] = {}
        frontier = list(me.parents)
        while frontier:
            found = self._attempts(f"c.id IN ({','.join('?' * len(frontier))})", frontier)
            seen.update((a.id, a) for a in found)
            frontier = sorted({p for a in found for p in a.parents} - seen.keys() - {me.id})
        return sorted(seen.values(), key=lambda a: a.id) + [me]  # ids grow with time

    def task_summaries(self) -> list[TaskSummary]:
        """Per task; tokens and cost come from llm_calls (which also sees calls that made no
        candidate) when any were logged, else from the candidates, as the HTML report counts them."""
        by_task: dict[str, list[Attempt]] = {name: [] for name in self.tasks()}
        for a in self.attempts():
            by_task[a.task].append(a)
        usage = self.task_usage()
        summaries = []
        for name, attempts in sorted(by_task.items()):
            best = best_attempt(attempts)
            tokens, cost = usage.get(name, (0, 0.0))
            repeats = sum(duplicate_of(a.failure) is not None for a in attempts)
            summaries.append(TaskSummary(
                task=name, attempts=len(attempts) - repeats, evaluated=sum(a.evaluation_id is not None for a in attempts),
                correct=sum(bool(a.correct) for a in attempts), best_speedup=best.speedup if best else None,
                best_candidate_id=best.id if best else None, improved=best is not None and improves_on_eager(best),
                best_claim=best.claim.words() if best else "no correct attempt yet" if not any(
                    a.correct for a in attempts) else "not timed (no correct attempt has a timing)",
                tokens=int(tokens), cost_usd=float(cost), duplicates=repeats))
        return summaries

    def task_usage(self) -> dict[str, tuple[int, float]]:
        """(tokens, cost in USD) per task: from llm_calls (which also sees calls that made no
        candidate) when any were logged, else from the candidates' own counts."""
        sums = "SUM(COALESCE(prompt_tokens, 0) + COALESCE(completion_tokens, 0)), SUM(COALESCE(cost_usd, 0))"
        rows = self._read(f"SELECT task, {sums} FROM llm_calls GROUP BY task")
        if not rows:
            rows = self._read(f"SELECT task, {sums} FROM candidates GROUP BY task")
        return {r[0]: (int(r[1] or 0), float(r[2] or 0.0)) for r in rows}

    def runs(self) -> list[RunRow]:
        """Every run, oldest first."""
        return [RunRow(id=r["id"], started=r["started"], finished=r["finished"], status=r["status"],
                       config=r["config"], seed=r["seed"])
                for r in self._read("SELECT * FROM runs ORDER BY started, id")]

    def tasks(self) -> list[str]:
        """Names of every task with a recorded source or attempt, sorted."""
        return [r[0] for r in self._read("SELECT name FROM tasks UNION SELECT DISTINCT task FROM candidates ORDER BY 1")]

    def task_source(self, name: str) -> str | None:
        rows = self._read("SELECT source FROM tasks WHERE name=?", (name,))
        return rows[0][0] if rows else None

    def task_path(self, name: str) -> str | None:
        """The task file's path as recorded when the task was added (it may not exist here)."""
        rows = self._read("SELECT path FROM tasks WHERE name=?", (name,))
        return rows[0][0] if rows else None


class RunLock:
    """One owner per run: an exclusive `flock` on `ARCHIVE.run-<id>.lock` beside the archive, held
    until `release` (or `with`). The OS drops it when the holder dies, even by SIGKILL, so a crashed
    run never stays locked; the file only names the holder's pid for the refusal message."""

    def __init__(self, archive_path: Path, run_id: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
        safe = safe if safe.startswith("run-") else f"run-{safe}"  # generated ids start with run- already
        self.run_id = run_id
        self.archive_path = archive_path
        self.path = archive_path.with_name(f"{archive_path.name}.{safe}.lock")
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise ConfigError(f"run {self.run_id} of archive {self.archive_path} is in use by another warpforge "
                                  f"optimize (pid {holder}): wait for it to finish, or pass another --archive") from None
            except OSError as exc:
                os.close(fd)
                raise UsageError(f"cannot lock {self.path} ({exc}): put the archive on a local filesystem") from None
            if self._still_linked(fd):
                break
            os.close(fd)  # the last owner removed this file between our open and our lock: lock the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def _open(self) -> int:
        try:  # os.open is close-on-exec: no child process keeps the lock alive after we die
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot create the run lock {self.path} ({exc}): make the archive's folder "
                             "writable") from None

    def _still_linked(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._fd is None:
            return
        try:  # removed while still held, so a process that opened it meanwhile sees it gone and retries
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)  # closing drops the lock
        self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _attempt(r: sqlite3.Row) -> Attempt:
    return Attempt(
        id=r["id"], run_id=r["run_id"], task=r["task"], step=r["step"], source_hash=r["source_hash"],
        source=r["source"], language=r["language"], parents=tuple(_from_json(r["parents"]) or ()),
        strategy=r["strategy"] or "", model=r["model"] or "", island=r["island"],
        features=_from_json(r["features"]) or {}, prompt=r["prompt"] or "", reply=r["reply"] or "",
        analysis=r["analysis"] or "", failure=r["failure"] or "", prompt_tokens=r["prompt_tokens"] or 0,
        completion_tokens=r["completion_tokens"] or 0, cost_usd=r["cost_usd"] or 0.0,
        llm_seconds=r["llm_seconds"] or 0.0, created=r["created"] or 0.0, evaluation_id=r["evaluation_id"],
        status=r["status"], correct=None if r["correct"] is None else bool(r["correct"]), stage=r["stage"],
        reason=r["reason"], speedup=_speedup(r), speedup_vs_compile=r["speedup_vs_compile"],
        candidate_ms=r["candidate_ms"], candidate_iqr_ms=r["candidate_iqr_ms"], reference_ms=r["reference_ms"],
        compile_ms=r["compile_ms"], kernels_kind=r["kernels_kind"], hardware=_from_json(r["hardware"]),
        hardware_key=r["hardware_key"], result=_from_json(r["result"]), review=_from_json(r["review"]),
        evaluated_at=r["evaluated_at"])


def _speedup(r: sqlite3.Row) -> float | None:
    """The stored speedup; for a correct row recorded under the older width rule, which stored
    NULL for a paired timing it called unstable, the paired point estimate kept in its result."""
    if r["speedup"] is not None or not r["correct"] or not r["result"]:
        return r["speedup"]  # type: ignore[no-any-return]
    value = ((_from_json(r["result"]) or {}).get("paired") or {}).get("speedup")
    return float(value) if value is not None and _positive(value) else None
