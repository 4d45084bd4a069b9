"""The reference child: runs the task (trusted code) apart from any candidate.

It draws the trial inputs (fresh seeds from the parent, varied distributions), computes the
reference outputs in float64 where the ops allow it, measures how far the task's own
native-dtype program is from that (to calibrate tolerances), and times the eager and
torch.compile baselines in this clean process. Inputs go to a file the candidate will read;
the reference outputs never leave this process: it compares the candidate's outputs with them
when the parent asks (with the parent's tolerances) and sends back only the errors and the
summaries that timed calls are checked against. Run as
`python -m warpforge.evaluate.reference SPEC.json`; it loads the task once and then serves
requests, one line of JSON on stdin each: a draw (fresh seeds) per candidate, then that
candidate's comparison; a judge that evaluates many candidates pays the start-up once.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import hashlib
import itertools
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from warpforge.config import TimingBudget
from warpforge.errors import TaskError, WarpforgeError
from warpforge.evaluate import state as module_state
from warpforge.evaluate import bench, hardware, precision, shared
from warpforge.evaluate.inputs import (DEFAULT_DISTS, apply_distribution, fast_serialization, fingerprint, fresh_variant,
                                       has_float_content, inputs_changed, iter_variant, mix_partners, output_structure,
                                       partner_of, split_outputs)
from warpforge.evaluate import debug
from warpforge.evaluate import leftovers
from warpforge.evaluate.presets import fit_globals
from warpforge.evaluate.protocol import (Baseline, BaselineFailed, CheckFresh, Compare, Compared, Draw, Drawn, FreshChecked,
                                         Loaded, ReferenceReady, ReferenceSpec, TaskFailed, Timed, TimeRound, parse,
                                         request_from_json)
from warpforge.evaluate.sandbox import Channel, die_with_parent
from warpforge.evaluate.verify import (Comparison, Tolerance, compare, native_error, reference_norm, relative_change,
                                      summarize_reference)
from warpforge.task import Task, eval_metadata_expr, import_task_module, load_task

SCALARS = (int, float, bool)


def main(spec_path: str) -> None:
    """Load the task once, then serve requests: one line of JSON on stdin each, EOF to quit."""
    die_with_parent()
    channel = Channel()
    debug.dump_stacks_if_asked()
    fast_serialization()
    spec = ReferenceSpec.from_json(Path(spec_path).read_text())
    Path(spec_path).unlink()
    device = spec.device
    # The task's program runs under PyTorch's own defaults (cuDNN convolutions in TF32, fp32 matmuls
    # in true fp32), as it does for the user and as the candidate's process runs: its native error
    # against float64, measured under them, calibrates the tolerance (verify.tolerance_for), and the
    # baselines are timed under them. An opt-in to TF32 turns it on for matmuls as well; strict fp32
    # turns it off for both, here and in the candidate's process.
    precision.apply(spec.strict_fp32, spec.allow_tf32)
    try:
        task = load_task(spec.task_path)
        module = import_task_module(task, spec.sizes)
        _, scale_note = fit_globals(module, spec.fit_bytes) if spec.fit_bytes else ({}, "")
        init_inputs = _init_inputs(module)
        torch.manual_seed(spec.init_seed)
        model = module.Model(*init_inputs).eval()
        flops = eval_metadata_expr(task, module, "flops")
        nbytes = eval_metadata_expr(task, module, "bytes")
        model = model.to(device)
    except TaskError as exc:
        channel.post(TaskFailed(str(exc)))
        return
    except Exception as exc:
        channel.post(TaskFailed(f"task {spec.task_path} failed to build its model or inputs: {type(exc).__name__}: {exc}"))
        return
    server = ReferenceServer(channel, spec, task, module, model, init_inputs, scale_note)
    gc.freeze()  # the task, torch and CUDA's objects live on: each timing run's collection skips them
    channel.post(Loaded(flops, nbytes, server.hw))
    server.serve()


class ReferenceServer:
    """The loaded task, serving the parent's requests (protocol.py) one method each: `draw` new
    input sets and their float64 references, `compare` a candidate's outputs with them,
    `time_round` one paired-timing round, `check_fresh` some timed calls' fresh inputs. It holds
    the current draw between requests; a new draw drops the last candidate's."""

    def __init__(self, channel: Channel, spec: ReferenceSpec, task: Task, module: Any, model: torch.nn.Module,
                 init_inputs: list[Any], scale_note: str) -> None:
        self.channel, self.spec, self.task, self.module, self.model = channel, spec, task, module, model
        self.init_inputs, self.scale_note, self.device = init_inputs, scale_note, spec.device
        self.hw = hardware.fingerprint(self.device)
        self.pristine = module_state.snapshot(model)  # put back before every call (state.py): stateful tasks
        self.state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        self.held: list[list[torch.Tensor]] = []  # the current draw's reference outputs, one list per input set
        self.norms: list[list[tuple[float, float]]] = []  # and their (norm, scale), for the fingerprint checks
        self.held_inputs: list[list[Any]] = []  # and its input sets (on the GPU when they fit), for paired rounds
        self.exported = shared.Exported([])  # the copies of the current draw's inputs the candidate opens
        self.dtypes: list[torch.dtype] = []

    def serve(self) -> None:
        """One request a line of JSON on stdin until EOF (or a draw that fails: TaskFailed is sent)."""
        handlers: dict[type[Any], Callable[[Any], bool]] = {
            Draw: self.draw, Compare: self.compare, TimeRound: self.time_round, CheckFresh: self.check_fresh}
        while True:
            line = sys.stdin.readline().strip()
            if not line:
                return
            request = request_from_json(line)
            if not handlers[type(request)](request):
                return

    def _partners(self) -> list[list[int]]:
        return mix_partners(len(self.held_inputs), _dists(self.task.metadata))

    def compare(self, request: Compare) -> bool:
        self.channel.post(_compare(request, self.held, self.dtypes, self.norms))
        return True

    def time_round(self, request: TimeRound) -> bool:  # one paired-timing round on the current draw's sets
        self.channel.post(Timed(_time_round(self.model, self.pristine, self.held_inputs, self.device, request,
                                            self._partners())))
        return True

    def check_fresh(self, request: CheckFresh) -> bool:  # some timed calls' inputs, made again, and their references
        self.channel.post(_check_fresh(self.model, self.pristine, self.held_inputs, self.device, request,
                                       self._partners()))
        return True

    def draw(self, request: Draw) -> bool:
        self.held.clear()  # a new draw: the last candidate's references go first
        self.norms.clear()
        self.held_inputs.clear()
        if self.exported.pointers:  # (the last candidate's process has ended)
            self.exported.free()
        if self.device == "cuda":
            torch.cuda.empty_cache()
        drawn = _draw(self.channel, self.module, self.task.metadata, self.model, self.pristine, self.init_inputs,
                      self.state, request, self.spec, self.hw, [self.scale_note] if self.scale_note else [],
                      self.exported)
        if drawn is None:
            return False
        self.held.extend(drawn[0])
        self.dtypes = drawn[1]
        self.held_inputs.extend(drawn[2])
        self.norms.extend(drawn[3])
        return True


