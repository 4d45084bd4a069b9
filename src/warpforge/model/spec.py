"""The model spec: a TOML file that says how to build a whole model and what it serves.

`load_spec(path)` reads and checks it into a frozen `Spec`; every mistake is a ConfigError of one
sentence naming the file and the key. It only parses: nothing is imported or built here
(build.py does that). The format, with every key, is in docs/models.md.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warpforge.errors import ConfigError, UsageError

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
INT_DTYPES = ("int64", "int32")
# the tasks' "cpu" size preset, when the spec names none: each axis of the smallest regime capped
# here, so a test of the extracted tasks on a CPU stays small (a tiny model at S=16 runs in ms)
CPU_AXIS_CAP = 16

_TOP_KEYS = {"name", "model", "inputs", "regimes", "checks"}
_MODEL_KEYS = {"source", "config", "config_file", "dtype", "seed", "state_dict", "forward_kwargs"}
_INPUT_KEYS = {"name", "dtype", "shape", "range", "mean", "std"}
_CHECK_KEYS = {"compile", "export"}


@dataclass(frozen=True)
class InputSpec:
    """One input of the forward: named axes in `shape` take their size from the regime."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]
    low: int = 0
    """Integers: drawn uniformly from [low, high)."""
    high: int = 0
    mean: float = 0.0
    """Floats: drawn from N(mean, std)."""
    std: float = 1.0

    def sizes(self, regime: Regime) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else regime.axes[d] for d in self.shape)


@dataclass(frozen=True)
class Regime:
    """One served workload: the named axes' sizes (or, for a Python-file model, the file's globals
    that get_inputs() reads)."""

    name: str
    axes: dict[str, int] = field(default_factory=dict)
    weight: float = 1.0
    """The regime's share of the ranking (regimes count equally unless weighted)."""


@dataclass(frozen=True)
class Spec:
    path: Path
    name: str
    kind: str
    """"transformers" (a class of the transformers library) or "file" (a Python file's Model)."""
    target: str
    """The transformers class name, or the Python file's absolute path."""
    config: dict[str, Any]
    config_file: Path | None
    dtype: str
    seed: int
    state_dict: Path | None
    forward_kwargs: dict[str, Any]
    inputs: tuple[InputSpec, ...]
    """Empty for a Python file that brings get_inputs()."""
    regimes: tuple[Regime, ...]
    cpu_regime: Regime
    """The extracted tasks' "cpu" size preset (`[regimes] cpu = {...}`, else the smallest regime capped)."""
    keep_compile: bool
    keep_export: bool

    def regime(self, name: str) -> Regime:
        for r in (*self.regimes, self.cpu_regime):
            if r.name == name:
                return r
        raise UsageError(f"{self.path}: no regime named {name!r}; the spec has {', '.join(r.name for r in self.regimes)}")


