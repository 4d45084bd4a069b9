"""`warpforge model export`: the kernels that `warpforge.apply` would choose for a model's seams,
written as an installable Python package that needs torch only.

The package (export_template/runtime.py as its `__init__.py`) registers one torch.library custom
op per seam on import, taking the module's activations *and its weights* as inputs, and has
`apply(model)`: the same guarded per-instance swaps as `warpforge.apply` (its call matcher is
copied from model/apply.py). Beside it: pyproject.toml, manifest.json (the evidence per kernel),
VERIFICATION.md (what was checked and what was not) and, with `hf_kernels`, the Hugging Face
`kernels` local-repository layout. Export reads the archive and builds the model on the CPU for
its weights' shapes and the ops' fake outputs; it never imports or runs a kernel.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import inspect
import json
import platform
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from warpforge.archive import Archive, Attempt
from warpforge.errors import UsageError, WarpforgeError
from warpforge.model import apply as applier
from warpforge.model.spec import Spec
from warpforge.model.taskfile import snake
from warpforge.target import Target
from warpforge.task import import_task_module, load_task

TEMPLATE = Path(__file__).resolve().parent / "export_template" / "runtime.py"
HF_VARIANT = Path("hf_kernels", "build", "torch-universal")
"""Where the package goes in the Hugging Face `kernels` layout: one variant for any torch and device."""
BUILD_FLAGS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "with_cuda")
"""The keyword arguments of torch.utils.cpp_extension.load_inline that a native kernel's build
depends on: read from its source for the manifest (the source passes them itself when it builds)."""


@dataclass
class _Chosen:
    """One seam's kernel, ready to write."""

    runtime: dict[str, Any]
    """Its entry of the package's _seams.json (what the runtime guards and calls)."""
    evidence: dict[str, Any]
    """Its entry of manifest.json."""
    kernel: str
    reference: str
    """The task file's program, shipped beside the kernel as what it was verified against."""