def _draw(channel: Channel, module: Any, metadata: dict[str, Any], model: torch.nn.Module,
          pristine: list[module_state.Saved], init_inputs: list[Any],
          state: dict[str, torch.Tensor], request: Draw, spec: ReferenceSpec, hw: dict[str, Any],
          notes: list[str], exported: shared.Exported) -> tuple[list[list[torch.Tensor]], list[torch.dtype],
                                                                list[list[Any]], list[list[tuple[float, float]]]] | None:
    """One draw: fresh inputs from the request's seeds, their float64 outputs, the baselines if
    asked. Inputs go to the candidate's folder (as CUDA IPC handles of copies, added to
    `exported`, when asked and they fit the GPU); the outputs and the inputs (returned, for
    paired timing: on the GPU unless too big) stay in this process."""
    device = spec.device
    seeds, verify_sets, notes = request.trial_seeds, request.verify_sets, list(notes)
    big = False  # sets too big to hold on the GPU all at once
    parts: dict[str, float] = {}  # this process's seconds, by part (the parent reports them)
    started = time.monotonic()
    try:
        trials = _draw_trials(module, metadata, seeds[:1], device)
        budget = request.sets_budget_bytes
        if budget and len(seeds) > 1:
            per_set = _set_bytes(model, trials[0], device)
            n, verify_sets = fit_sets(len(seeds), verify_sets, per_set, int(budget))
            if n < len(seeds):
                notes.append(f"input sets reduced to {verify_sets} checked + {n - verify_sets} timed: each set and its "
                             f"float64 outputs take {per_set / 2**30:.2f} GiB, and {len(seeds)} would exceed the "
                             f"{int(budget) / 2**30:.1f} GiB allowed (sets_memory_gb)")
                seeds = seeds[:n]
                big = device == "cuda"  # sets that had to be cut down wait in host memory
        # big sets are drawn one at a time as their outputs are worked out, each moved to host
        # memory after (not before: a set drawn on the GPU, sent to the host, and sent back for
        # its two forwards crossed the bus three times)
        sets: Iterable[list[Any]] = itertools.chain(_taken(trials), _iter_trials(module, metadata, seeds[1:], device, first=1)) \
            if big else trials + _draw_trials(module, metadata, seeds[1:], device, first=1)
    except TaskError as exc:
        channel.post(TaskFailed(str(exc)))
        return None
    except Exception as exc:
        channel.post(TaskFailed(f"the task's get_inputs() failed: {type(exc).__name__}: {exc}"))
        return None
    parts["reference_draw"] = time.monotonic() - started
    started = time.monotonic()
    try:
        outputs64, norms, trials, native_dtypes, native_errors, output_notes, spreads = _reference_outputs(
            model, pristine, sets, device, on_host=big)
        notes += output_notes
    except _DrawFailed as failed:
        cause = failed.__cause__
        channel.post(TaskFailed(str(cause) if isinstance(cause, TaskError) else
                                f"the task's get_inputs() failed: {type(cause).__name__}: {cause}"))
        return None
    except Exception as exc:
        channel.post(TaskFailed(f"the task's own forward() failed: {type(exc).__name__}: {exc}",
                                traceback.format_exc()[-2000:]))
        return None
    parts["reference_outputs"] = time.monotonic() - started
    started = time.monotonic()
    if device == "cuda":
        # the float64 copies of the model and inputs, and their intermediates, go back now: the
        # allocator kept them cached through the hand-over's copies and the baselines' clones, and
        # the peak was 29.8 GB in this process for 16 GiB of sets (level1/mse_loss, an H100)
        torch.cuda.empty_cache()
    # the sets the paired rounds time the task's program on: on the GPU unless big (copying 8
    # host sets of 256 MiB to the GPU took most of each round's 0.6 s on an H100)
    held_inputs = trials
    if request.share_inputs and device == "cuda" and not big and shared.available():
        sent = [[x.cpu() if isinstance(x, torch.Tensor) else x for x in shared.export(t, exported)] for t in trials]
    else:
        sent = [[x.cpu() if isinstance(x, torch.Tensor) else x for x in t] for t in trials]
    # the outputs' shapes and dtypes (no secret: the task's program says them) let the candidate's
    # process name a misshapen output before it indexes one (inputs.output_problem)
    # ... and each set's partners, the sets its timed calls' fresh variants take elements from
    torch.save({"init_inputs": init_inputs, "trials": sent, "state_dict": state,
                "output_structure": output_structure(outputs64[0], native_dtypes),
                "set_partners": mix_partners(len(trials), _dists(metadata))}, request.inputs_path)
    del sent
    parts["reference_hand_over"] = time.monotonic() - started
    channel.post(ReferenceReady(
        [str(d) for d in native_dtypes], native_errors, notes, [int(o.numel()) for o in outputs64[0]], len(trials),
        verify_sets, sum(x.numel() * x.element_size() for x in trials[0] if isinstance(x, torch.Tensor)),
        {k: round(v, 3) for k, v in parts.items()}, spreads))
    if request.time_baselines and sys.stdin.readline().strip() == "time":  # the machine is quiet now
        _time_baselines(channel, model, pristine, trials, device, spec, hw, mix_partners(len(trials), _dists(metadata)))
    del trials
    if device == "cuda":
        torch.cuda.empty_cache()  # what the draw needed beyond the sets goes back for the candidate
    channel.post(Drawn())
    return outputs64, native_dtypes, held_inputs, norms


