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


def add_eval_options(p: argparse.ArgumentParser) -> None:
    """The evaluation options `warpforge eval` and `warpforge eval-batch` share."""
    add_sandbox_option(p)
    p.add_argument("--sandbox-reference", action="store_true",
                   help="run the task's own program in the sandbox too, for a task file you did not write (it sees "
                        "no host files, network or keys, and shares no cached baseline timings)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when a GPU is visible, else cpu")
    p.add_argument("--mode", choices=["offline", "server"], default="offline",
                   help="offline: back-to-back calls; server: random idle gaps before each call")
    p.add_argument("--trials", type=int, default=5, help="correctness trials with fresh inputs (default 5)")
    p.add_argument("--timeout", type=float, default=None, help="seconds the candidate process may run (default 600)")
    p.add_argument("--no-bench", action="store_true", help="check correctness only")
    p.add_argument("--size", help="size preset of the task (default: gpu on cuda, cpu on cpu)")
    p.add_argument("--allow-tf32", action="store_true", help="accept TF32 accuracy for fp32 tasks (opt-in)")
    p.add_argument("--strict-fp32", action="store_true",
                   help="true fp32: TF32 off (matmuls and cuDNN) in the reference's and the candidate's processes, "
                        "the bar calibrated from that reference (default: PyTorch's defaults, where cuDNN "
                        "convolutions use TF32)")
    p.add_argument("--compile-baseline", action=argparse.BooleanOptionalAction, default=None,
                   help="also time torch.compile (default: on for cuda, off for cpu)")
    p.add_argument("--no-profile", action="store_true", help="skip recording which kernels ran")
    p.add_argument("--paired-rounds", type=int, default=None, metavar="N",
                   help="rounds of paired timing, reference and candidate in turn (default 5; 0: time the "
                        "reference once before the candidate, for tasks whose inputs fit the GPU only once)")
    p.add_argument("--rep-ms", type=float, default=None, metavar="MS",
                   help="timed calls' budget per timing run in milliseconds (default 100, as triton's do_bench; "
                        "each paired round gets half); smaller is faster, and wider: check it with an A/A "
                        "(warpforge calibrate) on your GPU before trusting it")
    p.add_argument("--warmup-ms", type=float, default=None, metavar="MS", help="warm-up budget per timing run (default 25)")
    p.add_argument("--sync-floor", choices=["matched", "idle"], default=None,
                   help="the sync round trip taken off each timed GPU call: matched to the call's length, "
                        "measured after each call (default), or one idle measurement per timing run")
    p.add_argument("--fresh-baselines", action="store_true",
                   help="re-time the eager / torch.compile baselines instead of reusing this machine's cached ones")
    p.add_argument("--cpu-threads", type=int, default=None, metavar="N",
                   help="threads of the reference and the candidate on the cpu, the same for both "
                        "(default: $OMP_NUM_THREADS, else 1)")
    p.add_argument("--cuda-ipc", action=argparse.BooleanOptionalAction, default=True,
                   help="on cuda, hand input sets and verified outputs between the reference's and the candidate's "
                        "processes as CUDA IPC handles of copies (default); --no-cuda-ipc: as files on tmpfs")
    p.add_argument("--sets-memory-gb", type=float, default=None, metavar="GB",
                   help="memory the input sets and their float64 outputs may take; a bigger task gets fewer sets, "
                        "at least 2 checked + 1 timed (default: 30%% of the GPU's memory; no cap on cpu)")


def tasks_of(names: list[str]) -> list[Task]:
    """Every task the names give (files, folders, suite names and levels), each once."""
    from warpforge.task import tasks_named

    return list({t.name: t for name in names for t in tasks_named(name)}.values())


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    """The EvalConfig of `add_eval_options`' flags; a clear error for --device cuda without a GPU."""
    from warpforge import EvalConfig

    config = EvalConfig(
        device=args.device, size=args.size, trials=args.trials, bench=not args.no_bench, mode=args.mode,
        allow_tf32=args.allow_tf32, strict_fp32=args.strict_fp32, compile_baseline=args.compile_baseline,
        profile=not args.no_profile,
        reuse_baselines=False if args.fresh_baselines else None, sets_memory_gb=args.sets_memory_gb,
        sandbox=sandbox_from_args(args), sandbox_reference=args.sandbox_reference, cpu_threads=args.cpu_threads, cuda_ipc=args.cuda_ipc,
        **({"paired_rounds": args.paired_rounds} if args.paired_rounds is not None else {}),
        **({"sync_floor": args.sync_floor} if args.sync_floor is not None else {}),
        **({"rep_ms": args.rep_ms} if args.rep_ms is not None else {}),
        **({"warmup_ms": args.warmup_ms} if args.warmup_ms is not None else {}),
        **({"timeout_s": args.timeout} if args.timeout is not None else {}),
    )
    if config.device == "cuda":
        from warpforge.config import require_cuda

        require_cuda("--device cuda was given", "drop --device or install a CUDA build of torch")
    return config