def load_spec(path: str | Path) -> Spec:
    """Read and check a model spec; one-sentence errors (ConfigError) for anything wrong in it."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"model spec {path} does not exist: give the path of a .toml file (docs/models.md)")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p} is not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read model spec {p}: {exc}") from None
    return _parse(p.resolve(), data)


def _parse(p: Path, data: dict[str, Any]) -> Spec:
    _known(p, "the top level", data, _TOP_KEYS)
    model = _table(p, data, "model", required=True)
    _known(p, "[model]", model, _MODEL_KEYS)
    source = model.get("source")
    if not isinstance(source, str) or not source:
        raise ConfigError(f"{p}: [model] source is missing: write source = \"transformers:LlamaForCausalLM\" "
                          "or source = \"model.py\" (a file defining Model and get_init_inputs)")
    kind, target = _source(p, source)
    config = _table(p, model, "config", where="[model] config")
    config_file = _path(p, model.get("config_file"), "[model] config_file")
    if kind == "file" and (config or config_file):
        raise ConfigError(f"{p}: [model] config and config_file are for transformers classes; a Python file "
                          "builds its Model from get_init_inputs()")
    if config and config_file:
        raise ConfigError(f"{p}: give [model] config or config_file, not both")
    dtype = _choice(p, model.get("dtype", "float32"), FLOAT_DTYPES, "[model] dtype")
    seed = model.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"{p}: [model] seed must be an integer, got {seed!r}")
    state_dict = _path(p, model.get("state_dict"), "[model] state_dict")
    forward_kwargs = _table(p, model, "forward_kwargs", where="[model] forward_kwargs")
    inputs = _inputs(p, data.get("inputs"))
    if kind == "transformers" and not inputs:
        raise ConfigError(f"{p}: a transformers model needs [[inputs]], e.g. name = \"input_ids\", dtype = "
                          "\"int64\", shape = [\"B\", \"S\"], range = [0, 32000]")
    regimes, cpu = _regimes(p, data.get("regimes"), inputs)
    checks = _table(p, data, "checks")
    _known(p, "[checks]", checks, _CHECK_KEYS)
    for key in _CHECK_KEYS:
        if not isinstance(checks.get(key, True), bool):
            raise ConfigError(f"{p}: [checks] {key} must be true or false")
    name = data.get("name", p.stem)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{p}: name must be a non-empty string")
    return Spec(path=p, name=name, kind=kind, target=target, config=config, config_file=config_file, dtype=dtype,
                seed=seed, state_dict=state_dict, forward_kwargs=forward_kwargs, inputs=inputs, regimes=regimes,
                cpu_regime=cpu, keep_compile=checks.get("compile", True), keep_export=checks.get("export", True))


def _source(p: Path, source: str) -> tuple[str, str]:
    if source.startswith("transformers:"):
        name = source.partition(":")[2]
        if not name.isidentifier():
            raise ConfigError(f"{p}: [model] source {source!r} must name a class, e.g. transformers:LlamaForCausalLM")
        return "transformers", name
    file = Path(source.removeprefix("file:"))
    if file.suffix != ".py":
        raise ConfigError(f"{p}: [model] source {source!r} is neither transformers:ClassName nor a .py file")
    file = file if file.is_absolute() else p.parent / file
    if not file.is_file():
        raise ConfigError(f"{p}: [model] source {source!r}: {file} does not exist (paths are relative to the spec)")
    return "file", str(file.resolve())


def _inputs(p: Path, raw: Any) -> tuple[InputSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise ConfigError(f"{p}: inputs must be an array of tables ([[inputs]] blocks)")
    found: list[InputSpec] = []
    for i, item in enumerate(raw, 1):
        where = f"[[inputs]] {item.get('name', f'number {i}')}"
        _known(p, where, item, _INPUT_KEYS)
        name = item.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"{p}: {where} needs a name that is a Python identifier (the forward's argument)")
        if name in {f.name for f in found}:
            raise ConfigError(f"{p}: two inputs are named {name!r}")
        dtype = _choice(p, item.get("dtype"), FLOAT_DTYPES + INT_DTYPES, f"{where} dtype")
        shape = item.get("shape")
        if not isinstance(shape, list) or not shape or not all(
                (isinstance(d, int) and not isinstance(d, bool) and d > 0) or (isinstance(d, str) and d.isidentifier())
                for d in shape):
            raise ConfigError(f"{p}: {where} shape must be a list of positive sizes and axis names, e.g. [\"B\", \"S\"]")
        low = high = 0
        if dtype in INT_DTYPES:
            bounds = item.get("range")
            if not (isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int) for b in bounds)
                    and bounds[0] < bounds[1]):
                raise ConfigError(f"{p}: {where} is an integer input: give range = [low, high) with low < high, "
                                  "e.g. range = [0, 32000] for token ids")
            low, high = bounds
        elif "range" in item:
            raise ConfigError(f"{p}: {where} is a {dtype} input: give mean and std, not range")
        mean, std = item.get("mean", 0.0), item.get("std", 1.0)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (mean, std)) \
                or std < 0:
            raise ConfigError(f"{p}: {where} mean and std must be finite numbers, std >= 0")
        found.append(InputSpec(name, dtype, tuple(shape), low, high, float(mean), float(std)))
    return tuple(found)


def _regimes(p: Path, raw: Any, inputs: tuple[InputSpec, ...]) -> tuple[tuple[Regime, ...], Regime]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: [regimes] must be a table of name = {{axis = size, ...}}, e.g. prefill = {{B = 8, S = 512}}")
    axes = {d for i in inputs for d in i.shape if isinstance(d, str)}
    regimes = []
    for name, values in raw.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{p}: regime {name!r} must be a table of sizes, e.g. {name} = {{B = 8, S = 512}}")
        weight = values.get("weight", 1.0)
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight > 0:
            raise ConfigError(f"{p}: regime {name!r} weight must be a positive number")
        sizes = {k: v for k, v in values.items() if k != "weight"}
        for k, v in sizes.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{p}: regime {name!r} sets {k} = {v!r}: sizes must be positive integers")
        if inputs:
            missing, extra = sorted(axes - set(sizes)), sorted(set(sizes) - axes)
            if missing:
                raise ConfigError(f"{p}: regime {name!r} does not size the axis {missing[0]} that the inputs use")
            if extra:
                raise ConfigError(f"{p}: regime {name!r} sets {extra[0]}, which no input's shape uses")
        regimes.append(Regime(name, sizes, float(weight)))
    if not regimes and axes:
        raise ConfigError(f"{p}: [regimes] is missing: size the axes {', '.join(sorted(axes))}, e.g. "
                          "prefill = {B = 8, S = 512}")
    served = [r for r in regimes if r.name != "cpu"] or [Regime("default")]
    cpu = next((r for r in regimes if r.name == "cpu"), None)
    if cpu is None:
        smallest = min(served, key=lambda r: math.prod(r.axes.values()))
        cpu = Regime("cpu", {k: min(v, CPU_AXIS_CAP) for k, v in smallest.axes.items()})
    return tuple(served), cpu


def _table(p: Path, data: dict[str, Any], key: str, required: bool = False, where: str | None = None) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        if required:
            raise ConfigError(f"{p}: the [{key}] table is missing")
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{p}: {where or f'[{key}]'} must be a table")
    return dict(value)


def _known(p: Path, where: str, table: dict[str, Any], keys: set[str]) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise ConfigError(f"{p}: unknown key {unknown[0]!r} in {where}; known keys are {', '.join(sorted(keys))}")


def _choice(p: Path, value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ConfigError(f"{p}: {where} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _path(p: Path, value: Any, where: str) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{p}: {where} must be a path (a string)")
    file = Path(value) if Path(value).is_absolute() else p.parent / value
    if not file.is_file():
        raise ConfigError(f"{p}: {where} {value!r}: {file} does not exist (paths are relative to the spec)")
    return file.resolve()
