"""`warpforge model profile|extract|apply|prove|optimize|export`: a whole model from a spec file (docs/models.md).

export: the verified kernels as an installable package (cli/model_export.py, model/export.py).

optimize: all of it as one resumable command (model/optimize.py), the loop being `warpforge optimize`'s.
prove: apply, then check the patched model end to end (model/proof.py).
apply: patch the archive's verified kernels of seams.json's tasks into the model (model/apply.py).
profile: build the model, time each served regime by module, rank the seams (table on stderr,
profile.json and profile.html in --out). extract: one KernelBench-format task per top seam, with
seams.json and gemm_shapes.json, from a profile.json (--profile) or from a profile it runs first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from warpforge.errors import UsageError


def add_model_parser(sub: Any) -> None:
    p = sub.add_parser("model", help="whole models: profile a model spec, extract its hot seams as tasks",
                       description="Work on a whole model described by a spec file (TOML, docs/models.md).")
    verbs = p.add_subparsers(dest="model_command", required=True)
    prof = verbs.add_parser("profile", help="time each regime by module and rank the seams",
                            description="Build the spec's model (random seeded weights or its state dict), capture "
                                        "it, time each regime's forward by module and rank the seams by time share x "
                                        "roofline headroom, with each one's Amdahl bound.")
    _common(prof)
    extract = verbs.add_parser("extract", help="write one KernelBench-format task per top seam",
                               description="Write a task for each of the top N seams (the module's own forward, "
                                           "inputs drawn like the model's activations at every regime), "
                                           "seams.json and gemm_shapes.json. Each task is checked against the "
                                           "model's own module before it is kept.")
    _common(extract)
    extract.add_argument("--top", type=int, default=5, metavar="N", help="tasks to write (default 5)")
    extract.add_argument("--seam", action="append", metavar="ID",
                         help="extract this seam (an id of the profile's table, e.g. LlamaRMSNorm) instead of the top N; "
                              "repeat for more")
    extract.add_argument("--profile", metavar="PROFILE_JSON",
                         help="rank from this profile.json (e.g. one made on a GPU); default: profile first on --device")
    ap = verbs.add_parser("apply", help="patch the archive's verified kernels into the model, per instance",
                          description="Build the spec's model and give each module of each seam in seams.json the "
                                      "archive's best verified kernel of its task, as a torch.library custom op "
                                      "behind a per-instance forward that falls back (and counts it) on any call "
                                      "outside the verified shapes, dtypes and device; then run one forward at the "
                                      "cpu regime and report what the kernels served.")
    ap.add_argument("spec", help="the model spec (.toml)")
    ap.add_argument("--archive", required=True, metavar="DB", help="the archive holding the verified kernels")
    ap.add_argument("--seams", required=True, metavar="SEAMS_JSON", help="the seams.json that `model extract` wrote")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when a GPU is visible, else cpu")
    ap.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    pv = verbs.add_parser("prove", help="prove the patched model: correct, engaged, compilable, exportable, timed",
                          description="Apply the archive's verified kernels (as `model apply`), then check the patched "
                                      "model against a float64 copy of the original at each served regime (the cpu "
                                      "regime on the CPU) within the evaluator's bar, that every applied seam served "
                                      "calls with no fallback, that torch.compile(fullgraph=True) and a torch.export "
                                      "save/load round trip run, and time it against eager in paired rounds after an "
                                      "A/A (reported, never required). Exit 0 when every required check passes.")
    pv.add_argument("spec", help="the model spec (.toml)")
    pv.add_argument("--archive", required=True, metavar="DB", help="the archive holding the verified kernels")
    pv.add_argument("--seams", required=True, metavar="SEAMS_JSON", help="the seams.json that `model extract` wrote")
    pv.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when a GPU is visible, else cpu")
    pv.add_argument("--out", metavar="DIR", help="write proof.json here (created if missing)")
    pv.add_argument("--rounds", type=int, default=5, help="paired timing rounds (default 5)")
    pv.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    opt = verbs.add_parser("optimize", help="profile, extract, optimise, apply and prove: one resumable command",
                           description="Profile the spec's model, extract its top seams as tasks, optimise each with "
                                       "the LLM (the loop of `warpforge optimize`, every attempt in --archive), apply "
                                       "the verified kernels and prove the patched model (as `model prove`). Run the "
                                       "same command again to resume: finished stages are skipped, and each task's "
                                       "run continues from the archive. Exit 0 when a kernel was applied and the "
                                       "proof passed, 1 otherwise.")
    opt.add_argument("spec", help="the model spec (.toml)")
    opt.add_argument("--out", required=True, metavar="DIR",
                     help="folder of the profile, the tasks, seams.json, proof.json and the summary (created if "
                          "missing); the same DIR resumes")
    opt.add_argument("--top", type=int, default=5, metavar="N", help="seams to extract and optimise (default 5)")
    opt.add_argument("--seam", action="append", metavar="ID",
                     help="optimise this seam (an id of the profile's table) instead of the top N; repeat for more")
    opt.add_argument("--iters", type=int, default=5, help="the profile's timed forwards per regime (default 5)")
    opt.add_argument("--no-export", action="store_true", help="profile without the torch.export(strict=False) capture")
    opt.add_argument("--rounds", type=int, default=5, help="the proof's paired timing rounds (default 5)")
    from warpforge.cli.optimize import add_search_options

    add_search_options(opt)
    from warpforge.cli.model_export import add_export_parser

    add_export_parser(verbs)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="the model spec (.toml)")
    p.add_argument("--out", required=True, help="folder to write into (created if missing)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when a GPU is visible, else cpu")
    p.add_argument("--iters", type=int, default=5, help="timed forwards per regime (default 5; each module's fastest is kept)")
    p.add_argument("--no-export", action="store_true",
                   help="skip the torch.export(strict=False) capture (its op lists and the exportability check)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")


def cmd_model(args: argparse.Namespace) -> int:
    from warpforge.model.profile import default_device
    from warpforge.model.spec import load_spec

    if args.model_command == "export":  # (no device: export builds nothing and runs no kernel)
        from warpforge.cli.model_export import cmd_export

        return cmd_export(args)
    spec = load_spec(args.spec)
    device = args.device or default_device()
    if device == "cuda":
        from warpforge.config import require_cuda

        require_cuda("--device cuda was given", "drop --device or install a CUDA build of torch")
    if args.model_command == "apply":
        return _apply(args, spec, device)
    if args.model_command == "prove":
        return _prove(args, spec, device)
    if args.model_command == "optimize":
        return _optimize(args, spec, device)
    if args.iters < 1:
        raise UsageError("--iters must be at least 1")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out} ({exc.strerror}): pick a writable --out") from None
    if args.model_command == "profile":
        return _profile(args, spec, device, out)
    return _extract(args, spec, device, out)


def _profile(args: argparse.Namespace, spec: Any, device: str, out: Path) -> int:
    from warpforge.model.profile import profile_model, write
    from warpforge.model.report import print_table

    print(f"warpforge model profile: {spec.name} on {device}, {len(spec.regimes)} regimes", file=sys.stderr)
    profile = profile_model(spec, device, iters=args.iters, export=not args.no_export)
    json_path, html_path = write(profile, out)
    data = profile.to_dict()
    print_table(data)
    print(f"wrote {json_path} and {html_path}", file=sys.stderr)
    if args.json:
        print(json.dumps(data))
    return 0


def _extract(args: argparse.Namespace, spec: Any, device: str, out: Path) -> int:
    from warpforge.model import build as builder
    from warpforge.model.extract import extract
    from warpforge.model.profile import profile_model, read, write
    from warpforge.model.report import print_table

    if args.top < 1:
        raise UsageError("--top must be at least 1")
    built = builder.build(spec)
    if args.profile:
        data = read(Path(args.profile))
        if data.get("model") != spec.name:
            print(f"warning: {args.profile} profiles {data.get('model')!r}, the spec names {spec.name!r}", file=sys.stderr)
    else:
        print(f"warpforge model extract: profiling {spec.name} on {device} first", file=sys.stderr)
        profile = profile_model(spec, device, iters=args.iters, export=not args.no_export, built=built)
        write(profile, out)
        data = profile.to_dict()
        print_table(data)
    result = extract(spec, data, args.top, out, built=built, device=device, only=args.seam)
    for row in result.tasks:
        print(f"wrote {out / row['task']}  ({row['seam']}, {len(row['paths'])} instances, at most "
              f"{100 * row['bound']:.1f} % of the forward)", file=sys.stderr)
    if not result.tasks and not result.skipped:
        print("no LLM seams to extract: every seam of this model is a GEMM (for the GEMM dispatcher)", file=sys.stderr)
    for row in result.skipped:
        print(f"skipped {row['seam']}: {row['reason']}", file=sys.stderr)
    print(f"wrote {out / 'seams.json'} and {out / 'gemm_shapes.json'} ({len(result.gemm)} GEMM seams, for the "
          f"GEMM dispatcher); check the tasks with: warpforge calibrate {out / 'tasks'}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(spec, data)))
    return 0 if result.tasks else 1


def _apply(args: argparse.Namespace, spec: Any, device: str) -> int:
    import torch

    from warpforge.model import build as builder
    from warpforge.model.apply import apply

    built = builder.build(spec)
    model = built.model.to(device)
    model, report = apply(model, args.archive, args.seams)
    call_args, call_kwargs = builder.inputs(built, spec.cpu_regime, device, seed=spec.seed)
    with torch.no_grad():
        model(*call_args, **call_kwargs)
    for s in report.seams:
        if s.skipped:
            print(f"{s.seam}: not applied: {s.skipped}", file=sys.stderr)
            continue
        speed = "not timed" if s.speedup is None else f"{s.speedup:.2f}x vs eager"
        print(f"{s.seam}: kernel #{s.attempt_id} ({speed}, {s.device}) as {s.op} at {len(s.paths)} modules; one "
              f"forward at the cpu regime {spec.cpu_regime.axes}: {s.served} calls served, {s.fallbacks} fallbacks",
              file=sys.stderr)
    if args.json:
        print(report.to_json())
    return 0 if report.applied else 1


def _prove(args: argparse.Namespace, spec: Any, device: str) -> int:
    from warpforge.model.proof import prove, write

    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    report = prove(spec, args.archive, args.seams, device=device, rounds=args.rounds)
    for s in report.apply["seams"]:
        if s["skipped"]:
            print(f"{s['seam']}: not applied: {s['skipped']}", file=sys.stderr)
    for c in report.checks:
        mark = ("PASS" if c.passed else "FAIL") if c.required else "INFO"
        print(f"{mark} {c.name}: {c.detail or 'ok'}", file=sys.stderr)
    if args.out:
        out = Path(args.out)
        try:
            print(f"wrote {write(report, out)}", file=sys.stderr)
        except OSError as exc:
            raise UsageError(f"cannot write into {out} ({exc.strerror}): pick a writable --out") from None
    if args.json:
        print(report.to_json())
    return 0 if report.passed else 1


def _optimize(args: argparse.Namespace, spec: Any, device: str) -> int:
    """Check every option before the first stage (a profile can take minutes), then run them all."""
    from warpforge.cli.common import config_from_args
    from warpforge.cli.optimize import NO_LLM, _prices, cmd_optimize
    from warpforge.errors import ConfigError
    from warpforge.model.optimize import Request, run
    from warpforge.propose.llm import LLMClient, parse_model_specs
    from warpforge.search.loop import Budget, OptimizeConfig

    for flag, value in (("--top", args.top), ("--iters", args.iters), ("--rounds", args.rounds)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1")
    llm = args.llm or [s for s in os.environ.get("WARPFORGE_LLM", "").split(",") if s.strip()]
    if not llm:
        raise ConfigError(NO_LLM)
    LLMClient(parse_model_specs(llm, args.base_url, _prices(args.price))).check()
    args.device = device  # one device for every stage
    eval_config = config_from_args(args)  # the sandbox, --config and the device, checked now
    OptimizeConfig(strategy=args.strategy, eval=eval_config, generation_size=args.generation_size,
                   budget=Budget(candidates=args.max_candidates))  # and the search's settings
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out} ({exc.strerror}): pick a writable --out") from None
    request = Request(out, Path(args.archive), device, args.top, tuple(args.seam or ()), args.iters,
                      not args.no_export, args.rounds)

    def optimise(files: list[Path]) -> int:  # `warpforge optimize FILES...` with this command's options
        return cmd_optimize(argparse.Namespace(**{**vars(args), "tasks": [str(f) for f in files], "json": False}))

    outcome = run(spec, request, optimise)
    if args.json and outcome.code != 130:
        print(json.dumps(outcome.summary))
    return outcome.code