@dataclass
class ExportResult:
    out: Path
    package: str
    namespace: str
    kernels: list[dict[str, Any]]
    """The manifest's entry of each exported kernel."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    hf_kernels: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "package": self.package, "namespace": self.namespace,
                "kernels": [{k: e[k] for k in ("seam", "op", "attempt_id", "speed")} for e in self.kernels],
                "skipped": self.skipped, "hf_kernels": str(self.hf_kernels) if self.hf_kernels else None}


class _Skip(WarpforgeError):
    """Why a seam is not exported (one sentence, in the manifest)."""


def export(spec: Spec, archive_path: str | Path, seams_json: str | Path, out: str | Path, *,
           name: str | None = None, hf_kernels: bool = False) -> ExportResult:
    """Write the package of the archive's verified kernels of seams.json's tasks into `out`."""
    from warpforge.model import build as builder

    seams_path, out = Path(seams_json), Path(out)
    try:
        seams = json.loads(seams_path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {seams_path}: {exc}; give the seams.json that `warpforge model extract` wrote") from None
    if not Path(archive_path).is_file():
        raise UsageError(f"no archive at {archive_path}: give the archive that holds the seams' verified kernels")
    package = name or re.sub(r"_+", "_", "warpforge_kernels_" + snake(re.sub(r"\W+", "_", spec.name)))
    if not package.isidentifier():
        raise UsageError(f"{package!r} is not a Python package name: give --name, e.g. --name my_kernels")
    model = builder.build(spec).model  # the CPU copy: its weights' shapes and the ops' fake outputs
    chosen: list[_Chosen] = []
    skipped: list[dict[str, str]] = []
    with Archive(archive_path, read_only=True) as archive:
        for row in seams.get("tasks", []):
            try:
                chosen.append(_seam(model, archive, seams_path.parent / row["task"], row))
            except _Skip as exc:
                skipped.append({"seam": row["seam"], "reason": str(exc)})
    if not chosen:
        why = "; ".join(f"{s['seam']}: {s['reason']}" for s in skipped) or f"{seams_path} lists no task"
        raise UsageError(f"nothing to export: no seam has a verified kernel in {archive_path} ({why})")
    digest = hashlib.sha256(json.dumps([[c.runtime, c.kernel] for c in chosen], sort_keys=True).encode()).hexdigest()
    namespace = f"{package}_{digest[:8]}"  # one per build: two exports load side by side (as `kernels` asks)
    manifest = _manifest(spec, package, namespace, archive_path, seams_path, chosen, skipped)
    if hf_kernels and (out / "hf_kernels").exists() and not (out / HF_VARIANT / "_seams.json").is_file():
        raise UsageError(f"{out / 'hf_kernels'} exists and is not an earlier export: pick another --out")
    pkg = _fresh(out, package)
    _write_package(pkg, namespace, chosen)
    for where in (out, pkg):
        (where / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (where / "VERIFICATION.md").write_text(verification(manifest))
    (out / "pyproject.toml").write_text(_pyproject(package, spec.name))
    result = ExportResult(out, package, namespace, manifest["kernels"], skipped)
    if hf_kernels:
        result.hf_kernels = _hf_layout(out, pkg, package, namespace, manifest)
    return result


def _seam(model: nn.Module, archive: Archive, task_file: Path, row: dict[str, Any]) -> _Chosen:
    """One seam's kernel: the one that `warpforge.apply` would choose, by its rules (model/apply.py)."""
    try:
        task = load_task(task_file)
    except Exception as exc:  # a task file is the user's: any failure to load it is a reason to skip
        raise _Skip(f"cannot load its task {task_file}: {exc}") from None
    recorded = archive.task_source(task.name)
    if recorded is None:
        raise _Skip(f"the archive has no task {task.name!r}: nothing was verified against it")
    if recorded != task.source:
        raise _Skip(f"the archive's task {task.name!r} is another program than {task_file}: its verdicts do not hold here")
    attempt = applier.choose(archive, task.name)
    if attempt is None or attempt.source is None:
        raise _Skip(f"no verified kernel for {task.name} in the archive (imported attempts count only once verified)")
    module = import_task_module(task)
    init = list(module.get_init_inputs())
    try:
        json.dumps(init)
    except TypeError:
        raise _Skip(f"its task's get_init_inputs() gives values that cannot be written as JSON: {init!r}") from None
    try:
        target = model.get_submodule(row["paths"][0])
    except AttributeError:
        raise _Skip(f"the model has no module {row['paths'][0]}") from None
    shape_sets = sorted({tuple(tuple(s) for s in p["SHAPES"]) for p in (task.metadata.get("sizes") or {}).values()})
    if not shape_sets:
        raise _Skip(f"its task {task.name} has no size presets (WARPFORGE['sizes']): no input shapes were verified")
    dtypes = tuple(module.DTYPES)
    fake = applier._fake_outputs(target, row["call"], shape_sets, dtypes, "cpu")
    op = snake(row["seam"])
    names = [_name(d) for d in dtypes]
    runtime = {
        "seam": row["seam"], "task": task.name, "op": op, "attempt_id": attempt.id, "paths": list(row["paths"]),
        "kernel": f"kernels/{op}.py", "reference": f"reference/{op}.py", "init": init,
        "device": str((attempt.hardware or {}).get("device") or "cpu"),
        "call": row["call"], "output": row["output"], "signature": _signature(type(target)),
        "dtypes": names, "shapes": [[list(s) for s in shapes] for shapes in shape_sets],
        "params": [{"name": k, "shape": list(v.shape), "dtype": _name(v.dtype)} for k, v in target.state_dict().items()],
        "fake": [{"shapes": [list(s) for s in key[0]], "dtypes": names,
                  "outputs": [[list(shape), _name(dtype)] for shape, dtype in outs]} for key, outs in fake.items()],
        "build": _build(attempt),
    }
    return _Chosen(runtime, _evidence(attempt, runtime, task.source), attempt.source, task.source)


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _signature(cls: type) -> list[list[str]] | None:
    """The class's forward parameters past `self` as [name, kind] (a `layers` forward repeats them;
    Hugging Face `kernels` checks their number and kinds), or None when it has none to read."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return None
    return [[p.name, p.kind.name] for p in params]


def _build(attempt: Attempt) -> dict[str, Any]:
    """How the kernel was built: its language, the load_inline flags its source passes, and the
    environment the evaluator built it in (the CUDA architecture list)."""
    target = Target.from_hardware(attempt.hardware or {})
    env = {"TORCH_CUDA_ARCH_LIST": target.arch_list} if target is not None and target.arch_list else {}
    flags: dict[str, Any] = {}
    try:
        tree = ast.parse(attempt.source or "")
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    for node in ast.walk(tree):
        for kw in node.keywords if isinstance(node, ast.Call) else ():
            if kw.arg in BUILD_FLAGS:
                try:
                    flags[kw.arg] = ast.literal_eval(kw.value)
                except (ValueError, TypeError, SyntaxError, RecursionError):
                    flags[kw.arg] = ast.unparse(kw.value)  # computed in the source: recorded as written
    return {"language": attempt.language, "env": env, "load_inline": flags}


def _evidence(a: Attempt, runtime: dict[str, Any], task_source: str) -> dict[str, Any]:
    result = a.result or {}
    timing, config = result.get("timing") or {}, result.get("config") or {}
    claim = a.claim.to_dict()
    return {
        "seam": runtime["seam"], "task": runtime["task"], "op": runtime["op"], "paths": runtime["paths"],
        "attempt_id": a.id, "evaluation_id": a.evaluation_id, "run_id": a.run_id, "step": a.step,
        "source_hash": a.source_hash, "strategy": a.strategy, "llm": a.model, "language": a.language,
        "kernel": runtime["kernel"], "kernel_sha256": hashlib.sha256((a.source or "").encode()).hexdigest(),
        "reference": runtime["reference"], "task_sha256": hashlib.sha256(task_source.encode()).hexdigest(),
        "verdict": {"status": a.status, "correct": a.correct, "stage": a.stage, "reason": a.reason,
                    "max_abs_err": result.get("max_abs_err"), "rel_l2_err": result.get("rel_l2_err"),
                    "tolerance": result.get("tolerance"), "trials": result.get("trials"), "size": config.get("size"),
                    "sandbox": (config.get("safety") or {}).get("sandbox")},
        "speed": {**claim, "timed": a.timed, "speedup_vs_compile": a.speedup_vs_compile},
        "timings_ms": {"candidate": a.candidate_ms, "candidate_iqr": a.candidate_iqr_ms, "reference": a.reference_ms,
                       "torch_compile": a.compile_ms, "samples": {k: len((v or {}).get("samples_ms") or ())
                                                                  for k, v in timing.items()}},
        "hardware": a.hardware, "evaluated_at": a.evaluated_at,
        "verified": {"device": runtime["device"], "dtypes": runtime["dtypes"], "shapes": runtime["shapes"],
                     "weights": runtime["params"]},
        "build": runtime["build"],
    }


def _manifest(spec: Spec, package: str, namespace: str, archive_path: str | Path, seams_path: Path,
              chosen: list[_Chosen], skipped: list[dict[str, str]]) -> dict[str, Any]:
    import warpforge

    return {
        "format": 1, "package": package, "namespace": namespace, "model": spec.name,
        "spec": str(spec.path), "archive": str(Path(archive_path).resolve()), "seams_json": str(seams_path.resolve()),
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "exported_with": {"warpforge": warpforge.__version__, "torch": torch.__version__,
                          "python": platform.python_version(), "platform": platform.platform()},
        "requires": ["torch"], "requires_warpforge": False,
        "kernels": [c.evidence for c in chosen], "skipped": skipped,
    }


def _fresh(out: Path, package: str) -> Path:
    """The package folder, emptied when an earlier export wrote it; anything else there is an error."""
    pkg = out / package
    if pkg.exists() and not (pkg / "_seams.json").is_file():
        raise UsageError(f"{pkg} exists and is not an earlier export: pick another --out or --name")
    try:
        shutil.rmtree(pkg, ignore_errors=True)
        for sub in ("kernels", "reference"):
            (pkg / sub).mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"cannot write into {out} ({exc.strerror}): pick a writable --out") from None
    return pkg


def _write_package(pkg: Path, namespace: str, chosen: list[_Chosen]) -> None:
    runtime = [c.runtime for c in chosen]
    for c in chosen:
        (pkg / c.runtime["kernel"]).write_text(c.kernel)
        (pkg / c.runtime["reference"]).write_text(c.reference)
    (pkg / "__init__.py").write_text(TEMPLATE.read_text())
    (pkg / "_guard.py").write_text(_guard_source())
    (pkg / "layers.py").write_text(_layers_source(runtime))
    (pkg / "_seams.json").write_text(json.dumps({"namespace": namespace, "seams": runtime}, indent=1) + "\n")


def _guard_source() -> str:
    """model/apply.py's call matcher, as its own module: the package guards exactly as apply does."""
    functions = (applier._matches, applier._match, applier._build)
    return ('"""The call matcher of warpforge.apply (warpforge/model/apply.py), copied by `warpforge model export`."""\n\n'
            "from __future__ import annotations\n\nfrom typing import Any\n\nimport torch\n\n\n"
            + "\n\n".join(inspect.getsource(f) for f in functions))


