"""The candidate child: compile -> verify -> bench -> profile, reporting each stage to the parent.

Run as `python -m warpforge.evaluate.worker SPEC.json` in a sandboxed process (sandbox.py).
This is the only place candidate code runs. Everything the harness needs is bound (guard.py)
before the candidate is imported, and re-checked after import and after every call.
Verification here only *collects* evidence (outputs, fingerprints, mutations, threads); the
parent compares outputs with the reference, which this process never sees, and decides.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
import os
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from warpforge import languages
from warpforge.config import TimingBudget
from warpforge.errors import CandidateFault, MisshapenOutputs, Rejected
from warpforge.evaluate import bench, debug, inputs as inputs_mod, precision, sandbox, shared, state
from warpforge.evaluate.guard import Guard
from warpforge.evaluate.inputs import fast_serialization, fingerprint, inputs_changed, output_problem, split_outputs
from warpforge.evaluate import protocol
from warpforge.evaluate.protocol import (CandidateSpec, Compiled, CompileFailed, Crashed, Done, FirstRound,
                                         HarnessFailed, Profiled, Ready, Refused, Round, StageEntered, Verified,
                                         WrongOutputs)

_Tensor = torch.Tensor
_expired = StorageWeakRef.expired  # bound now: replacing it on the class later does not reach this
_restore = state.restore  # bound now, as the guard binds what it checks
_mutated = inputs_changed
_type = type
_perf = time.perf_counter
_dumps = json.dumps
_urandom = os.urandom
_from_bytes = int.from_bytes


def _same(a: Any, b: Any) -> bool:
    """Fingerprints equal, NaN included (nan != nan, but both print as NaN)."""
    return bool(_dumps(a) == _dumps(b))


@dataclasses.dataclass(frozen=True)
class StageCall:
    """One step of a stage as its boundary saw it (pytest's CallInfo is the model): what it
    returned or the exception it raised, and how long it took."""

    value: Any
    error: BaseException | None
    trace: str
    seconds: float

    def ending(self, candidate_path: str = "") -> protocol.Message:
        """The message that ends the process's work after this step failed: a harness rule's
        refusal, misshapen outputs, the candidate's own exception (blamed on the call that raised
        it, its traceback from there inward), or, with no candidate call on the traceback, the
        harness's own failure: never the harness's crash reported as the candidate's."""
        error = self.error
        assert error is not None, "ending() is for a step that failed"
        if isinstance(error, Rejected):
            return Refused(str(error))
        if isinstance(error, MisshapenOutputs):
            return WrongOutputs(str(error))
        if isinstance(error, CandidateFault):
            return Crashed(str(error), "", call="")
        message = f"{_type(error).__name__}: {str(error)[:2000]}"
        call, trace = blame(error, candidate_path)
        if call is not None:
            return Crashed(message, trace, call)
        if _device_error(error):  # its kernels' error, or its memory use, seen later by harness code
            return Crashed(message, trace, "device")
        return HarnessFailed(f"{message} (in {_innermost_own_frame(error)})", self.trace)


def _stage(channel: sandbox.Channel, name: str | None, step: Callable[[], Any]) -> StageCall:
    """Run one step, entering stage `name` first (None: the step belongs to the current stage).
    Every exception stops at this boundary, SystemExit and KeyboardInterrupt from candidate code
    included: each is a verdict, never this process's own exit."""
    if name is not None:
        channel.post(StageEntered(name))
    t0 = _perf()
    try:
        value = step()
    except BaseException as exc:
        return StageCall(None, exc, traceback.format_exc()[-6000:], _perf() - t0)
    return StageCall(value, None, "", _perf() - t0)