def _compare(request: Compare, held: list[list[torch.Tensor]], dtypes: list[torch.dtype],
             norms: list[list[tuple[float, float]]]) -> Compared:
    """Compare the candidate's verification outputs (files it wrote, read with weights_only) with
    the held references; when all match, also send every input set's reference summaries (values
    at the parent's fingerprint positions, norm, scale) for checking the timed calls."""
    tolerances = [Tolerance(float(t["rel_l2"]), float(t["max_rel"]), bool(t["exact"])) for t in request.tolerances]
    files = request.files
    worst_abs, worst_l2 = 0.0, 0.0

    def verdict(result: Comparison, summaries: list[list[dict[str, Any]]] | None = None) -> Compared:
        return Compared(result.ok, result.reason, max(worst_abs, result.max_abs_err),
                        max(worst_l2, result.rel_l2_err), summaries or [])

    for i, (path, refs) in enumerate(zip(files, held)):
        opened = shared.Opened([])
        try:
            try:
                limit = leftovers.output_file_limit(sum(r.numel() * d.itemsize for r, d in zip(refs, dtypes)))
                with leftovers.regular_file(path, limit) as checked:  # no link, no FIFO, not oversized
                    outs = torch.load(checked, weights_only=True, mmap=True)
                if isinstance(outs, list) and any(shared.is_descriptor(o) for o in outs):
                    outs = [shared.open_descriptor(o, opened) if shared.is_descriptor(o) else o for o in outs]
            except Exception as exc:
                why = str(exc) if isinstance(exc, (shared.SharingError, leftovers.RefusedFile)) else type(exc).__name__
                return verdict(Comparison(False, f"trial {i + 1}: the outputs could not be read back ({why})"))
            if not isinstance(outs, list) or len(outs) != len(refs):
                n = len(outs) if isinstance(outs, list) else 1
                return verdict(Comparison(False, f"forward() returned {n} outputs, the reference returns {len(refs)}"))
            for j, (out, ref) in enumerate(zip(outs, refs)):
                label = "the output" if len(refs) == 1 else f"output {j}"
                result = compare(out, ref, dtypes[j], tolerances[j], label)  # (piece by piece, where either is)
                worst_abs, worst_l2 = max(worst_abs, result.max_abs_err), max(worst_l2, result.rel_l2_err)
                if not result.ok:
                    return verdict(Comparison(False, f"trial {i + 1} of {len(files)}: {result.reason}"))
            del outs
        finally:
            opened.close()
    positions = [torch.tensor(p, dtype=torch.long) for p in request.positions]
    summaries = []
    for refs, set_norms in zip(held, norms):
        row = []
        for ref, pos, norm_scale in zip(refs, positions, set_norms):
            s = summarize_reference(ref, pos, norm_scale)
            row.append({"values": s.values.tolist(), "norm": s.norm, "scale": s.scale})
        summaries.append(row)
    return verdict(Comparison(True, f"matches the reference in all {len(files)} trials"), summaries=summaries)


