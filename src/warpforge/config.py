"""Typed evaluation settings: defaults once, with the reason beside each.

Configuration flows one way: these defaults, then a `--config` TOML file, then environment
(`WARPFORGE_*`), then the command line (config_sources.py reads them; `GROUPS` below is the
file's sections). The resolved `EvalConfig` is written into every JSON verdict (`config`) so a
result can be reproduced. Nothing here reads files or touches a GPU.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from warpforge.errors import ConfigError, UsageError

Device = Literal["cpu", "cuda"]
Mode = Literal["offline", "server"]


@dataclass(frozen=True)
class TimingBudget:
    """The timing budget and method: how each timing run spends its time (the fields the
    reference's and the candidate's processes time with: `bench.time_calls` takes this object, as
    the GEMM tuner does) and how the parent turns rounds into a speedup (paired rounds, bounds,
    baselines). One object crosses both process boundaries, so a reader can follow a budget from
    `--rep-ms` to the timed loop."""

    mode: Mode = "offline"
    """offline: calls back to back; server: random idle gaps between calls, as CUDA-L2 measured."""
    warmup_ms: float = 25.0
    """Warm-up as a time budget (triton.testing.do_bench uses 25 ms)."""
    rep_ms: float = 100.0
    """Measured repetitions as a time budget (do_bench uses 100 ms)."""
    min_reps: int = 10
    max_reps: int = 300
    """Timed calls are capped: past ~100 samples the median of a stable kernel moves by less than
    its IQR, and each call costs a clone, a flush and a fingerprint on top of the kernel."""
    server_gap_ms: tuple[float, float] = (1.0, 20.0)
    """Range of the random idle gap before each call in server mode."""
    sync_floor: str = "matched"
    """The round trip taken off an untrusted call's device-wide synchronize (what is left beyond it
    is work on other streams, counted): "matched", a clean round trip after an equally long wait,
    measured after each call; "idle", one per timing run with nothing pending (bench.time_calls).
    The A/A spread of both is in docs/timing.md."""
    paired_rounds: int = 5
    """Rounds in which the reference and the candidate are timed back to back, the order of the
    two shuffled per round, on the same input sets: the speedup is the median of the rounds'
    ratios, so drift of clocks and load falls on both (an unpaired A/A read 0.57-1.25x on an
    H100 and 0.07-1.2x on a CPU). Five rounds give a 94 % interval [min, max] of the ratios.
    0 = the reference timed once per Judge, as before."""
    timing_bound: float = 0.5
    """How wide (high / low - 1) a paired interval that straddles 1 may be before it is measured
    again with as many rounds more; if still wider it is described as `timing_unstable` (within
    noise). Width never withholds a claim: an interval wholly above 1 is a win however wide
    (claim.py). In three ad-hoc runs on an idle 2-core CPU (`warpforge eval level1/diag_matmul` of
    a broadcast rewrite), a 12x rewrite's intervals were 15-26 % wide."""
    process_spread: float | None = None
    """How far apart two processes time the same code, beyond what their rounds show: the paired
    interval is widened by this factor each way ([low / (1 + s), high * (1 + s)]) before anything
    is claimed from it. Rounds compare one pair of processes, and each process keeps its own heap,
    cache placement and sync cost for the whole evaluation, so identical code read outside its
    rounds' interval in A/A runs: on an idle 2-core CPU up to 0.77x [0.71, 0.84] and 1.21x
    [1.15, 1.26] (8 of 35 suite tasks; benchmarks/results/cpu_aa_2026-11-25_s11), on an H100 up
    to 1.03x [1.01, 1.12]. None = 0.25 on the CPU, 0.03 on CUDA; 0 uses the rounds alone."""
    unseen_bench_sets: int = 3
    """Extra input sets, with references, that only timed calls see: a program much faster on the
    verified sets (seen before) than on these is caching results by content. 0 turns this off."""
    compile_baseline: bool | None = None
    """Time torch.compile too; None = on for CUDA (where it pays), off for CPU (minutes of C++ builds)."""
    reuse_baselines: bool | None = None
    """Reuse eager / torch.compile timings measured earlier for the same task, sizes, machine and
    software: torch.compile alone takes 5-60 s per task, which would dominate every evaluation.
    None = on for CUDA; off for CPU, where re-timing is cheap and a shared machine is noisy."""

    def __post_init__(self) -> None:
        if self.process_spread is not None and self.process_spread < 0:
            raise ConfigError(f"process_spread must be 0 or more, not {self.process_spread}")
        if self.sync_floor not in ("matched", "idle"):
            raise ConfigError(f"sync_floor must be 'matched' or 'idle', not {self.sync_floor!r}")
        if self.paired_rounds < 0 or self.paired_rounds == 1:
            raise ConfigError(f"paired_rounds must be 0 (off) or at least 2, not {self.paired_rounds}")
        if self.mode not in ("offline", "server"):
            raise ConfigError(f"mode must be 'offline' or 'server', not {self.mode!r}")
        if not self.rep_ms > 0 or not self.warmup_ms >= 0:
            raise ConfigError(f"rep_ms must be positive and warmup_ms 0 or more, not {self.rep_ms} and {self.warmup_ms}")

    def warm_round(self) -> TimingBudget:
        """The budget of a paired round after the first: the program is warm, and the rounds
        together give the samples (half the repetition budget each, five calls at least)."""
        return dataclasses.replace(self, warmup_ms=min(self.warmup_ms, 5.0), rep_ms=self.rep_ms / 2,
                                   min_reps=max(5, self.min_reps // 2))

    def share(self, rounds: int) -> TimingBudget:
        """One of `rounds` interleaved rounds that together spend this budget (the GEMM tuner's)."""
        return dataclasses.replace(self, rep_ms=self.rep_ms / rounds, min_reps=max(3, -(-self.min_reps // rounds)),
                                   max_reps=max(3, self.max_reps // rounds))

    def calls(self) -> dict[str, object]:
        """The fields that pace a timing run's calls (what a cached baseline's timing depends on)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.to_dict().items() if k in CALL_FIELDS}

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> TimingBudget:
        """From `to_dict()` after a JSON round trip (the gap comes back as a list)."""
        gap = d.get("server_gap_ms")
        return cls(**{**d, **({"server_gap_ms": tuple(gap)} if isinstance(gap, list) else {})})  # type: ignore[arg-type]


CALL_FIELDS = ("mode", "warmup_ms", "rep_ms", "min_reps", "max_reps", "server_gap_ms", "sync_floor")
"""TimingBudget's fields that pace the calls of one timing run; the rest say how rounds are
paired and claimed, and which baselines are timed."""


@dataclass(frozen=True)
class Limits:
    """What a process may use: wall-clock time, memory, disk and captured output."""

    timeout_s: float = 600.0
    """Wall-clock limit for the candidate process; a cold load_inline build alone took 47 s on an H200."""
    reference_timeout_s: float = float(os.environ.get("WARPFORGE_REFERENCE_TIMEOUT", 900.0))
    """The reference runs float64 and times the baselines; large GPU presets need minutes on CPU."""
    mem_limit_gb: float = 16.0
    """Host memory (RSS) the candidate process may hold before it is killed as out-of-memory, on
    top of twice the size of its input sets' file (evaluate.candidate_memory_mb)."""
    work_limit_gb: float = float(os.environ.get("WARPFORGE_WORK_LIMIT_GB", 4.0))
    """What a candidate may write into its work folder and private compile cache beyond the
    harness's own files (its inputs, its outputs files, the staged cache); both are host folders,
    in /dev/shm (memory) when it has room. Builds take a few MB to tens of MB (load_inline) and
    Triton's cache less; 4 GiB is the size of its private /tmp. Over it: killed, `crashed`."""
    output_limit_kb: int = 64
    """Captured stdout/stderr kept per process: the first and last half of this many KiB."""
    sets_memory_gb: float | None = None
    """Memory the drawn input sets may take: their float64 reference outputs, and their inputs and
    native outputs twice (the reference's and the candidate's processes each hold every set while
    they are timed in turn). A task too big for `trials` + `unseen_bench_sets` sets within it
    gets fewer (at least 2 checked and 1 timed, or the trials asked when fewer), and its result
    says so in `warnings` and `trials`. None = 30 % of the GPU's memory on CUDA (the rest is for
    the two processes' working memory); no cap on CPU."""

    def __post_init__(self) -> None:
        if self.sets_memory_gb is not None and self.sets_memory_gb <= 0:
            raise ConfigError(f"sets_memory_gb must be positive, not {self.sets_memory_gb}")
        if self.timeout_s <= 0:
            raise ConfigError(f"--timeout must be positive, not {self.timeout_s}")
        if self.mem_limit_gb <= 0:
            raise ConfigError(f"the memory limit must be positive, not {self.mem_limit_gb}")
        if not self.work_limit_gb > 0:
            raise ConfigError(f"work_limit_gb (WARPFORGE_WORK_LIMIT_GB) must be positive, not {self.work_limit_gb}")


@dataclass(frozen=True)
class Safety:
    """The sandbox, the static pre-filter and the precision bar."""

    sandbox: bool = True
    """Run every process that runs candidate code inside the OS sandbox (evaluate/jail.py). Off only
    with --no-sandbox, where the sandbox cannot start; every result then says "unsandboxed"."""
    sandbox_reference: bool = False
    """Run the task's own program (the reference process) inside the same sandbox as candidates:
    it then sees no host files but a copy of its task file, no network and no keys, and shares no
    baseline timings. For task files that did not come from the operator (`--sandbox-reference`;
    always for a task that arrives inside an `eval-batch --jobs` folder). Off by default: the
    operator's own task files are trusted, and keep their home folder's caches."""
    static_checks: bool = True
    """Refuse forbidden APIs before running (static.py). Off only to test the run-time defences."""
    allow_tf32: bool = False
    """TF32 for fp32 tasks is an explicit opt-in (ARCHITECTURE.md); also switches the baselines' TF32 on."""
    strict_fp32: bool = False
    """True fp32: the reference's and the candidate's processes both start with TF32 off (matmuls and
    cuDNN), and the bar is calibrated from that reference. Off by default because the bar is "as
    accurate as the task's program as PyTorch runs it by default", where cuDNN convolutions use TF32
    (a convolution task's own program lands near 3e-4 against float64 on an H100)."""

    def __post_init__(self) -> None:
        if self.strict_fp32 and self.allow_tf32:
            raise ConfigError("strict_fp32 turns TF32 off and allow_tf32 on: choose one")
        if self.sandbox_reference and not self.sandbox:
            raise ConfigError("the task's program can run sandboxed only with the sandbox on: drop --no-sandbox, "
                              "or --sandbox-reference")


@dataclass(frozen=True)
class Transport:
    """How input sets, outputs and builds travel between the processes."""

    cuda_ipc: bool = True
    """On CUDA, hand the input sets to the candidate's process and its verified outputs to the
    reference process as CUDA IPC handles of copies (evaluate/shared.py) instead of files on
    tmpfs (5 x 256 MiB of outputs: 3.17 s as files, 0.05 s as handles, on an H100). False: files,
    as before. Sets too big for the GPU always travel as files."""
    cache_dir: str = ""
    """Compile cache (load_inline, Triton, CuPy) and baseline timings; "" = $WARPFORGE_CACHE or ~/.cache/warpforge."""


@dataclass(frozen=True)
class EvalConfig:
    """Everything an evaluation is run with: what runs where (its own fields) and four groups;
    `EvalConfig.of(**flat)` and `replace(**flat)` take any field by its flat name."""

    device: Device | None = None
    """None = CUDA when a GPU is visible, else CPU (the `warpforge eval` contract)."""
    size: str | None = None
    """Size preset from the task's WARPFORGE["sizes"]; None = "gpu" on CUDA, "cpu" on CPU."""
    trials: int = 5
    """Correctness trials, each with fresh inputs; 5 is KernelBench's count, our minimum."""
    bench: bool = True
    """Time the candidate and the baselines (`--no-bench` skips it)."""
    profile: bool = True
    """Record which kinds of kernels ran (custom vs library vs PyTorch) with one profiled call."""
    spare_workers: int | None = None
    """Candidate processes a `Judge` keeps started ahead, so their start-up (torch import, CUDA
    context: 4-6 s measured on an H100) overlaps earlier candidates; they are paused
    (SIGSTOP) whenever anything is timed. Each holds a CUDA context (~0.5 GB of GPU memory).
    None = 3 on CUDA, 1 on CPU."""
    cpu_threads: int | None = None
    """Threads of the reference and candidate processes on the CPU, the same for both: a pinned
    count keeps a timing from depending on what else the machine runs (an A/A pair read 0.51-42.7x
    on a loaded 2-core machine with every process taking every core). None = $OMP_NUM_THREADS
    when the user set it, else 1. Not used on CUDA."""

    timing: TimingBudget = field(default_factory=TimingBudget)
    limits: Limits = field(default_factory=Limits)
    safety: Safety = field(default_factory=Safety)
    transport: Transport = field(default_factory=Transport)

    def __post_init__(self) -> None:
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ConfigError(f"cpu_threads must be at least 1, not {self.cpu_threads}")
        if self.device not in (None, "cpu", "cuda"):
            raise ConfigError(f"device must be 'cpu' or 'cuda', not {self.device!r}")
        if self.trials < 1:
            raise ConfigError(f"--trials must be at least 1, not {self.trials}")
        if self.spare_workers is not None and self.spare_workers < 0:
            raise ConfigError(f"spare_workers must be 0 or more, not {self.spare_workers}")

    @classmethod
    def of(cls, **fields: object) -> EvalConfig:
        """An EvalConfig from fields named flat (`EvalConfig.of(device="cpu", rep_ms=20)`), each
        put in its group; a name no group has is a ConfigError."""
        return cls().replace(**fields)

    def replace(self, **fields: object) -> EvalConfig:
        """A copy with fields named flat changed, each in its group (dataclasses.replace for the
        grouped config)."""
        unknown = sorted(set(fields) - set(FIELD_GROUP))
        if unknown:
            raise ConfigError(f"EvalConfig has no field {', '.join(unknown)}: its fields are "
                              f"{', '.join(FIELD_GROUP)}")
        top = {k: v for k, v in fields.items() if FIELD_GROUP[k] == "run"}
        for group in GROUP_TYPES:
            mine = {k: v for k, v in fields.items() if FIELD_GROUP[k] == group}
            if mine:
                top[group] = dataclasses.replace(getattr(self, group), **mine)
        return dataclasses.replace(self, **top)  # type: ignore[arg-type]

    def resolved(self) -> EvalConfig:
        """Fill the automatic fields (device, size, cache dir, compile baseline)."""
        device: Device = self.device or ("cuda" if cuda_available() else "cpu")
        cache = self.transport.cache_dir or os.environ.get("WARPFORGE_CACHE") or os.path.expanduser("~/.cache/warpforge")
        t = self.timing
        return self.replace(
            device=device,
            size=self.size or ("gpu" if device == "cuda" else "cpu"),
            cache_dir=cache,
            compile_baseline=(device == "cuda") if t.compile_baseline is None else t.compile_baseline,
            reuse_baselines=(device == "cuda") if t.reuse_baselines is None else t.reuse_baselines,
            spare_workers=(3 if device == "cuda" else 1) if self.spare_workers is None else self.spare_workers,
            cpu_threads=self.cpu_threads or _user_threads() or 1,
            process_spread=(0.03 if device == "cuda" else 0.25) if t.process_spread is None else t.process_spread,
        )

    def to_dict(self) -> dict[str, object]:
        """Every field, the groups as nested objects (the `config` of a JSON verdict)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> EvalConfig:
        """From `to_dict()` after a JSON round trip, or from the flat dict of results written
        before the fields were grouped."""
        values = flat(d)
        if isinstance(values.get("server_gap_ms"), list):
            values["server_gap_ms"] = tuple(values["server_gap_ms"])  # type: ignore[arg-type]
        return cls.of(**values)


def flat(config: Mapping[str, object]) -> dict[str, object]:
    """A recorded config (a verdict's `config`, an archived run's `eval`) with its groups' fields
    at the top: the same dict whether it was written grouped or, before the groups, flat."""
    out: dict[str, object] = {}
    for key, value in config.items():
        if key in GROUP_TYPES and isinstance(value, Mapping):
            out.update(value)
        else:
            out[key] = value
    return out


GROUP_TYPES: dict[str, type] = {"timing": TimingBudget, "limits": Limits, "safety": Safety, "transport": Transport}
"""EvalConfig's groups: its field of each name holds an object of this class."""
RUN_FIELDS = ("device", "size", "trials", "bench", "profile", "spare_workers", "cpu_threads")
"""EvalConfig's own fields (the `run` group): what is evaluated where."""
# The groups of EvalConfig's fields: the sections of a `--config` file and the option groups of
# every verb that evaluates (cli/common.py). Each field is in exactly one group.
GROUPS: dict[str, tuple[str, ...]] = {"run": RUN_FIELDS,
                                      **{g: tuple(f.name for f in dataclasses.fields(t)) for g, t in GROUP_TYPES.items()}}
"""What each group holds: run (what is evaluated where), timing (the timing budget and method),
limits (what a process may use), safety (the sandbox and the precision bar), transport (how
data and builds travel between the processes)."""
FIELD_GROUP: dict[str, str] = {name: group for group, names in GROUPS.items() for name in names}
"""Each field's group, by its flat name (EvalConfig.of, --config, WARPFORGE_<FIELD>)."""


def cuda_available() -> bool:
    """True when torch sees a CUDA device; imported lazily so `--help` stays fast."""
    import torch

    return bool(torch.cuda.is_available())


def require_cuda(why: str, fix: str) -> None:
    """One sentence when CUDA is needed and torch sees none: `why` says what needed it, `fix`
    what to do (the one check behind every command's --device cuda)."""
    if not cuda_available():
        raise UsageError(f"{why}, but torch sees no CUDA GPU: {fix}")


def _user_threads() -> int | None:
    """$OMP_NUM_THREADS when it is a positive whole number."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None