def main() -> None:
    sandbox.die_with_parent()
    channel = sandbox.Channel()
    debug.dump_stacks_if_asked()
    fast_serialization()
    # started before the reference finishes, so torch is imported by the time the spec arrives;
    # "ready" tells the parent this process has gone idle and the baselines may be timed
    _warm_up()
    _gc_freeze()  # what start-up made lives on: each timing run's collection skips it (bench.time_calls)
    channel.post(Ready())
    spec_path = sys.stdin.readline().strip()
    if not spec_path:
        return
    spec = CandidateSpec.from_json(Path(spec_path).read_text())
    Path(spec_path).unlink()  # the candidate must not read the fingerprint positions or seeds
    os.environ.update(spec.env)  # this candidate's compile caches (the process started before it was known)
    precision.apply(spec.strict_fp32)  # as the reference's process, before any candidate code
    first = TimingBudget.from_dict(spec.timing)  # the parent's EvalConfig.timing; made before any candidate code
    budgets = (first, first.warm_round())  # the first timed run's budget, then each paired round's
    guard = Guard([bench, inputs_mod, sandbox, shared, protocol, sys.modules[__name__], *protocol.MESSAGES.values(),
                   StageCall])
    check = guard.check  # bound now: replacing Guard.check on the class later does not reach this
    threads_before = set(threading.enumerate())
    imported = _stage(channel, "compile", lambda: _import_candidate(spec.candidate_path))
    if imported.error is not None:
        channel.post(CompileFailed(f"{_type(imported.error).__name__}: {imported.error}",
                                   blame(imported.error, spec.candidate_path)[1]))
        return
    if spec.compile_only:  # a compile-pool job: the import filled the compile cache, nothing runs
        channel.post(Compiled(imported.seconds))
        return
    channel.post(_stages(channel, imported, spec, check, threads_before, budgets))


def _stages(channel: sandbox.Channel, imported: StageCall, spec: CandidateSpec, check: Callable[[], str | None],
            threads_before: set[threading.Thread], budgets: tuple[TimingBudget, TimingBudget]) -> protocol.Message:
    """The candidate's stages after its import: build the model (still "compile"), verify,
    bench, profile. Returns the message that ends the process's work."""
    device = spec.device
    data = torch.load(spec.inputs_path, weights_only=True, mmap=True)  # tmpfs pages, not a copy
    # sets the reference process shared as CUDA IPC handles: opened here, already on the GPU (and
    # copies of its own, so what this process does to them reaches nothing the reference uses)
    opened = shared.Opened([])
    in_place = any(shared.is_descriptor(x) for t in data["trials"] for x in t)
    if in_place:
        data["trials"] = [[shared.open_descriptor(x, opened) if shared.is_descriptor(x) else _to_device([x], device)[0]
                           for x in t] for t in data["trials"]]

    def build() -> tuple[torch.nn.Module, list[state.Saved]]:
        problem = check() or _new_threads(threads_before)
        if problem:
            raise Rejected(problem)
        model = _build_model(imported.value, data, spec, device)
        return model, state.snapshot(model)  # restored before every call: a stateful module sees the same history

    built = _stage(channel, None, build)
    if built.error is not None:
        return built.ending(spec.candidate_path)
    model, saved = built.value
    channel.post(Compiled(imported.seconds + built.seconds))
    exported = shared.Exported([])  # the verified outputs' copies the reference process opens
    expected = data.get("output_structure")  # the reference's [shape, dtype] per output (reference.py)
    verified = _stage(channel, "verify", lambda: _verify(channel, model, saved, data["trials"][: spec.verify_sets],
                                                          spec, device, check, threads_before, exported, expected))
    if verified.error is not None:
        return verified.ending(spec.candidate_path)
    earlier = _weak_refs(verified.value)
    del verified  # the outputs are freed: only a candidate that kept them keeps their memory (see _bench)
    answer = protocol.read_command(sys.stdin.readline())
    if exported.pointers:  # the reference process has compared them
        exported.free()
    if answer is not protocol.Command.BENCH:
        return Done()
    timed = _stage(channel, "bench", lambda: _bench(channel, model, saved, data["trials"], spec, device, check,
                                                    threads_before, earlier, budgets, in_place, expected,
                                                    data.get("set_partners")))
    if timed.error is not None:
        return timed.ending(spec.candidate_path)
    if spec.profile:
        profiled = _stage(channel, "profile", lambda: _profile(model, data["trials"][0], spec, device))
        if profiled.error is not None:
            return profiled.ending(spec.candidate_path)
        channel.post(Profiled(profiled.value))
    return Done()