def _layers_source(runtime: list[dict[str, Any]]) -> str:
    """One Hugging Face `kernels` layer per seam: no state, no constructor, only `forward`, with the
    parameters (names and kinds) of the module's own forward, handing the call to the guard."""
    lines = ['"""Hugging Face `kernels` layers (`kernelize`): the guarded ops of this package, one per seam."""',
             "", "from torch import nn", "", "from . import MISSING, kernelized", ""]
    for r in runtime:
        if r["signature"] is None or not r["seam"].isidentifier():
            continue
        params, names, star = [], [], False
        for name, kind in r["signature"]:
            names.append(name)
            if kind == "VAR_POSITIONAL":
                params.append(f"*{name}")
                star = True
            elif kind == "VAR_KEYWORD":
                params.append(f"**{name}")
            else:
                if kind == "KEYWORD_ONLY" and not star:
                    params.append("*")
                    star = True
                params.append(f"{name}=MISSING")
                if kind == "POSITIONAL_ONLY" and not any(k == "POSITIONAL_ONLY" for _, k in r["signature"][len(names):]):
                    params.append("/")
        named = ", ".join(f"{n!r}: {n}" for n in names)
        lines += ["", f"class {r['seam']}(nn.Module):", "    has_backward = False",
                  "    can_torch_compile = True", "",
                  f"    def forward({', '.join(['self', *params])}):",
                  f"        return kernelized({r['seam']!r}, self, {{{named}}})", ""]
    return "\n".join(lines)