def _init_inputs(module: Any) -> list[Any]:
    init_inputs = list(module.get_init_inputs())
    for value in init_inputs:
        if not isinstance(value, SCALARS + (torch.Tensor, tuple, list, str)) and value is not None:
            raise TaskError(f"get_init_inputs() returned a {type(value).__name__}; use numbers, tensors or lists")
    return init_inputs


def fit_sets(total: int, verify: int, per_set: int, budget: int) -> tuple[int, int]:
    """(sets, checked sets) that fit `budget` bytes at `per_set` each: all `total` when they fit;
    else as many as fit, but at least 2 checked (or `verify` when fewer were asked) and 1 timed
    set, split in about the proportion asked."""
    if per_set * total <= budget:
        return total, verify
    unseen = total - verify
    n = max(budget // max(per_set, 1), min(verify, 2) + min(unseen, 1))
    if n >= total:
        return total, verify
    timed = min(unseen, max(1, round(unseen * n / total)), n - min(verify, 2))
    return n, n - timed


def _set_bytes(model: torch.nn.Module, inputs: list[Any], device: str) -> int:
    """What one input set costs in memory while a candidate is timed, in bytes: its float64
    outputs (held here for verification), and its inputs and native outputs twice (paired timing
    keeps every set and the recent outputs alive both here and in the candidate's process).
    Outputs are sized from one native forward."""
    with torch.no_grad():
        outs = split_outputs(model(*[_to(x, device) for x in inputs]))
    tensors = [o for o in outs if isinstance(o, torch.Tensor)]
    out64 = sum(o.numel() * (8 if o.is_floating_point() else o.element_size()) for o in tensors)
    native = sum(o.numel() * o.element_size() for o in tensors)
    del outs, tensors
    return out64 + 2 * (native + sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor)))