def _warm_up() -> None:
    """Pay the one-time costs before any candidate code, while this process waits as a spare: the
    CUDA context and the kernel languages' imports (Triton's). Not the profiler: once CUPTI has
    started in a process it slows every later kernel launch there (Kineto leaves it subscribed; an
    LSTM's forward took 36.0 ms instead of 25.7 ms on an H100), so the profile stage starts it after
    the timing, and pays its 3.5-4.1 s set-up there (docs/timing.md, "A/A: the reference as its
    own candidate")."""
    if torch.cuda.is_available():
        torch.ones(1024, device="cuda").sum().item()
        torch.cuda.synchronize()
    languages.warm_up()


def _import_candidate(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("candidate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    return module


# Where the candidate's code is called. An exception whose traceback passes through one of these
# frames is the candidate's, named by the call and shown from there inward; a frame of the
# candidate's file further in (a method of its module the harness called) is the candidate's too.
def _construct(model_cls: Any, init_inputs: list[Any]) -> Any:
    return model_cls(*init_inputs)


def _forward(model: Any, args: list[Any]) -> Any:
    return model(*args)


_CANDIDATE_CALLS = {"_import_candidate": "importing the candidate", "_construct": "ModelNew(*init_inputs)",
                    "_forward": "forward()", "_timed_forward": "forward()"}
_THIS_FILE = _forward.__code__.co_filename
_OWN_CODE = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep  # the warpforge package


def _own(tb: Any) -> bool:
    return os.path.realpath(tb.tb_frame.f_code.co_filename).startswith(_OWN_CODE)


def blame(error: BaseException, candidate_path: str) -> tuple[str | None, str]:
    """Which of the candidate's calls raised `error` (None: none did) and its traceback from the
    first frame past the harness's: no harness frame is shown as the candidate's error."""
    entries = []
    tb = error.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    for entry in entries:
        code = entry.tb_frame.f_code
        if code.co_filename == _THIS_FILE and code.co_name in _CANDIDATE_CALLS:
            return _CANDIDATE_CALLS[code.co_name], _format(error, entry.tb_next)
    past_harness = None
    for entry in entries:
        if entry.tb_frame.f_code.co_filename == candidate_path and candidate_path:
            return "the candidate's code", _format(error, past_harness)
        if _own(entry):
            past_harness = entry.tb_next
    return None, _format(error, None)


def _format(error: BaseException, tb: Any) -> str:
    return "".join(traceback.format_exception(_type(error), error, tb))[-6000:]


def _device_error(error: BaseException) -> bool:
    """An error of the device's work or of memory, which surfaces in whatever call comes next
    (a CUDA kernel's fault at the next synchronisation, an allocation after the candidate's)."""
    text = str(error)
    return isinstance(error, torch.cuda.OutOfMemoryError) or _type(error).__name__ == "AcceleratorError" or any(
        s in text for s in ("CUDA error", "CUDA out of memory", "can't allocate memory"))


def _innermost_own_frame(error: BaseException) -> str:
    """Where in warpforge's code `error` was raised: "warpforge/evaluate/inputs.py:69 in fingerprint"."""
    where = "warpforge"
    tb = error.__traceback__
    while tb is not None:
        if _own(tb):
            path = os.path.realpath(tb.tb_frame.f_code.co_filename)[len(_OWN_CODE):]
            where = f"warpforge/{path}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return where


def _build_model(module: Any, data: dict[str, Any], spec: CandidateSpec, device: str) -> torch.nn.Module:
    model_cls = getattr(module, "ModelNew", None)
    if not (isinstance(model_cls, _type) and issubclass(model_cls, torch.nn.Module)):
        raise CandidateFault("the candidate must define class ModelNew(nn.Module)")
    torch.manual_seed(spec.init_seed)
    model = _construct(model_cls, data["init_inputs"])
    reference_state = data["state_dict"]
    own = model.state_dict()
    # same parameter names and shapes as Model: give it the reference's exact weights
    if own.keys() == reference_state.keys() and all(own[k].shape == reference_state[k].shape for k in own):
        try:  # the candidate's own tensors refuse the copy (e.g. made under torch.inference_mode): its fault
            model.load_state_dict(reference_state)
        except RuntimeError as exc:
            raise CandidateFault(f"copying the reference's weights into ModelNew's parameters and buffers failed: "
                                 f"{str(exc)[:600]}") from exc
    return model.to(device).eval()


def _to_device(values: list[Any], device: str) -> list[Any]:
    return [v.to(device).clone() if isinstance(v, _Tensor) else v for v in values]


def _poison(device: str, nbytes: int) -> None:
    """Fill freed allocator memory with NaN bytes so an output nobody wrote shows as NaN."""
    junk = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, device=device)
    junk.fill_(0xFF)
    if device == "cuda":
        torch.cuda.synchronize()
    del junk


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# Threads that torch.compile's machinery starts and keeps (seen on an H100: Inductor's
# "InductorSubproc" reader, tqdm's monitor; also Inductor's watchdog), told apart by the file of the
# code they run, not by name, which any thread can take. Inductor also compiles in a
# ThreadPoolExecutor, whose workers run stdlib code: see _pool_job_is_machinery.
_SITE = os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))
_MACHINERY_CODE = tuple(os.path.join(_SITE, *p.split("/")) + os.sep for p in ("torch/_inductor", "torch/_dynamo", "triton", "tqdm"))
_current_frames = sys._current_frames  # bound now, as the guard binds what it checks
_POOL_WORKER = os.path.realpath(os.path.join(os.path.dirname(threading.__file__), "concurrent", "futures", "thread.py"))


