"""What every `warpforge` command shares: the evaluation and sandbox options, the EvalConfig they
make (with the one --device cuda check), and task lookup by name or folder. Imports nothing of
the other command modules, so each of them can import it without a cycle."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warpforge import EvalConfig
    from warpforge.task import Task


def exit_on_sigterm() -> Any:
    """Make SIGTERM (what `timeout` and job schedulers send) a SystemExit(128 + 15), so that
    finally clauses stop what a command started (`gemm tune --gpus`'s shard processes) instead of
    leaving them running. Returns the handler it replaced; a no-op off the main thread, where
    Python cannot install one. Not installed for every command: EvalPool's exit finishes the
    queued jobs, which a stop must not wait for."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return signal.getsignal(signal.SIGTERM)

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def add_sandbox_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-sandbox", action="store_true",
                   help="run candidates without the OS sandbox (only where bubblewrap cannot run); every result, "
                        "archive row and report page then says unsandboxed")


def sandbox_from_args(args: argparse.Namespace) -> bool:
    """True unless --no-sandbox; stops with one sentence (exit 2) when the sandbox cannot start here."""
    if getattr(args, "no_sandbox", False):
        print("warpforge: warning: --no-sandbox: candidates run unsandboxed and their results are marked so",
              file=sys.stderr)
        return False
    from warpforge.evaluate.jail import require

    require()
    return True


def add_eval_options(p: argparse.ArgumentParser, device_help: str | None = None) -> None:
    """The evaluation options of every verb that evaluates candidates, one option group per
    group of EvalConfig (config.GROUPS), and --config FILE for all of them."""
    p.add_argument("--config", metavar="FILE",
                   help="a TOML file of evaluation settings, one [section] per option group below "
                        "(docs/reference.md, 'Configuration file'); the environment (WARPFORGE_<KEY>) and these "
                        "flags override it")
    run = p.add_argument_group("evaluation: what runs where [run]")
    run.add_argument("--device", choices=["cpu", "cuda"],
                     help=device_help or "default: cuda when a GPU is visible, else cpu")
    run.add_argument("--size", help="size preset of the task (default: gpu on cuda, cpu on cpu)")
    run.add_argument("--trials", type=int, metavar="N", help="correctness trials with fresh inputs (default 5)")
    run.add_argument("--no-bench", dest="bench", action="store_false", default=None, help="check correctness only")
    run.add_argument("--no-profile", dest="profile", action="store_false", default=None,
                     help="skip recording which kernels ran")
    run.add_argument("--cpu-threads", type=int, metavar="N",
                     help="threads of the reference and the candidate on the cpu, the same for both "
                          "(default: $OMP_NUM_THREADS, else 1)")
    timing = p.add_argument_group("evaluation: the timing budget and method [timing]")
    timing.add_argument("--mode", choices=["offline", "server"],
                        help="offline: back-to-back calls (default); server: random idle gaps before each call")
    timing.add_argument("--rep-ms", type=float, metavar="MS",
                        help="timed calls' budget per timing run in milliseconds (default 100, as triton's do_bench; "
                             "each paired round gets half); smaller is faster, and wider: check it with an A/A "
                             "(warpforge calibrate) on your GPU before trusting it")
    timing.add_argument("--warmup-ms", type=float, metavar="MS", help="warm-up budget per timing run (default 25)")
    timing.add_argument("--paired-rounds", type=int, metavar="N",
                        help="rounds of paired timing, reference and candidate in turn (default 5; 0: time the "
                             "reference once before the candidate, for tasks whose inputs fit the GPU only once)")
    timing.add_argument("--sync-floor", choices=["matched", "idle"],
                        help="the sync round trip taken off each timed GPU call: matched to the call's length, "
                             "measured after each call (default), or one idle measurement per timing run")
    timing.add_argument("--compile-baseline", action=argparse.BooleanOptionalAction,
                        help="also time torch.compile (default: on for cuda, off for cpu)")
    timing.add_argument("--fresh-baselines", dest="reuse_baselines", action="store_false", default=None,
                        help="re-time the eager / torch.compile baselines instead of reusing this machine's "
                             "cached ones")
    limits = p.add_argument_group("evaluation: what a process may use [limits]")
    limits.add_argument("--timeout", dest="timeout_s", type=float, metavar="SECONDS",
                        help="seconds the candidate process may run (default 600)")
    limits.add_argument("--mem-limit-gb", type=float, metavar="GB",
                        help="host memory the candidate process may hold (default 16, plus its input sets)")
    limits.add_argument("--sets-memory-gb", type=float, metavar="GB",
                        help="memory the input sets and their float64 outputs may take; a bigger task gets fewer "
                             "sets, at least 2 checked + 1 timed (default: 30%% of the GPU's memory; no cap on cpu)")
    safety = p.add_argument_group("evaluation: the sandbox and the precision bar [safety]")
    safety.add_argument("--no-sandbox", dest="sandbox", action="store_false", default=None,
                        help="run candidates without the OS sandbox (only where bubblewrap cannot run); every result, "
                             "archive row and report page then says unsandboxed")
    safety.add_argument("--sandbox-reference", action="store_true", default=None,
                        help="run the task's own program in the sandbox too, for a task file you did not write (it "
                             "sees no host files, network or keys, and shares no cached baseline timings)")
    safety.add_argument("--allow-tf32", action="store_true", default=None,
                        help="accept TF32 accuracy for fp32 tasks (opt-in)")
    safety.add_argument("--strict-fp32", action="store_true", default=None,
                        help="true fp32: TF32 off (matmuls and cuDNN) in the reference's and the candidate's "
                             "processes, the bar calibrated from that reference (default: PyTorch's defaults, where "
                             "cuDNN convolutions use TF32)")
    transport = p.add_argument_group("evaluation: how data travels between the processes [transport]")
    transport.add_argument("--cuda-ipc", action=argparse.BooleanOptionalAction,
                           help="on cuda, hand input sets and verified outputs between the reference's and the "
                                "candidate's processes as CUDA IPC handles of copies (default); --no-cuda-ipc: as "
                                "files on tmpfs")


