"""`warpforge model optimize`: profile -> extract -> optimise -> apply and prove, as one resumable
command (issue 43, part 4). Each stage is its own command's code (profile.py, extract.py, the loop
of `warpforge optimize`, handed in by the caller as `optimise`, apply.py and proof.py); this module
only decides which stages are done, and writes what a run ends with: proof.json (as `model prove`
writes it), model_optimize.json and model_optimize.html, and a one-screen summary.

Resuming: DIR/stages.json records each stage as it finishes, with the key of what it was made from
(the spec's text and the device for the profile; the profile and --top/--seam for the tasks; the
seams, the kernels the archive would apply, the device and --rounds for the proof). A stage whose
record matches and whose files are there is skipped; the optimisation resumes from the archive as
`warpforge optimize --archive` does (a finished run asks the model nothing). A crash loses at most
the stage it was in. The spec's own text is the key: a file it names (config_file, state_dict, a
model.py) that changes is not noticed; pass another --out then.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warpforge.errors import UsageError
from warpforge.model.spec import Spec
from warpforge.untrusted import write_atomically

STAGES = ("profile", "extract", "optimize", "prove")


@dataclass(frozen=True)
class Request:
    """What the command was asked for (cli/model.py makes it from the flags)."""

    out: Path
    archive: Path
    device: str
    top: int = 5
    seams: tuple[str, ...] = ()
    """Seam ids to extract instead of the top N (extract's --seam)."""
    iters: int = 5
    export: bool = True
    rounds: int = 5


@dataclass
class Outcome:
    summary: dict[str, Any]
    code: int
    """0: a seam was applied and the proof passed; 1: a result (nothing applied, or a check failed);
    130: stopped during the optimisation (the same command resumes)."""


class Stages:
    """DIR/stages.json: each finished stage's key, written whole as each stage ends."""

    def __init__(self, out: Path) -> None:
        self.path = out / "stages.json"
        try:
            self.keys: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        except (OSError, ValueError):
            self.keys = {}  # unreadable: every stage runs again, which only costs time

    def done(self, stage: str, key: dict[str, Any]) -> bool:
        return self.keys.get(stage) == key

    def record(self, stage: str, key: dict[str, Any]) -> None:
        self.keys[stage] = key
        write_atomically(self.path, json.dumps(self.keys, indent=1) + "\n")


class Show:
    """Progress on stderr: a rule per stage, then its lines (rich)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.current = 0

    def stage(self, n: int) -> Callable[[str], None]:
        def say(note: str) -> None:
            if n != self.current:
                self.current = n
                self.console.rule(f"{n}/4 {STAGES[n - 1]}", align="left")
            self.console.print(note, markup=False)

        return say


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run(spec: Spec, request: Request, optimise: Callable[[list[Path]], int]) -> Outcome:
    """Every stage in order, each skipped when done; `optimise(task_files)` runs the loop on the
    extracted tasks (cli/model.py hands in `warpforge optimize`) and returns its exit code."""
    if not request.archive.is_file() and not request.archive.parent.is_dir():
        raise UsageError(f"cannot create the archive {request.archive}: its folder does not exist")
    show = Show()
    out, stages = request.out, Stages(request.out)
    built: list[Any] = []

    def model() -> Any:  # built once, by the first stage that needs it
        if not built:
            from warpforge.model import build as builder

            built.append(builder.build(spec))
        return built[0]

    ran: dict[str, bool] = {}
    profile, ran["profile"] = profile_stage(spec, request, stages, model, show.stage(1))
    seams, ran["extract"] = extract_stage(spec, request, profile, stages, model, show.stage(2))
    files = [out / row["task"] for row in seams["tasks"]]
    if not files:
        show.stage(3)("no task to optimise: no seam of this model could be extracted (see seams.json's skipped)")
        return _finish(spec, request, seams, None, ran, show)
    check_archive(request.archive, files)
    show.stage(3)(f"{len(files)} tasks into {request.archive} (a run resumes; a finished one asks the model nothing)")
    before = attempts(request.archive, files)
    if optimise(files) == 130:
        return Outcome({}, 130)
    ran["optimize"] = attempts(request.archive, files) > before
    proof, ran["prove"] = prove_stage(spec, request, stages, show.stage(4))
    if proof is None:
        del ran["prove"]  # nothing to apply: not run
    return _finish(spec, request, seams, proof, ran, show)


def profile_stage(spec: Spec, request: Request, stages: Stages, model: Callable[[], Any],
                  say: Callable[[str], None]) -> tuple[dict[str, Any], bool]:
    from warpforge.model.profile import profile_model, read, write
    from warpforge.model.report import print_table

    key = {"spec": digest(spec.path.read_text()), "device": request.device, "export": request.export}
    path = request.out / "profile.json"
    if stages.done("profile", key) and path.is_file():
        say(f"done already ({path}, on {request.device})")
        return read(path), False
    say(f"{spec.name} on {request.device}, {len(spec.regimes)} regimes, {request.iters} timed forwards each")
    profile = profile_model(spec, request.device, iters=request.iters, export=request.export, built=model())
    write(profile, request.out)
    data = profile.to_dict()
    print_table(data)
    stages.record("profile", key)
    return data, True


def extract_stage(spec: Spec, request: Request, profile: dict[str, Any], stages: Stages, model: Callable[[], Any],
                  say: Callable[[str], None]) -> tuple[dict[str, Any], bool]:
    from warpforge.model.extract import extract

    out = request.out
    key = {"profile": digest((out / "profile.json").read_text()), "top": None if request.seams else request.top,
           "seams": sorted(request.seams)}
    path = out / "seams.json"
    if stages.done("extract", key) and path.is_file():
        seams = json.loads(path.read_text())
        if all((out / row["task"]).is_file() for row in seams["tasks"]):
            say(f"done already ({len(seams['tasks'])} tasks in {out / 'tasks'})")
            return seams, False
    say("the seams named by --seam" if request.seams else f"the top {request.top} LLM seams, each checked")
    result = extract(spec, profile, request.top, out, built=model(), device=request.device,
                     only=list(request.seams) or None)
    for row in result.tasks:
        say(f"wrote {out / row['task']} ({row['seam']}, {len(row['paths'])} instances, at most "
            f"{100 * row['bound']:.1f} % of the forward)")
    for row in result.skipped:
        say(f"skipped {row['seam']}: {row['reason']}")
    stages.record("extract", key)
    return json.loads(path.read_text()), True


def check_archive(archive: Path, files: list[Path]) -> None:
    """Refuse an archive that holds another program under a task's name: the loop would record
    the new one over it and resume the old run, and apply would then take kernels verified
    against the old one (a changed spec or profile makes other tasks under the same names)."""
    from warpforge.archive import Archive
    from warpforge.task import load_task

    if not archive.is_file():
        return
    with Archive(archive, read_only=True) as db:
        for file in files:
            task = load_task(file)
            held = db.task_source(task.name)
            if held is not None and held != task.source:
                raise UsageError(f"{archive} holds another program under the task name {task.name!r} than {file} "
                                 "(the spec or its profile changed since): give a new --archive, or the --out "
                                 "its tasks were extracted into")


def attempts(archive: Path, files: list[Path]) -> int:
    """The archive's attempts (duplicates and failed replies included) of these task files."""
    from warpforge.archive import Archive
    from warpforge.task import load_task

    if not archive.is_file():
        return 0
    with Archive(archive, read_only=True) as db:
        return sum(len(db.attempts(task=load_task(f).name)) for f in files)


def chosen_kernels(archive: Path, seams_path: Path) -> dict[str, int | None]:
    """Each task's kernel as apply would choose it now (apply.choose), by task name."""
    from warpforge.archive import Archive
    from warpforge.model.apply import choose
    from warpforge.task import load_task

    seams = json.loads(seams_path.read_text())
    with Archive(archive, read_only=True) as db:
        names = [load_task(seams_path.parent / row["task"]).name for row in seams["tasks"]]
        return {name: (a.id if (a := choose(db, name)) else None) for name in names}


def prove_stage(spec: Spec, request: Request, stages: Stages,
                say: Callable[[str], None]) -> tuple[dict[str, Any] | None, bool]:
    from warpforge.model.proof import prove, write

    seams_path, proof_path = request.out / "seams.json", request.out / "proof.json"
    kernels = chosen_kernels(request.archive, seams_path)
    if not any(kernels.values()):
        say("nothing to apply: no task has a verified kernel in the archive")
        return None, False
    key = {"seams": digest(seams_path.read_text()), "archive": str(request.archive.resolve()), "kernels": kernels,
           "device": request.device, "rounds": request.rounds}
    if stages.done("prove", key) and proof_path.is_file():
        say(f"done already for these kernels ({proof_path})")
        return dict(json.loads(proof_path.read_text())), False
    say(f"apply {sum(1 for k in kernels.values() if k)} kernels and prove the patched model on {request.device}")
    report = prove(spec, request.archive, seams_path, device=request.device, rounds=request.rounds)
    write(report, request.out)
    stages.record("prove", key)
    return report.to_dict(), True


def seam_rows(request: Request, seams: dict[str, Any], proof: dict[str, Any] | None) -> list[dict[str, Any]]:
    from warpforge.archive import Archive, improves_on_eager
    from warpforge.model.apply import choose
    from warpforge.task import load_task

    applied = {s["seam"]: s for s in (proof or {}).get("apply", {}).get("seams", [])}
    engagement: dict[str, Any] = next((c for c in (proof or {}).get("checks", []) if c["name"] == "engagement"), {})
    served: dict[str, dict[str, int]] = {}
    for regime in engagement.get("numbers", {}).get("regimes", {}).values():  # summed over the proof's regimes
        for seam, counts in regime.items():
            row = served.setdefault(seam, {"served": 0, "fallbacks": 0})
            row["served"] += counts["served"]
            row["fallbacks"] += counts["fallbacks"]
    rows = []
    with Archive(request.archive, read_only=True) as db:
        for task_row in seams["tasks"]:
            name = load_task(request.out / task_row["task"]).name
            best = choose(db, name)
            seam = task_row["seam"]
            entry = applied.get(seam, {})
            rows.append({
                "seam": seam, "task": name, "instances": len(task_row["paths"]), "bound": task_row["bound"],
                "attempts": len(db.attempts(task=name)), "kernel": best.id if best else None,
                "speedup": best.speedup if best and best.timed else None,
                "claim": (best.claim.words() if best.timed else "correct, not timed") if best else "no verified kernel",
                "proven_faster": bool(best and improves_on_eager(best)),
                "applied": bool(entry) and not entry.get("skipped"),
                "why_not": entry.get("skipped") if entry else "no verified kernel",
                **served.get(seam, {"served": 0, "fallbacks": 0})})
    return rows


def summary(spec: Spec, request: Request, seams: dict[str, Any], proof: dict[str, Any] | None,
            ran: dict[str, bool]) -> dict[str, Any]:
    """Per seam: the best verified kernel, whether it was applied and what it served; the proof's
    checks; which stages ran this time and which were done already."""
    checks = {c["name"]: c for c in (proof or {}).get("checks", [])}
    rows = seam_rows(request, seams, proof) if seams["tasks"] else []
    speed = checks.get("speed", {}).get("numbers", {}).get("patched_vs_eager")
    return {"model": spec.name, "spec": str(spec.path), "device": request.device, "archive": str(request.archive),
            "out": str(request.out), "stages": {s: ("ran" if ran.get(s) else "done already" if s in ran else "not run")
                                                for s in STAGES},
            "seams": rows, "skipped": seams.get("skipped", []), "gemm_seams": len(seams.get("gemm", [])),
            "proof": None if proof is None else {"passed": proof["passed"], "file": "proof.json",
                                                 "checks": [{k: c[k] for k in ("name", "passed", "required", "detail")}
                                                            for c in checks.values()]},
            "end_to_end": None if speed is None else {k: speed[k] for k in ("speedup", "interval", "words")},
            "passed": bool(proof and proof["passed"] and any(r["applied"] for r in rows))}


def _finish(spec: Spec, request: Request, seams: dict[str, Any], proof: dict[str, Any] | None,
            ran: dict[str, bool], show: Show) -> Outcome:
    data = summary(spec, request, seams, proof, ran)
    write_atomically(request.out / "model_optimize.json", json.dumps(data, indent=1) + "\n")
    write_atomically(request.out / "model_optimize.html", html_page(data))
    print_summary(data, show.console)
    return Outcome(data, 0 if data["passed"] else 1)


def _kernel(row: dict[str, Any]) -> str:
    return f"#{row['kernel']}: {row['claim']}" if row["kernel"] is not None else row["claim"]


def _applied(row: dict[str, Any]) -> str:
    if row["applied"]:
        return f"yes: {row['served']} calls served, {row['fallbacks']} fell back"
    return "no" if row["kernel"] is None else f"no: {row['why_not']}"


def print_summary(data: dict[str, Any], console: Any) -> None:
    """The one screen a run ends with: per seam, its best verified kernel and whether it was
    applied; the proof's checks; the whole forward's speed."""
    from rich.table import Table

    table = Table(title=f"{data['model']} on {data['device']}: model optimize", title_justify="left")
    for name, justify in (("seam", "left"), ("n", "right"), ("bound", "right"), ("attempts", "right"),
                          ("best verified (vs eager)", "left"), ("applied", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in data["seams"]:
        table.add_row(row["seam"], str(row["instances"]), f"<= {100 * row['bound']:.1f} %", str(row["attempts"]),
                      _kernel(row), _applied(row))
    console.print(table)
    proof = data["proof"]
    for check in proof["checks"] if proof else []:
        mark = ("PASS" if check["passed"] else "FAIL") if check["required"] else "INFO"
        console.print(f"{mark} {check['name']}: {check['detail'] or 'ok'}", markup=False)
    whole = data["end_to_end"]
    verdict = "no proof (nothing applied)" if proof is None else "passed" if data["passed"] else "failed"
    console.print(f"end to end: {verdict}" + (f"; patched vs eager {whole['words']}" if whole else ""), markup=False)
    console.print(f"wrote {Path(data['out']) / 'model_optimize.json'} and model_optimize.html"
                  + (", proof.json" if proof else ""), markup=False)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">
<title>{{ d.model }} · warpforge model optimize</title><style>{% include "style.css" %}</style></head>
<body><main><header class="top"><div class="crumbs">warpforge model optimize</div><h1>{{ d.model }}</h1>
<p class="meta">{{ d.spec }} · {{ d.device }} · archive {{ d.archive }} · stages:
{% for s, how in d.stages.items() %}{{ s }} {{ how }}{{ "" if loop.last else ", " }}{% endfor %}</p></header>
<p class="headline">End to end: <strong>{{ verdict }}</strong>{% if d.end_to_end %}; patched vs eager {{ d.end_to_end.words }}{% endif %}</p>
<h2>Seams</h2>
<table><thead><tr><th>seam</th><th>task</th><th class="num">instances</th><th>Amdahl bound</th><th class="num">attempts</th>
<th>best verified kernel (vs eager)</th><th>applied in the proof</th></tr></thead><tbody>
{% for r in d.seams %}<tr><td><strong>{{ r.seam }}</strong></td><td>{{ r.task }}</td><td class="num">{{ r.instances }}</td>
<td>at most {{ "%.1f" | format(100 * r.bound) }} % of the forward</td><td class="num">{{ r.attempts }}</td>
<td{% if r.proven_faster %} class="improved"{% endif %}>{{ kernel(r) }}</td><td>{{ applied(r) }}</td></tr>{% endfor %}
</tbody></table>
{% for s in d.skipped %}<p class="meta">not extracted: {{ s.seam }}: {{ s.reason }}</p>{% endfor %}
{% if d.proof %}<h2>The proof (proof.json)</h2>
<table><thead><tr><th>check</th><th>result</th><th>detail</th></tr></thead><tbody>
{% for c in d.proof.checks %}<tr><td>{{ c.name }}</td><td>{{ ("pass" if c.passed else "FAIL") if c.required else "reported" }}</td>
<td class="reason">{{ c.detail or "ok" }}</td></tr>{% endfor %}</tbody></table>{% endif %}
<footer>warpforge model optimize · read-only; numbers are model_optimize.json's and proof.json's.</footer></main></body></html>"""


def html_page(data: dict[str, Any]) -> str:
    """model_optimize.html: self-contained (inline CSS), every value escaped."""
    import jinja2

    loader = jinja2.ChoiceLoader([jinja2.DictLoader({"model_optimize.html": _PAGE}),
                                  jinja2.PackageLoader("warpforge.report", "templates")])
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)
    verdict = "no proof (nothing applied)" if data["proof"] is None else "passed" if data["passed"] else "failed"
    return env.get_template("model_optimize.html").render(d=data, verdict=verdict, kernel=_kernel, applied=_applied)
