"""Render the chat prompt for one proposal strategy from the templates in `prompts/` (data).

`render(strategy, ctx)` returns `[{"role": "system", ...}, {"role": "user", ...}]`: the shared
system template (target device and language, the candidate contract, the evaluator's rules)
and the strategy's user template. Long sources and logs are cut to fit `PROMPT_BUDGET` with
a visible marker; known secrets are redacted from every message (it may go to a hosted LLM).
`pick_contrastive` chooses the scored variants a contrastive prompt shows. It does not call
an LLM or parse replies (`llm.py`, `parse.py`).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from warpforge import languages
from warpforge.errors import ConfigError
from warpforge.metrics import peaks_for
from warpforge.redact import redact

STRATEGIES = ("translate", "repair", "optimise", "contrastive", "crossover", "retrieval", "review")
DEVICES = ("cuda", "cpu")
DEVICE_NAMES = {"cuda": "CUDA", "cpu": "CPU"}

TEMPLATE_DIR = Path(__file__).with_suffix("")  # propose/prompts/, next to this module
PROMPT_BUDGET = 60_000
"""Characters in system + user message. ~15k tokens: room for the reply within any 32k-context
model, and long contexts dilute attention on the code that matters."""
_CAPS = {"compile_log": 6_000, "resources": 3_000, "profile": 4_000, "analysis": 2_000, "reason": 600}
"""Per-field limits for the short texts; sources share what is left of the budget."""
MARKER = "[... {n} characters cut to fit the prompt ...]"

# Streaming multiprocessors per GPU (datasheets); longest matching name wins. Unknown: not stated.
_SMS = {"H100 PCIe": 114, "H100": 132, "H200": 132, "A100": 108}
_HOPPER = re.compile(r"\b(H100|H200|H800|H20|GH200)\b", re.IGNORECASE)
_AMPERE = re.compile(r"\b(A100|A800)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Variant:
    """An earlier candidate shown in a prompt."""

    source: str
    status: str
    """The evaluator's status (correct, incorrect, compile_error, ...) or "not evaluated"."""
    speedup: float | None = None
    """Over eager PyTorch at the timed size; None when not timed."""
    reason: str = ""
    analysis: str = ""
    """The performance analysis / plan its reply contained."""
    task: str = ""
    """The task it solves (retrieval shows kernels of other tasks)."""
    candidate_id: int | None = None


@dataclass(frozen=True)
class PromptContext:
    task_name: str
    task_source: str
    device: str
    """cuda | cpu"""
    gpu: str = ""
    """The GPU's name ("NVIDIA H100 80GB HBM3"), "" when not known yet."""
    language: str = "any"
    """A registered kernel language's name (languages.names()), or any (the model picks)."""
    current: Variant | None = None
    """repair / optimise / review: the candidate in question (retrieval: the best so far, optional)."""
    compile_log: str = ""
    resources: str = ""
    """The compiler's resource report: registers, spills, shared memory per kernel."""
    profile: str = ""
    variants: tuple[Variant, ...] = ()
    """contrastive: scored earlier variants, slowest first."""
    parents: tuple[Variant, ...] = ()
    """crossover"""
    stepping_stones: tuple[Variant, ...] = ()
    """retrieval: verified kernels of other tasks."""
    repeated: tuple[int, ...] = ()
    """Candidate ids the model's last replies repeated character for character (`_repeated.j2`
    then asks for a different program)."""


def render(strategy: str, ctx: PromptContext) -> list[dict[str, str]]:
    """The chat messages for `strategy`; ConfigError when the context lacks what it needs."""
    _check(strategy, ctx)
    sources = _sources(ctx)
    empty = _messages(strategy, ctx, {key: "" for key in sources})
    overhead = sum(len(m["content"]) for m in empty)
    fitted = _fit(sources, PROMPT_BUDGET - overhead)
    return _messages(strategy, ctx, fitted)