EVAL_FLAGS = ("device", "size", "trials", "bench", "profile", "cpu_threads", "mode", "rep_ms", "warmup_ms",
              "paired_rounds", "sync_floor", "compile_baseline", "reuse_baselines", "timeout_s", "mem_limit_gb",
              "sets_memory_gb", "sandbox", "sandbox_reference", "allow_tf32", "strict_fp32", "cuda_ipc")
"""The EvalConfig fields add_eval_options has a flag for (each flag's dest is its field)."""


def tasks_of(names: list[str]) -> list[Task]:
    """Every task the names give (files, folders, suite names and levels), each once."""
    from warpforge.task import tasks_named

    return list({t.name: t for name in names for t in tasks_named(name)}.values())


def config_from_args(args: argparse.Namespace, check_device: bool = True, **fixed: Any) -> EvalConfig:
    """The EvalConfig of `add_eval_options`' flags over --config FILE and the environment
    (config_sources.py), with `fixed` (what the verb itself decides) on top; stops with one
    sentence when the sandbox cannot start, and (with `check_device`) for cuda without a GPU."""
    from warpforge.config_sources import load_config

    flags = {name: getattr(args, name) for name in EVAL_FLAGS if getattr(args, name, None) is not None}
    config = load_config(getattr(args, "config", None), {**flags, **fixed})
    if not config.safety.sandbox:
        print("warpforge: warning: the sandbox is off (--no-sandbox): candidates run unsandboxed and their results "
              "are marked so", file=sys.stderr)
    else:
        from warpforge.evaluate.jail import require

        require()
    if config.device == "cuda" and check_device:
        from warpforge.config import require_cuda

        require_cuda("the device is cuda (--device, WARPFORGE_DEVICE or --config)",
                     "pass --device cpu or install a CUDA build of torch")
    return config