def _new_threads(before: set[threading.Thread]) -> str | None:
    extra = [t.name for t in threading.enumerate() if t not in before and t.is_alive() and not _machinery_thread(t)]
    return f"the candidate started background threads ({', '.join(extra)}), which can hide work from the timer" if extra else None


def _machinery_thread(thread: threading.Thread) -> bool:
    if _type(thread).run is not threading.Thread.run:  # a Thread subclass (tqdm's monitor) runs its own run()
        return _code_file(_type(thread).run).startswith(_MACHINERY_CODE)
    target = getattr(thread, "_target", None)
    if _code_file(target) == _POOL_WORKER:
        return _pool_job_is_machinery(thread)
    return _code_file(target).startswith(_MACHINERY_CODE)  # a torch op as target has no code: not exempt


def _pool_job_is_machinery(thread: threading.Thread) -> bool:
    """An executor's worker is the machinery's while idle or running the machinery's job; one
    running the candidate's function (or a torch op handed to the pool) is the candidate's."""
    frame = _current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "run" and os.path.realpath(frame.f_code.co_filename) == _POOL_WORKER:
            return _code_file(getattr(frame.f_locals.get("self"), "fn", None)).startswith(_MACHINERY_CODE)
        frame = frame.f_back
    return True


def _code_file(fn: Any) -> str:
    """The source file of a function, bound method or functools.partial of one; "" for builtins."""
    from functools import partial

    for _ in range(8):
        if _type(fn) is not partial:
            break
        fn = fn.func
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return os.path.realpath(code.co_filename) if _type(code) is _type(_code_file.__code__) else ""


def _bits(values: list[Any]) -> list[Any]:
    return [v.detach().clone() if isinstance(v, _Tensor) else v for v in values]


def _storage(t: _Tensor) -> int:
    return int(t.untyped_storage().data_ptr()) if t.numel() else -1


def _check_outputs(out: Any, expected: Any, least: list[int], where: str = "") -> list[_Tensor]:
    """forward()'s outputs as a list, once their structure is the reference's (count, plain
    tensors, shape, dtype, elements for every fingerprint position); before anything indexes them."""
    outs = split_outputs(out)
    for o in outs:
        if _type(o) is not _Tensor and isinstance(o, _Tensor):
            raise Rejected(f"forward() returned a {_type(o).__name__}, a tensor subclass; outputs must be plain tensors")
    problem = output_problem(outs, expected, least)
    if problem:
        raise MisshapenOutputs(where + problem)
    return outs


def _least(positions: list[torch.Tensor]) -> list[int]:
    """Elements each output needs for its fingerprint positions (all of it: they hold its last)."""
    return [int(p.max()) + 1 if p.numel() else 0 for p in positions]