def _taken(items: list[Any]) -> Iterator[Any]:
    """The list's items, each dropped from it as it is handed out (a big set's GPU memory goes back
    once its consumer is done with it)."""
    while items:
        yield items.pop(0)


class _DrawFailed(WarpforgeError):
    """get_inputs() failed while the sets were drawn one at a time (`_iter_trials`, as __cause__)."""


def _iter_trials(module: Any, metadata: dict[str, Any], seeds: list[int], device: str,
                 first: int = 0) -> Iterator[list[Any]]:
    """`_draw_trials`, one set at a time; a failure is raised as `_DrawFailed`."""
    for i, seed in enumerate(seeds, start=first):
        try:
            drawn = _draw_trials(module, metadata, [seed], device, first=i)
        except Exception as exc:
            raise _DrawFailed() from exc
        yield drawn[0]


def _draw_trials(module: Any, metadata: dict[str, Any], seeds: list[int], device: str,
                 first: int = 0) -> list[list[Any]]:
    """Input sets from `seeds`; set i (counting from `first`) takes the i-th input distribution."""
    dists = _dists(metadata)
    trials = []
    for i, seed in enumerate(seeds, start=first):
        torch.manual_seed(seed)
        random.seed(seed)
        # draw on the evaluation device: GPU-sized inputs take seconds to draw on the CPU
        with torch.device(device):
            inputs = module.get_inputs()
        if not isinstance(inputs, (list, tuple)) or not any(isinstance(x, torch.Tensor) for x in inputs):
            raise TaskError("get_inputs() must return a list holding at least one tensor")
        for x in inputs:
            if not isinstance(x, (torch.Tensor,) + SCALARS):
                raise TaskError(f"get_inputs() returned a {type(x).__name__}; inputs must be tensors or numbers")
        gen = torch.Generator(device=device).manual_seed(seed)
        moved = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
        drawn = apply_distribution(moved, dists[i % len(dists)], gen)
        trials.append(drawn)
        del inputs, moved, drawn
    return trials


def _dists(metadata: dict[str, Any]) -> list[str]:
    """The input distributions set i is drawn with (the i-th, cycling)."""
    return list(metadata.get("input_dists") or DEFAULT_DISTS)