def _pyproject(package: str, model: str) -> str:
    return f'''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{package.replace("_", "-")}"
version = "0.1.0"
description = "Verified kernels of {model}, exported by warpforge (manifest.json: the evidence; VERIFICATION.md: what was not checked)"
requires-python = ">=3.10"
dependencies = ["torch"]

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
{package} = ["*.json", "*.md", "kernels/*.py", "reference/*.py"]
'''


def _hf_layout(out: Path, pkg: Path, package: str, namespace: str, manifest: dict[str, Any]) -> Path:
    """The Hugging Face `kernels` local repository: build/torch-universal/ holds the package itself
    (the flattened layout) and, for older `kernels` releases, a copy in build/torch-universal/<package>/."""
    root, variant = out / "hf_kernels", out / HF_VARIANT
    shutil.rmtree(root, ignore_errors=True)  # an earlier export's (export() checked)
    shutil.copytree(pkg, variant)
    shutil.copytree(pkg, variant / package)
    files = {str(f.relative_to(variant)): base64.b64encode(hashlib.sha256(f.read_bytes()).digest()).decode()
             for f in sorted(variant.rglob("*")) if f.is_file()}
    # `kernels` asks for a dashed lower-case name whose dashes become underscores in the module name
    metadata = {"name": package.lower().replace("_", "-"), "id": namespace, "version": 1, "license": "unknown",
                "backend": {"type": "universal"}, "python-depends": [],
                "digest": {"algorithm": "sha256", "files": files}}
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=1) + "\n")
    return root