def pick_contrastive(scored: Sequence[Variant], k: int, rng: random.Random) -> tuple[Variant, ...]:
    """k variants from different performance buckets, slowest first (CUDA-L1 §2.4.3).

    The correct, timed variants are sorted by speedup and split into min(k, n) equal buckets;
    one is drawn from each. Failed (or untimed) variants fill in only while fewer than two
    correct ones exist, and come first: they are the slowest of all.
    """
    if k < 2:
        raise ConfigError(f"a contrastive prompt shows at least 2 variants, not {k}")
    usable = [v for v in scored if v.source.strip()]
    timed = sorted((v for v in usable if v.status == "correct" and v.speedup is not None),
                   key=lambda v: v.speedup or 0.0)
    n = min(k, len(timed))
    chosen = [rng.choice(timed[i * len(timed) // n:(i + 1) * len(timed) // n]) for i in range(n)] if n >= 2 else timed
    if len(chosen) < 2:
        others = [v for v in usable if v not in timed]
        need = 2 - len(chosen)
        if len(others) < need:
            raise ConfigError(f"a contrastive prompt needs 2 earlier variants with sources; only {len(usable)} exist")
        chosen = rng.sample(others, need) + chosen
    return tuple(chosen)


# -- checks -------------------------------------------------------------------------------------

def _check(strategy: str, ctx: PromptContext) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown prompt strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    if ctx.device not in DEVICES:
        raise ConfigError(f"unknown device {ctx.device!r} for a prompt: choose cuda or cpu")
    if ctx.language not in (*languages.names(), "any"):
        raise ConfigError(f"unknown kernel language {ctx.language!r}: choose one of "
                          f"{', '.join((*languages.names(), 'any'))}")
    if ctx.language != "any":
        devices = languages.get(ctx.language).devices
        if ctx.device not in devices:
            raise ConfigError(f"{ctx.language} kernels need a {DEVICE_NAMES.get(devices[0], devices[0])} device: use "
                              f"--device {devices[0]} or another language")
    if not ctx.task_source.strip():
        raise ConfigError(f"the {strategy} prompt needs the task's reference source, and {ctx.task_name!r} has none")
    if strategy in ("repair", "optimise", "review") and (ctx.current is None or not ctx.current.source.strip()):
        raise ConfigError(f"the {strategy} prompt needs the current candidate's source (PromptContext.current)")
    if strategy == "contrastive" and len(ctx.variants) < 2:
        raise ConfigError(f"the contrastive prompt needs at least 2 scored variants, got {len(ctx.variants)}")
    if strategy == "crossover" and len(ctx.parents) < 2:
        raise ConfigError(f"the crossover prompt needs at least 2 parents, got {len(ctx.parents)}")
    if strategy == "retrieval" and not ctx.stepping_stones:
        raise ConfigError("the retrieval prompt needs at least 1 stepping stone from another task")


# -- fitting the budget -------------------------------------------------------------------------

def _sources(ctx: PromptContext) -> dict[str, str]:
    """The long texts that share the budget, by the key `_messages` looks them up under."""
    texts = {"task": ctx.task_source}
    if ctx.current is not None:
        texts["current"] = ctx.current.source
    for group, variants in (("variants", ctx.variants), ("parents", ctx.parents), ("stones", ctx.stepping_stones)):
        texts.update({f"{group}.{i}": v.source for i, v in enumerate(variants)})
    return texts


def _fit(texts: dict[str, str], budget: int) -> dict[str, str]:
    """Water-filling: texts shorter than an equal share stay whole; the rest share what is left."""
    fitted, left = {}, max(budget, 0)
    order = sorted(texts, key=lambda key: len(texts[key]))
    for i, key in enumerate(order):
        share = left // (len(order) - i)
        fitted[key] = truncate(texts[key], share)
        left -= len(fitted[key])
    return fitted


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters: its head (2/3) and tail (1/3) on line boundaries,
    with a marker saying how much was cut. Heads hold kernels and errors; tails hold ModelNew."""
    if len(text) <= limit:
        return text
    room = limit - len(MARKER.format(n=len(text))) - 2
    if room <= 0:
        return ""
    head = text[: room * 2 // 3]
    tail = text[len(text) - room // 3:] if room >= 3 else ""
    if "\n" in head[:-1]:
        head = head[: head.rindex("\n", 0, len(head) - 1) + 1]
    if "\n" in tail:
        tail = tail[tail.index("\n") + 1:]
    cut = len(text) - len(head) - len(tail)
    return f"{head.rstrip(chr(10))}\n{MARKER.format(n=cut)}\n{tail}"


# -- rendering ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), undefined=jinja2.StrictUndefined,
                              autoescape=False, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)


def _messages(strategy: str, ctx: PromptContext, sources: dict[str, str]) -> list[dict[str, str]]:
    variables = _variables(strategy, ctx, sources)
    env = _environment()
    user = env.get_template(f"{strategy}.j2").render(variables).strip()
    if ctx.repeated and strategy != "review":  # last, where a model that repeats itself reads it last
        user += "\n\n" + env.get_template("_repeated.j2").render(repeated=ctx.repeated).strip()
    # A second belt after EvalResult's own redaction: archived reasons of older runs, task
    # sources and replies also reach the prompt, and a prompt may leave for a hosted LLM.
    return [{"role": "system", "content": redact(env.get_template("system.j2").render(variables).strip()) + "\n"},
            {"role": "user", "content": redact(user) + "\n"}]


def _variables(strategy: str, ctx: PromptContext, sources: dict[str, str]) -> dict[str, Any]:
    def shown(v: Variant, key: str) -> dict[str, Any]:
        analysis = truncate(v.analysis.strip(), _CAPS["analysis"])
        return {"source": sources[key].rstrip("\n"), "status": v.status, "headline": headline(v), "task": v.task,
                "reason": truncate(v.reason.strip(), _CAPS["reason"]), "speedup": speedup_text(v.speedup),
                "analysis": analysis, "analysis_quoted": "\n".join(f"> {ln}".rstrip() for ln in analysis.splitlines())}

    gpu = ctx.gpu.strip()
    peaks = peaks_for(gpu) if gpu else None
    return {
        "strategy": strategy, "task_name": ctx.task_name, "task_source": sources["task"].rstrip("\n"), "device": ctx.device,
        "language": ctx.language, "language_line": language_line(ctx.language, ctx.device),
        "build_hints": ", ".join(dict.fromkeys(lang.prompt.build[ctx.device] for lang in languages.ALL
                                               if ctx.device in lang.prompt.build)),
        "gpu": gpu, "preset": "gpu" if ctx.device == "cuda" else "cpu",
        "arch": "hopper" if _HOPPER.search(gpu) else "ampere" if _AMPERE.search(gpu) else "",
        "sms": _sm_count(gpu),
        "peaks": _peaks_text(peaks),
        "current": shown(ctx.current, "current") if ctx.current is not None else None,
        "compile_log": truncate(ctx.compile_log.strip(), _CAPS["compile_log"]),
        "resources": truncate(ctx.resources.strip(), _CAPS["resources"]),
        "profile": truncate(ctx.profile.strip(), _CAPS["profile"]),
        "variants": [shown(v, f"variants.{i}") for i, v in enumerate(ctx.variants)],
        "parents": [shown(v, f"parents.{i}") for i, v in enumerate(ctx.parents)],
        "stepping_stones": [shown(v, f"stones.{i}") for i, v in enumerate(ctx.stepping_stones)],
    }


def language_line(language: str, device: str) -> str:
    """What the system message asks for: the language's own instructions, or for "any" the
    languages offered on `device` (languages.Prompt) with their notes."""
    if language != "any":
        return languages.get(language).instructions(device)
    offers = [lang.prompt.offer[device] for lang in languages.ALL if device in lang.prompt.offer]
    listed = offers[0] if len(offers) < 2 else " or ".join(offers) if len(offers) == 2 else \
        f"{', '.join(offers[:-1])}, or {offers[-1]}"
    notes = [lang.prompt.note[device] for lang in languages.ALL if device in lang.prompt.note]
    return " ".join([f"your choice of {listed}; pick what makes this task fastest.", *notes])


def speedup_text(speedup: float | None) -> str:
    return "" if speedup is None else f"{speedup:.2f}x" if speedup >= 0.01 else f"{speedup:.2g}x"


def headline(v: Variant) -> str:
    """One line on how a variant fared: "correct, 1.84x vs eager PyTorch (candidate #12)"."""
    if v.status == "correct":
        text = f"correct, {speedup_text(v.speedup)} vs eager PyTorch" if v.speedup is not None else "correct, not timed"
    else:
        reason = " ".join(v.reason.split())
        text = f"{v.status}: {reason[:300]}" if reason else v.status
    return text + (f" (candidate #{v.candidate_id})" if v.candidate_id is not None else "")


def _sm_count(gpu: str) -> int:
    hits = [name for name in _SMS if name.lower() in gpu.lower()]
    return _SMS[max(hits, key=len)] if hits else 0


def _peaks_text(peaks: dict[str, float] | None) -> str:
    if not peaks:
        return ""
    return (f"{peaks['bytes_per_s'] / 1e12:.2f} TB/s memory bandwidth, {peaks['fp32_flops'] / 1e12:.0f} TFLOP/s fp32 "
            f"(CUDA cores), {peaks['fp16_flops'] / 1e12:.0f} TFLOP/s fp16/bf16 dense tensor cores")