def _to(x: Any, device: str, double: bool = False) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    x = x.to(device)
    return x.double() if double and x.is_floating_point() else x


def _reference_outputs(model: torch.nn.Module, pristine: list[module_state.Saved], trials: Iterable[list[Any]],
                       device: str, on_host: bool = False):
    """float64 outputs, their (norm, scale) (`reference_norm`, worked out here while the outputs are
    where they were computed), the input sets, the native dtypes, and the native program's
    (rel_l2, max_rel) errors. The outputs stay on the GPU unless they would take more than a
    quarter of its memory, or `on_host` (big sets: each set and its outputs go to host memory as
    soon as the outputs are computed). Every call starts from the module's state as built
    (`pristine`). Last, each output's `spread`: how far its float64 values move from the first set's
    over the other sets (the largest relative L2 change, on up to SPREAD_SAMPLES evenly spaced
    positions), or None for one set or a non-float output; an output that hardly moves is
    matched by a program that ignores its inputs (`verify.insensitive_note`)."""
    module_state.restore(pristine)
    model64 = copy.deepcopy(model).double()
    pristine64 = module_state.snapshot(model64)
    outputs64, norms, sets, native_errors, notes = [], [], [], [], []
    dtypes: list[torch.dtype] = []
    first: list[torch.Tensor | None] = []  # the first set's sampled float64 outputs
    spreads: list[float | None] = []
    with torch.no_grad():
        for inputs in trials:
            module_state.restore(pristine)
            native = split_outputs(model(*[_to(x, device) for x in inputs]))
            for out in native:
                if type(out) is not torch.Tensor:
                    raise TaskError(f"the task's forward() returned a {type(out).__name__}, not a tensor")
            try:
                module_state.restore(pristine64)
                exact = split_outputs(model64(*[_to(x, device, double=True) for x in inputs]))
            except Exception as exc:  # some ops have no float64 kernel: fall back to the native result
                notes.append(f"float64 reference unavailable ({type(exc).__name__}); using the task's dtype")
                exact = native
            dtypes = [o.dtype for o in native]
            native_errors.append([list(native_error(n, e)) for n, e in zip(native, exact)])
            exact = [e.detach().to(torch.float64 if e.is_floating_point() else e.dtype) for e in exact]
            norms.append([reference_norm(e) for e in exact])
            try:  # a warning's input only: whatever goes wrong here must not fail the draw
                samples = [_sampled(e) for e in exact]
                if not first:
                    first, spreads = samples, [None] * len(samples)
                else:
                    spreads = [None if a is None or b is None else max(s or 0.0, relative_change(a, b))
                               for s, a, b in zip(spreads, first, samples)]
            except Exception as exc:
                notes.append(f"the outputs' spread across input sets was not measured ({type(exc).__name__}: {exc})")
                first, spreads = [None] * len(exact), [None] * len(exact)
            outputs64.append([e.to("cpu") if on_host else e for e in exact])
            sets.append([_to(x, "cpu") for x in inputs] if on_host else inputs)
            del native, exact, inputs
            if on_host and device == "cuda":
                torch.cuda.empty_cache()
    total = sum(o.numel() * o.element_size() for outs in outputs64 for o in outs)
    if device == "cuda" and total > torch.cuda.get_device_properties(0).total_memory // 4:
        outputs64 = [[o.cpu() for o in outs] for outs in outputs64]
    return outputs64, norms, sets, dtypes, native_errors, sorted(set(notes)), spreads


SPREAD_SAMPLES = 1 << 16


def _sampled(out: torch.Tensor) -> torch.Tensor | None:
    """Up to SPREAD_SAMPLES evenly spaced elements of a float64 output (all of a small one)."""
    if not out.is_floating_point() or out.numel() == 0:
        return None
    return torch.take(out, sample_positions(out.numel(), SPREAD_SAMPLES, out.device))