def verification(manifest: dict[str, Any]) -> str:
    """VERIFICATION.md: per kernel what the evaluator checked, then everything nobody checked."""
    lines = [f"# What was verified in {manifest['package']}", "",
             f"Exported by warpforge {manifest['exported_with']['warpforge']} on {manifest['exported_at']} from "
             f"`{manifest['archive']}` for the model `{manifest['model']}` (`{manifest['spec']}`). Every number below "
             "is in manifest.json; nothing here was measured by the export.", "", "## Checked, per kernel", ""]
    for k in manifest["kernels"]:
        v, hw = k["verdict"], k["hardware"] or {}
        where = "a sandboxed process" if v["sandbox"] else ("a separate process" if v["sandbox"] is False else "its worker")
        lines += [f"### {k['seam']} (`{manifest['namespace']}::{k['op']}`)", "",
                  f"- Kernel: archive attempt #{k['attempt_id']} (evaluation #{k['evaluation_id']}, run {k['run_id']}), "
                  f"{k['language']}, `{k['kernel']}` (sha256 {k['kernel_sha256'][:16]}...), for the task `{k['task']}` "
                  f"(the archive holds this very program, sha256 {k['task_sha256'][:16]}...).",
                  f"- Correct: warpforge's evaluator ran it in {where} against the task's reference (the module's own "
                  f"forward) on {v['trials'] or 'its'} trials of fresh inputs at the size preset {v['size']!r}, within "
                  f"{v['tolerance']} (max abs error {v['max_abs_err']}, rel L2 {v['rel_l2_err']}).",
                  f"- Speed: {k['speed']['words']}{'' if k['speed']['timed'] else ': no speed claim'}.",
                  f"- Where: {hw.get('gpu') or hw.get('cpu') or k['verified']['device']}, torch {hw.get('torch')}, "
                  f"CUDA {hw.get('cuda')}, Python {hw.get('python')}, target {hw.get('target')}.",
                  f"- Verified calls: {k['verified']['device']}, dtypes {k['verified']['dtypes']}, input shapes "
                  f"{k['verified']['shapes']}; the module's weights as op inputs "
                  f"{[(w['name'], w['shape'], w['dtype']) for w in k['verified']['weights']]}.",
                  f"- Applied at {len(k['paths'])} module(s): {', '.join(k['paths'])}.", ""]
    if manifest["skipped"]:
        lines += ["## Not exported", ""] + [f"- {s['seam']}: {s['reason']}" for s in manifest["skipped"]] + [""]
    lines += ["## Not checked", "",
              "- Any call outside the verified ones above: other shapes, dtypes, devices, layouts, call structures, "
              "or calls that want gradients run the module's original forward (counted as fallbacks; "
              "`apply`'s report says how many and why). Dynamic shapes are not supported: the ops' fake "
              "implementations know the verified shapes only.",
              "- The guard admits the input shapes of every size preset of a task, as `warpforge.apply` does; the "
              "evaluation ran at the preset named above, and whether its checks reached the other presets' shapes "
              "is not recorded here.",
              "- Other hardware, drivers, or torch, CUDA and Triton versions than those listed: a kernel built here "
              "is built again (load_inline, Triton's JIT) and was not re-verified.",
              "- Backward: the kernels have none.",
              "- The export itself: it neither imports nor runs the kernels, and did not check this package against "
              "the model. `warpforge model prove` checks the patched model end to end (against float64, engaged, "
              "torch.compile, torch.export) before exporting; its proof.json is not part of this package.",
              "- The whole model's speed: the speedups above are each kernel's against its module alone.",
              "- Thread safety: a kernel instance is shared by all calls of its op.",
              "- Safety: the kernels are generated code that runs unsandboxed in your process once imported; "
              "warpforge ran it only in its sandbox.",
              "- The Hugging Face `kernels` layout (if written) was not loaded by `kernels` at export; its "
              "metadata.json has a sha256 digest of its files and no signature, and its license is `unknown`.", ""]
    return "\n".join(lines)
