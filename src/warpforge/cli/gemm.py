"""`warpforge gemm shapes|tune|bench|table|plot|task|build-cutlass`: the per-shape GEMM track from the command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from warpforge.errors import UsageError


def add_gemm_parser(sub: Any) -> None:
    g = sub.add_parser("gemm", help="per-shape HGEMM: shape sets, tuner, dispatcher table, benchmark, plots")
    gs = g.add_subparsers(dest="gemm_command", required=True)

    def shape_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--shapes", default="llm", help="cudal2 (1,000-shape grid), llm (model projections), or a .csv/.json file")
        p.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
        p.add_argument("--layout", choices=["auto", "nn", "nt"], default="auto",
                       help="nn: b is K x N; nt: b is the N x K weight (x @ W.T). auto: nt for llm, else nn")
        p.add_argument("--sample", type=int, help="only N shapes, spread evenly over the set sorted by FLOPs")

    s = gs.add_parser("shapes", help="list a shape set")
    shape_args(s)
    s.add_argument("--json", action="store_true")

    t = gs.add_parser("tune", help="measure every choice per shape on this GPU and write the dispatcher table")
    shape_args(t)
    t.add_argument("--out", help="folder for tune.jsonl and table.json (default: ~/.cache/warpforge/gemm/<gpu>/)")
    t.add_argument("--families", default="triton,mma",
                   help="our kernel families to try: triton, mma, cutlass (comma list, or none; cutlass: CUTLASS "
                        "wgmma + TMA kernels, Hopper only, built with nvcc from the nvidia-cutlass headers)")
    t.add_argument("--no-cublaslt", action="store_true", help="skip the cuBLASLt algorithms (no nvmath-python)")
    t.add_argument("--lt-variants", type=int, default=2, metavar="N",
                   help="also time the heuristic's first N cuBLASLt algorithms reconfigured (split-K, CTA swizzling); 0: none")
    t.add_argument("--cutlass-variants", type=int, default=2, metavar="N",
                   help="time the N fastest CUTLASS configurations again with other raster orders and swizzles; 0: none")
    t.add_argument("--candidate", action="append", default=[], metavar="FILE",
                   help="also try this candidate kernel file (ModelNew.forward(a, b)) on every shape; repeatable")
    t.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu only for trying the tool (Triton interpreted)")
    t.add_argument("--gpus", help="tune on several GPUs at once: all, or a list such as 0,1,2,3 (one process per GPU, "
                                  "each on its own share of the shapes)")
    t.add_argument("--shard", help="I/N: tune only every N-th shape starting at I (what --gpus runs on each GPU)")
    t.add_argument("--quick", action="store_true", help="short timing budgets and 4 kernels per shape: for trying the tool, not for tables")

    b = gs.add_parser("bench", help="time the dispatcher against torch.matmul, cuBLASLt and torch.compile; write results JSON")
    shape_args(b)
    b.add_argument("--modes", default="offline", help="offline, server, or offline,server")
    b.add_argument("--out", default="benchmarks/results", help="folder for gemm_<gpu>_<set>_<mode>_<date>.json")
    b.add_argument("--compile", type=int, default=0, metavar="N",
                   help="also time torch.compile(mode='max-autotune-no-cudagraphs') on N shapes spread over the set (tens of seconds each)")
    b.add_argument("--no-cublaslt", action="store_true")
    b.add_argument("--lt-variants", type=int, default=2, metavar="N",
                   help="cuBLASLt autotuning also times the first N algorithms reconfigured (split-K, CTA swizzling); 0: none")
    b.add_argument("--table", help="a table.json to dispatch with (sets WARPFORGE_GEMM_TABLE)")
    b.add_argument("--online", action="store_true",
                   help="tune shapes the table has not measured on first use: torch.matmul, cuBLASLt and the nearest "
                        "measured shape's kernel "
                        "(sets WARPFORGE_GEMM_ONLINE=1; about a second per shape; results file *_online_*)")
    b.add_argument("--device", choices=["cuda", "cpu"], default="cuda")

    k = gs.add_parser("task", help="write a task file for one shape, for `warpforge optimize` (LLM or agent kernels)")
    k.add_argument("shape", help="MxNxK, e.g. 4096x4096x4100")
    k.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    k.add_argument("--layout", choices=["nn", "nt"], default="nn")
    k.add_argument("--out", help="file to write (default: stdout)")

    tb = gs.add_parser("table", help="build a dispatcher table from tuning records (e.g. to ship it)")
    tb.add_argument("records", nargs="+", help="tune.jsonl files; where a shape is in several, the last file's record wins")
    tb.add_argument("--out", required=True, help="table.json to write")
    tb.add_argument("--gpu", help="GPU name to take records of (default: the only one in the files)")

    cb = gs.add_parser("build-cutlass", help="build the CUTLASS sm90 libraries that CUTLASS choices run from "
                                             "(about a minute of nvcc each, once; needs nvcc and the [gemm] extra)")
    cb.add_argument("--layouts", default="nn,nt", help="comma-separated: nn (b is K x N), nt (b is the N x K weight)")
    cb.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    cb.add_argument("--jobs", type=int, help="nvcc processes at a time (default: one per CPU core)")
    cb.add_argument("--out", help="folder for the libraries (default: the cache, where the dispatcher looks; another "
                                  "folder is for carrying to a GPU machine, named there in WARPFORGE_CUTLASS_LIB_DIR)")

    p = gs.add_parser("plot", help="heat maps, histograms and tables of benchmark results (static HTML + summary.md)")
    p.add_argument("results", nargs="+", help="gemm_*.json files written by `warpforge gemm bench`")
    p.add_argument("--out", default="warpforge-gemm-report", help="output folder")


def _shapes(args: argparse.Namespace) -> tuple[list[Any], str, int]:
    from warpforge.gemm.shapes import shape_set
    from warpforge.gemm.tune import sample

    full = shape_set(args.shapes, args.dtype)
    layout = args.layout if args.layout != "auto" else ("nt" if args.shapes == "llm" else "nn")
    return sample(full, args.sample), layout, len(full)


def _need_device(device: str) -> None:
    if device == "cuda":
        from warpforge.config import require_cuda

        require_cuda("tuning and benchmarking time kernels on the GPU", "use --device cpu only to try the tool")


def _need_cublaslt(args: argparse.Namespace) -> None:
    """cuBLASLt is part of tuning and of the benchmark unless --no-cublaslt: without nvmath-python
    every shape would be measured without it and the run would not say so until the records
    were read (2026-11-27: 943 shapes tuned so on a machine the wheel was not carried to)."""
    import importlib.util

    if args.device == "cuda" and not args.no_cublaslt and importlib.util.find_spec("nvmath") is None:
        raise UsageError("cuBLASLt (algorithm choices and baselines) needs nvmath-python, which is not installed: "
                         "pip install 'warpforge[gemm]' (on an offline machine, from its wheel), or pass "
                         "--no-cublaslt to measure without it")


def _need_cutlass(args: argparse.Namespace, layout: str) -> None:
    """The cutlass family needs a library per configuration: carried ($WARPFORGE_CUTLASS_LIB_DIR),
    cached, or built here from the headers. Where none can be had, stop before tuning instead of
    recording the family as failed on every shape (2026-11-27: 937 shapes tuned so on a GPU machine
    with carried libraries and no headers). Finding one library (building it if need be, which
    the first shape would do anyway) is the check."""
    if args.device != "cuda" or "cutlass" not in args.families.split(","):
        return
    from warpforge.gemm import cutlass_build, cutlass_sm90

    try:
        cutlass_build.build(cutlass_sm90.configs()[0], args.dtype, layout)
    except UsageError as exc:
        raise UsageError(f"the cutlass family cannot run here: {exc}. Carry built libraries in "
                         "$WARPFORGE_CUTLASS_LIB_DIR (docs/gemm.md), or drop cutlass from --families") from None


def _progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    TextColumn("{task.fields[last]}"), transient=False)


def cmd_gemm(args: argparse.Namespace) -> int:
    return {"shapes": _cmd_shapes, "tune": _cmd_tune, "bench": _cmd_bench, "table": _cmd_table,
            "plot": _cmd_plot, "task": _cmd_task, "build-cutlass": _cmd_build_cutlass}[args.gemm_command](args)


def _cmd_task(args: argparse.Namespace) -> int:
    from warpforge.gemm.task_file import task_source
    from warpforge.gemm.shapes import GemmShape

    try:
        m, n, k = (int(v) for v in args.shape.lower().split("x"))
    except ValueError:
        raise UsageError(f"shape {args.shape!r} is not MxNxK (e.g. 4096x4096x4100)") from None
    text = task_source(GemmShape(m, n, k, args.dtype), args.layout)
    if args.out:
        Path(args.out).write_text(text)
        print(f"task -> {args.out}; search kernels with: warpforge optimize {args.out} --llm ...; "
              f"then: warpforge gemm tune --shapes FILE.csv --candidate BEST.py", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def _cmd_shapes(args: argparse.Namespace) -> int:
    shapes, layout, total = _shapes(args)
    if args.json:
        print(json.dumps([{"M": s.M, "N": s.N, "K": s.K, "dtype": s.dtype, "source": s.source} for s in shapes]))
    else:
        for s in shapes:
            print(f"{s.M:6d} {s.N:6d} {s.K:6d}  {s.dtype}  {s.source}{'' if s.aligned else '  (not a multiple of 8)'}")
        print(f"{len(shapes)} of {total} shapes, layout {layout}", file=sys.stderr)
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from warpforge.gemm import dispatch, families as registry
    from warpforge.config import TimingBudget
    from warpforge.gemm.tune import TuneSettings, build_table, device_name, read_folder, sweep

    _need_device(args.device)
    _need_cublaslt(args)
    shapes, layout, total = _shapes(args)
    _need_cutlass(args, layout)
    if args.gpus:
        return _tune_on_gpus(args)
    shard = ""
    if args.shard:
        index, count = _parse_shard(args.shard)
        shapes, shard = shapes[index::count], f".shard{index}of{count}"
    families = tuple(f for f in args.families.split(",") if f and f != "none")
    unknown = set(families) - set(registry.searched())
    if unknown:
        raise UsageError(f"unknown kernel families {sorted(unknown)}: use {', '.join(registry.searched())} or none")
    gpu = device_name(args.device)
    out = Path(args.out) if args.out else dispatch.cache_dir(gpu)
    records = out / f"tune{shard}.jsonl"
    for path in args.candidate:
        if not Path(path).is_file():
            raise UsageError(f"--candidate {path} does not exist")
    settings = TuneSettings(families=families, cublaslt=not args.no_cublaslt, candidates=tuple(args.candidate),
                            lt_variants=args.lt_variants, cutlass_variants=args.cutlass_variants)
    if args.quick:
        settings.max_configs = 4
        settings.screen = TimingBudget(warmup_ms=1.0, rep_ms=2.0, min_reps=3, max_reps=5)
        settings.final = TimingBudget(warmup_ms=1.0, rep_ms=5.0, min_reps=5, max_reps=10)
    print(f"tuning {len(shapes)} of {total} {args.shapes} shapes ({layout}, {args.dtype}) on {gpu}; "
          f"records -> {records} (re-running resumes)", file=sys.stderr)
    wins, failed = 0, 0
    with _progress() as bar:
        task = bar.add_task("tune", total=len(shapes), last="")
        for shape, rec in sweep(shapes, layout, args.device, records, settings):
            if rec is not None and "error" in rec:
                failed += 1
                last = f"{shape.M}x{shape.N}x{shape.K}: failed ({rec['error'][:60]})"
            elif rec is not None:
                wins += rec["choice"] != "torch"
                ratio = rec["baselines"]["torch"]["ms"] / rec["choice_ms"]
                last = f"{shape.M}x{shape.N}x{shape.K}: {rec['choice']} {ratio:.2f}x"
            else:
                last = f"{shape.M}x{shape.N}x{shape.K}: already tuned"
            bar.update(task, advance=1, last=last)
    if failed:
        print(f"{failed} shapes failed (their records in {records} say why, e.g. out of GPU memory); they are left to "
              "torch.matmul, and re-running the same command tries them again", file=sys.stderr)
    tuned = read_folder(out)
    if not any("choice" in r and r.get("gpu") == gpu for r in tuned):
        print(f"warpforge: no shape was tuned on {gpu}, so no table was written", file=sys.stderr)
        return 1
    table = build_table(tuned, gpu)
    _write_table(out / "table.json", table)
    dispatch.reset()
    print(f"{wins} newly tuned shapes beat torch.matmul; table with {len(table['entries'])} shapes -> {out / 'table.json'}",
          file=sys.stderr)
    return 0


def _write_table(path: Path, table: dict[str, Any]) -> None:
    """Whole or not at all: shards of a multi-GPU run write the same table as they finish."""
    import os

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table, indent=1))
    os.replace(tmp, path)


def _parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(v) for v in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard takes I/N (e.g. 0/4), got {text!r}") from None
    if not 0 <= index < count:
        raise UsageError(f"--shard {text}: I must be in 0..N-1")
    return index, count


def _tune_on_gpus(args: argparse.Namespace) -> int:
    """One `gemm tune --shard i/N` process per GPU (pinned with CUDA_VISIBLE_DEVICES), then one table
    from all their records. Each GPU times its own shapes, so no two timings share a GPU."""
    import os
    import subprocess

    import torch

    from warpforge.gemm import dispatch
    from warpforge.gemm.tune import build_table, device_name, read_folder

    if args.device != "cuda":
        raise UsageError("--gpus needs --device cuda")
    if args.shard:
        raise UsageError("--gpus picks the shards itself: drop --shard")
    ids = [str(i) for i in range(torch.cuda.device_count())] if args.gpus == "all" else \
        [g.strip() for g in args.gpus.split(",") if g.strip()]
    if not ids:
        raise UsageError("--gpus names no GPU")
    gpu = device_name("cuda")
    out = Path(args.out) if args.out else dispatch.cache_dir(gpu)
    child_args = ["gemm", "tune", "--shapes", args.shapes, "--dtype", args.dtype, "--layout", args.layout,
                  "--families", args.families, "--device", "cuda", "--out", str(out)]
    child_args += ["--sample", str(args.sample)] if args.sample else []
    child_args += ["--no-cublaslt"] * args.no_cublaslt + ["--quick"] * args.quick + ["--lt-variants", str(args.lt_variants)]
    child_args += ["--cutlass-variants", str(args.cutlass_variants)]
    for path in args.candidate:
        child_args += ["--candidate", str(Path(path).resolve())]
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for i, gid in enumerate(ids):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gid}
        log = open(out / f"tune.gpu{gid}.log", "w")
        cmd = [sys.executable, "-m", "warpforge.cli", *child_args, "--shard", f"{i}/{len(ids)}"]
        procs.append((gid, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    print(f"tuning on GPUs {', '.join(ids)} ({len(ids)} shards); logs in {out}/tune.gpu*.log", file=sys.stderr)
    failed = _wait_shards(procs)
    records = read_folder(out)
    if any("choice" in r and r.get("gpu") == gpu for r in records):
        table = build_table(records, gpu)
        _write_table(out / "table.json", table)
        print(f"table with {len(table['entries'])} shapes -> {out / 'table.json'}", file=sys.stderr)
    if failed:
        print(f"warpforge: tuning failed on GPU {', '.join(failed)} (see its log); re-run to resume", file=sys.stderr)
        return 1
    return 0


def _wait_shards(procs: list[tuple[str, Any, Any]]) -> list[str]:
    """Wait for every shard process; the GPU ids whose process failed. If this process is stopped
    (Ctrl-C, or `timeout`'s SIGTERM, which reaches only this process), the shards stop with it:
    left running they would go on timing beside whatever the GPUs are given next. A record cut
    short by the stop is skipped when the folder is read back, and its shape is tuned again."""
    import signal
    import subprocess

    from warpforge.cli.common import exit_on_sigterm

    previous = exit_on_sigterm()
    try:
        return [gid for gid, proc, _ in procs if proc.wait() != 0]
    finally:
        signal.signal(signal.SIGTERM, previous)
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, log in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def _cmd_bench(args: argparse.Namespace) -> int:
    import os

    from warpforge.gemm.bench import MODES, BenchSettings, bench

    _need_device(args.device)
    _need_cublaslt(args)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or set(modes) - set(MODES):
        raise UsageError(f"--modes takes offline, server or both (comma-separated), got {args.modes!r}")
    if args.table:
        os.environ["WARPFORGE_GEMM_TABLE"] = args.table
    if args.online:
        from warpforge.gemm import dispatch

        os.environ[dispatch.ONLINE] = "1"
    shapes, layout, total = _shapes(args)
    settings = BenchSettings(modes=modes, cublaslt=not args.no_cublaslt, compile_shapes=args.compile,
                             lt_variants=args.lt_variants)
    started = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task("bench", total=len(shapes), last="")

        def step(shape: Any, row: dict[str, Any] | None) -> None:
            last = "already measured" if row is None else f"{row['choice']} {row['speedup_vs_torch'] or 0:.2f}x vs torch"
            bar.update(task, advance=1, last=f"{shape.M}x{shape.N}x{shape.K}: {last}")

        paths = bench(shapes, args.shapes, layout, args.device, Path(args.out), settings, total, step)
    print(f"{len(shapes)} shapes in {time.perf_counter() - started:.0f} s -> " + ", ".join(map(str, paths)), file=sys.stderr)
    return 0


def _cmd_table(args: argparse.Namespace) -> int:
    from warpforge import jsonl
    from warpforge.gemm.tune import build_table

    missing = [path for path in args.records if not Path(path).is_file()]
    if missing:
        raise UsageError(f"no such records file: {', '.join(missing)} (a tune.jsonl that `warpforge gemm tune` wrote)")
    records = [r for path in args.records for r in jsonl.read(path)]
    named = ", ".join(args.records)
    gpus = sorted({r.get("gpu", "") for r in records})
    if not records:
        raise UsageError(f"{named}: no tuning records")
    gpu = args.gpu or (gpus[0] if len(gpus) == 1 else None)
    if gpu is None:
        raise UsageError(f"{named}: records of several GPUs ({', '.join(gpus)}): pick one with --gpu")
    table = build_table(records, gpu)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(table, indent=1))
    print(f"{len(table['entries'])} shapes for {gpu} -> {args.out}", file=sys.stderr)
    return 0


def _cmd_build_cutlass(args: argparse.Namespace) -> int:
    from warpforge.gemm import cutlass_build, cutlass_sm90
    from warpforge.gemm.layout import LAYOUTS

    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    if not layouts or any(x not in LAYOUTS for x in layouts):
        raise UsageError(f"--layouts {args.layouts!r}: a comma-separated list of {', '.join(LAYOUTS)}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: at least 1")
    cutlass_build.include_dir()  # the headers first: a clear error, not one per library
    instances = [(cfg, args.dtype, lay) for lay in layouts for cfg in cutlass_sm90.configs()]
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task("build", total=len(instances), last="")

        def step(b: Any) -> None:
            bar.update(task, advance=1, last=f"{b.cfg.name} {b.layout}: {'failed' if b.error else f'{b.seconds:.0f} s'}")

        built = cutlass_build.build_all(instances, jobs=args.jobs, out_dir=out, on_built=step)
    failed = [b for b in built if b.error]
    where = out or cutlass_build.cache_dir()
    print(f"{len(built) - len(failed)} of {len(built)} CUTLASS libraries ready in {where} "
          f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    for b in failed:
        print(f"  {b.cfg.name} {b.dtype} {b.layout}: {b.error.splitlines()[0] if b.error else ''}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from warpforge.gemm.plots import render

    index = render([Path(p) for p in args.results], Path(args.out))
    print(f"report -> {index}", file=sys.stderr)
    return 0