def sample_positions(n: int, k: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """min(n, k) evenly spaced flat positions in [0, n), first and last included, in integer
    arithmetic: a float32 `linspace` rounds n - 1 up to n past 2**24 elements (KernelBench's
    level1/23 output holds 1.6e9), and `take` then reads past the end."""
    k = min(n, k)
    return torch.arange(k, dtype=torch.int64, device=device) * (n - 1) // max(k - 1, 1)



def _baseline_cache(spec: ReferenceSpec, hw: dict[str, Any]) -> Path | None:
    """Where this task's baseline timings on this machine and software are cached, if caching is on."""
    if not spec.baseline_cache_dir:
        return None
    fields = dataclasses.asdict(spec)
    key = {k: fields[k] for k in ("task_hash", "sizes", "device", "allow_tf32", "compile_baseline")}
    key["bench_args"] = TimingBudget.from_dict(spec.timing).calls()  # (only what paces the calls decides a timing)
    if spec.fit_bytes:  # (absent otherwise, so the keys of tasks with presets stay as they were)
        key["fit_bytes"] = spec.fit_bytes
    if spec.strict_fp32:  # (likewise)
        key["strict_fp32"] = True
    key["hardware"] = {k: hw.get(k) for k in ("gpu", "cpu", "driver", "torch", "cuda", "triton")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return Path(spec.baseline_cache_dir) / f"{digest}.json"


def _time_baselines(channel: Channel, model: torch.nn.Module, pristine: list[module_state.Saved],
                    trials: list[list[Any]], device: str, spec: ReferenceSpec, hw: dict[str, Any],
                    partners: list[list[int]]) -> None:
    cache = _baseline_cache(spec, hw)
    if cache is not None and cache.is_file():
        for raw in json.loads(cache.read_text()):
            message = parse(raw)
            if isinstance(message, (Baseline, BaselineFailed)):
                channel.post(dataclasses.replace(message, cached=True))
        return
    sent: list[dict[str, Any]] = []

    def send(message: Baseline | BaselineFailed) -> None:
        sent.append({"type": message.KIND, **message.payload()})
        channel.post(message)

    _measure_baselines(send, model, pristine, trials, device, spec, partners)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sent))
        tmp.replace(cache)


def _measure_baselines(send: Callable[[Baseline | BaselineFailed], None], model: torch.nn.Module,
                       pristine: list[module_state.Saved], trials: list[list[Any]], device: str,
                       spec: ReferenceSpec, partners: list[list[int]]) -> None:
    sets = [[_to(x, device) for x in inputs] for inputs in trials]
    prepare, fresh, _ = _timed_inputs(sets, pristine, partners, random.Random())

    def timed(fn: Any) -> dict[str, Any]:
        with torch.no_grad():
            return bench.time_calls(lambda args: fn(*args), prepare, len(sets), device, fresh=fresh,
                                    budget=TimingBudget.from_dict(spec.timing)).to_dict()

    send(Baseline("eager", timed(model)))
    if spec.compile_baseline:
        try:
            compiled = torch.compile(model)
            send(Baseline("torch_compile", timed(compiled)))
        except Exception as exc:
            send(BaselineFailed("torch_compile", f"{type(exc).__name__}: {str(exc)[:300]}"))


def _timed_inputs(sets: list[list[Any]], pristine: list[module_state.Saved], partners: list[list[int]],
                  seeds: random.Random) -> tuple[Callable[[int], list[Any]], Callable[[int], list[Any]] | None,
                                                 Callable[[int], Iterator[Any]]]:
    """(prepare, fresh, again) for bench.time_calls, as the candidate's process makes its timed
    calls' inputs: a set's clone; a fresh variant of it (inputs.fresh_variant, seeds from `seeds`;
    None when a set has no floating-point tensor, as there); the last variant made again."""
    last = [0, 0]

    def prepare(i: int) -> list[Any]:
        module_state.restore(pristine)  # as the candidate's process does before each timed call
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[i]]

    def again(i: int) -> Iterator[Any]:
        return iter_variant(sets[i], sets[partner_of(i, last[1], partners)], last[1])

    def fresh(i: int) -> list[Any]:
        module_state.restore(pristine)
        last[:] = [i, seeds.getrandbits(63)]
        return list(again(i))

    return prepare, fresh if all(has_float_content(s) for s in sets) else None, again