def _verify(channel: sandbox.Channel, model: torch.nn.Module, saved: list[state.Saved], trials: list[list[Any]],
            spec: CandidateSpec, device: str, check: Callable[[], str | None], threads_before: set[threading.Thread],
            exported: shared.Exported, expected: Any = None) -> list[list[_Tensor]]:
    positions = [torch.tensor(p, dtype=torch.long) for p in spec.positions]
    least = _least(positions)
    kept: list[list[_Tensor]] = []
    after_sync: list[list[dict[str, Any]]] = []
    files = []
    workdir = Path(spec.workdir)
    for i, trial in enumerate(trials):
        args = _to_device(trial, device)
        pristine = _bits(args)
        _poison(device, spec.poison_bytes)
        _restore(saved)
        with torch.no_grad():
            out = _forward(model, args)
        outs = _check_outputs(out, expected, least)
        at_return = [fingerprint(o, p) if isinstance(o, _Tensor) else None for o, p in zip(outs, positions)]
        _sync(device)
        synced = [fingerprint(o, p) if isinstance(o, _Tensor) else None for o, p in zip(outs, positions)]
        problem = check() or _new_threads(threads_before)
        if problem:
            raise Rejected(problem)
        if not _same(at_return, synced):
            raise Rejected("an output was still changing after forward() returned (work deferred to another stream "
                           "or thread)")
        if _mutated(pristine, args):
            raise Rejected("forward() modified its input tensors in place")
        path = workdir / f"out_{i}.pt"
        # copies now (snapshots, as a file is): as CUDA IPC handles of copies when asked, else in the file
        sent = shared.export(outs, exported) if spec.share_outputs and device == "cuda" and _share_ok() else outs
        torch.save([o if shared.is_descriptor(o) else _compact(o.detach().cpu()) if isinstance(o, _Tensor) else None
                    for o in sent], path)
        del sent
        files.append(str(path))
        kept.append(outs)
        after_sync.append(synced)
    for i, (outs, synced) in enumerate(zip(kept, after_sync)):
        now = [fingerprint(o, p) if isinstance(o, _Tensor) else None for o, p in zip(outs, positions)]
        if not _same(now, synced):
            raise Rejected(f"the output of call {i + 1} changed during later calls (an output buffer reused across "
                           "calls or written late)")
    channel.post(Verified(files, [[_type(o).__name__ for o in outs] for outs in kept]))
    return kept


_share_ok = shared.available  # bound now, as the guard binds what it checks
_gc_freeze = gc.freeze


def _compact(t: _Tensor) -> _Tensor:
    """The tensor alone, without the rest of its storage: torch.save writes a view's whole
    storage, and an honest output can be a view of a much larger buffer (on the CPU, torch
    2.13's F.mse_loss returns a 0-dim view of its BATCH x DIM temporary: 2 MiB for 4 bytes),
    which the parent would refuse as an outputs file far bigger than the outputs."""
    if t.untyped_storage().nbytes() > t.numel() * t.element_size():
        return t.clone()
    return t


def _weak_refs(outputs: list[list[_Tensor]]) -> dict[int, StorageWeakRef]:
    """Each output's storage address and a weak reference to that storage."""
    return {_storage(o): StorageWeakRef(o.untyped_storage()) for outs in outputs for o in outs
            if isinstance(o, _Tensor) and o.numel()}