def _time_round(model: torch.nn.Module, pristine: list[module_state.Saved], inputs: list[list[Any]], device: str,
                request: TimeRound, partners: list[list[int]]) -> dict[str, Any]:
    """Time the task's program on the draw's input sets (the ones the candidate is timed on), with
    the arguments the parent gives this round; the sets go to the device for the round only.
    Counted calls are on fresh variants of the sets, as the candidate's are. Between calls it
    fingerprints its outputs at the candidate's positions, as the candidate's
    process does: that work slows the next call (the float64 copy it allocates; an A/A pair read
    0.80-0.86x on the CPU with it on one side only, 0.98x without it on either), and compares the
    inputs with the set they were made from, as the candidate's process checks for mutation."""
    sets = [[_to(x, device) for x in trial] for trial in inputs]
    positions = [torch.tensor(p, dtype=torch.long) for p in request.positions]
    prepare, fresh, again = _timed_inputs(sets, pristine, partners, random.Random(request.seed ^ 0x5EED))

    # (outputs are freed after their call, as the candidate's process frees them: it keeps only a
    # weak reference to each)
    def after_call(i: int, args: list[Any], out: Any, new_content: bool) -> None:
        outs = split_outputs(out)
        [fingerprint(o, p) for o, p in zip(outs, positions) if isinstance(o, torch.Tensor)]
        inputs_changed(again(i) if new_content else sets[i], args)  # the work between calls matters, not the answer

    budget = TimingBudget.from_dict(request.timing)  # as the candidate's run in the same round: its first, or warm
    with torch.no_grad():
        timing = bench.time_calls(lambda args: model(*args), prepare, len(sets), device, after_call=after_call,
                                  rng=random.Random(request.seed), fresh=fresh,
                                  budget=budget if request.first else budget.warm_round())
    sets.clear()  # the round's device copies go now (the closures above still name the list)
    if device == "cuda":
        torch.cuda.empty_cache()
    return timing.to_dict()


def _check_fresh(model: torch.nn.Module, pristine: list[module_state.Saved], held_inputs: list[list[Any]],
                 device: str, request: CheckFresh, partners: list[list[int]]) -> FreshChecked:
    """The reference summaries of the timed calls `request` names: each one's inputs made again
    from its (set, seed) on the evaluation device, as the candidate's process made them, and its
    outputs computed in float64 (the task's dtype where an op has none, as for the draw)."""
    positions = [torch.tensor(p, dtype=torch.long) for p in request.positions]
    module_state.restore(pristine)
    model64 = copy.deepcopy(model).double()
    pristine64 = module_state.snapshot(model64)
    rows = []
    with torch.no_grad():
        for index, seed in request.calls:
            base = [_to(x, device) for x in held_inputs[index]]
            other = [_to(x, device) for x in held_inputs[partner_of(index, seed, partners)]]
            inputs = fresh_variant(base, other, seed)
            try:
                module_state.restore(pristine64)
                outs = split_outputs(model64(*[_to(x, device, double=True) for x in inputs]))
            except Exception:  # no float64 kernel: the task's dtype, as _reference_outputs falls back
                module_state.restore(pristine)
                outs = split_outputs(model(*inputs))
            row = []
            for out, pos in zip(outs, positions):
                s = summarize_reference(out.detach().to(torch.float64 if out.is_floating_point() else out.dtype), pos)
                row.append({"values": s.values.tolist(), "norm": s.norm, "scale": s.scale})
            rows.append(row)
            del base, other, inputs, outs
    del model64
    if device == "cuda":
        torch.cuda.empty_cache()
    return FreshChecked(rows)


if __name__ == "__main__":
    main(sys.argv[1])
    debug.exit_now()