def _bench(channel: sandbox.Channel, model: torch.nn.Module, saved: list[state.Saved], trials: list[list[Any]],
           spec: CandidateSpec, device: str, check: Callable[[], str | None], threads_before: set[threading.Thread],
           earlier: dict[int, StorageWeakRef], budgets: tuple[TimingBudget, TimingBudget], in_place: bool = False,
           expected: Any = None, partners: list[list[int]] | None = None) -> None:
    positions = [torch.tensor(p, dtype=torch.long) for p in spec.positions]
    least = _least(positions)
    # shared sets are this process's own copies on the GPU already; file sets are copied there
    sets = trials if in_place else [_to_device(t, device) for t in trials]
    prints: list[list[Any]] = []
    native_threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0

    def prepare(i: int) -> list[Any]:
        _restore(saved)
        return [v.clone() if isinstance(v, _Tensor) else v for v in sets[i]]

    # counted timed calls run on inputs no call has seen (bench.time_calls `fresh`): a new variant
    # of a set each time, from a seed out of the OS's entropy (none the candidate could predict);
    # the seed goes with the call's fingerprints, so the parent can have some of them checked
    partners = inputs_mod.checked_partners(partners, len(sets))  # (the draw's file says which)
    last = [0, 0]  # the last fresh call's set and seed

    def variant(i: int, seed: int) -> Iterator[Any]:
        return inputs_mod.iter_variant(sets[i], sets[inputs_mod.partner_of(i, seed, partners)], seed)

    def fresh(i: int) -> list[Any]:
        _restore(saved)
        last[:] = [i, _from_bytes(_urandom(8), "little") >> 1]
        return list(variant(i, last[1]))

    # Every earlier output (verified or timed) is remembered by address, with a weak reference to
    # its storage. One still alive when a later call returns its address again was kept by the
    # candidate and handed back; one that was freed may honestly be given out again by the
    # allocator. (Holding the outputs themselves instead took the memory of every verified and
    # every recent output: 36 GiB more for a task with 6 GiB outputs, which ran the GPU out.)

    def after_call(i: int, args: list[Any], out: Any, new_content: bool) -> None:
        """The verify stage's rules, for every timed call too."""
        outs = _check_outputs(out, expected, least, f"in a timed call (input set {i + 1}), ")
        prints.append([i, [fingerprint(o, p) if isinstance(o, _Tensor) else None for o, p in zip(outs, positions)],
                       *([last[1]] if new_content else [])])
        problem = check() or _new_threads(threads_before)
        if problem:
            raise Rejected(problem)
        if _mutated(variant(i, last[1]) if new_content else sets[i], args):
            raise Rejected("forward() modified its input tensors in place during a timed call")
        inputs = {_storage(a) for a in args if isinstance(a, _Tensor)} - {-1}
        for o in outs:
            key = _storage(o)
            if key != -1 and (key in inputs or (key in earlier and not _expired(earlier[key]))):
                raise Rejected("a timed call returned a buffer it did not allocate for that call (an input, or an "
                               "earlier call's output, which is still alive)")
        earlier.update(_weak_refs([outs]))

    def _timed_forward(args: list[Any]) -> Any:  # (named for `blame`)
        return model(*args)

    # no_grad around the whole loop, as the reference process times its baselines: entering it per
    # call put a few microseconds of host time inside every timed call (an A/A bias on the CPU)
    rng = random.Random(spec.bench_seed)
    new_content = all(inputs_mod.has_float_content(t) for t in sets)  # (else every call counts, as before)
    with torch.no_grad():
        timing = bench.time_calls(_timed_forward, prepare, len(sets), device, rng=rng,
                                  unseen_sets=len(sets) - spec.verify_sets, after_call=after_call,
                                  fresh=fresh if new_content else None, budget=budgets[0])
    grown = (len(os.listdir("/proc/self/task")) - native_threads) if native_threads else 0
    channel.post(FirstRound(timing.to_dict(), prints, grown))
    # paired timing: further rounds while the parent asks, each checked like the first
    while protocol.read_command(sys.stdin.readline()) is protocol.Command.AGAIN:
        prints.clear()
        with torch.no_grad():
            timing = bench.time_calls(_timed_forward, prepare, len(sets), device, rng=rng, after_call=after_call,
                                      fresh=fresh if new_content else None, budget=budgets[1])
        channel.post(Round(timing.to_dict(), prints))


def _profile(model: torch.nn.Module, trial: list[Any], spec: CandidateSpec, device: str) -> dict[str, Any]:
    from warpforge.evaluate.profile import kernels_launched

    args = _to_device(trial, device)
    with torch.no_grad():
        return kernels_launched(lambda: _forward(model, args), device, spec.kernel_names,
                                [os.environ.get(tc.env_var, "") for tc in languages.toolchains() if tc.modules])


if __name__ == "__main__":
    main()
    debug.exit_now()
