"""Build a spec's model and its inputs, downloading nothing.

`build(spec)` makes the model (a transformers class from its config, or a Python file's Model from
get_init_inputs()) with seeded random weights or the spec's state dict, in the spec's dtype, and
records each torch module's constructor arguments as it is built (`Built.constructors`: extract
writes torch modules back as constructor calls). `inputs(built, regime, device)` draws one
forward's arguments. transformers is imported here only, when a spec names it.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import torch
from torch import nn

from warpforge.errors import ConfigError, UsageError
from warpforge.model.spec import Regime, Spec


@dataclass
class Constructed:
    """How one module was made: its __init__'s named arguments, *args and **kwargs."""

    module: weakref.ref[nn.Module]
    named: dict[str, Any]
    varargs: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Built:
    spec: Spec
    model: nn.Module
    constructors: dict[int, Constructed]
    """id(module) -> its constructor call, for modules built while the model was (see `constructed`)."""
    file_module: ModuleType | None = None
    """A Python-file spec's module (its get_inputs() and globals)."""
    config: Any = None
    """A transformers model's config object."""

    def constructed(self, module: nn.Module) -> Constructed | None:
        found = self.constructors.get(id(module))
        return found if found is not None and found.module() is module else None


def build(spec: Spec) -> Built:
    """The spec's model on the CPU, in eval mode, in its dtype; ConfigError (one sentence) when it cannot be built."""
    constructors: dict[int, Constructed] = {}
    torch.manual_seed(spec.seed)
    file_module, config = None, None
    with _recording(constructors):
        if spec.kind == "transformers":
            model, config = _transformers_model(spec)
        else:
            model, file_module = _file_model(spec)
    if spec.state_dict is not None:
        _load_state(spec, model)
    model = model.to(getattr(torch, spec.dtype)).eval()
    return Built(spec, model, constructors, file_module, config)


def inputs(built: Built, regime: Regime, device: str, seed: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """One forward's positional and keyword arguments at `regime`, drawn on `device` from `seed`."""
    spec = built.spec
    gen = torch.Generator(device=device).manual_seed(seed)
    if spec.inputs:
        drawn = {}
        for item in spec.inputs:
            size = item.sizes(regime)
            dtype = getattr(torch, item.dtype)
            if dtype.is_floating_point:
                x = torch.randn(size, generator=gen, device=device) * item.std + item.mean
                drawn[item.name] = x.to(dtype)
            else:
                drawn[item.name] = torch.randint(item.low, item.high, size, generator=gen, device=device, dtype=dtype)
        if spec.kind == "transformers":  # by name, as a transformers model takes them
            return [], {**drawn, **_forward_kwargs(built)}
        return list(drawn.values()), dict(spec.forward_kwargs)
    module = built.file_module
    assert module is not None
    saved = {}
    for name, value in regime.axes.items():
        if not hasattr(module, name):
            raise ConfigError(f"{spec.path}: regime {regime.name!r} sets {name}, which {spec.target} does not define")
        saved[name] = getattr(module, name)
        setattr(module, name, value)
    try:
        torch.manual_seed(seed)
        with torch.device(device):
            made = module.get_inputs()
    except Exception as exc:
        raise ConfigError(f"{spec.target}: get_inputs() failed at regime {regime.name!r}: {type(exc).__name__}: "
                          f"{_first_line(exc)}") from None
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
    if not isinstance(made, list | tuple):
        raise ConfigError(f"{spec.target}: get_inputs() must return a list of the forward's arguments")
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in made], dict(spec.forward_kwargs)


def _forward_kwargs(built: Built) -> dict[str, Any]:
    """The spec's constant keyword arguments; for a transformers model use_cache=False unless the
    spec says otherwise (a KV cache object is state, not an input a seam could be given)."""
    kwargs = dict(built.spec.forward_kwargs)
    if "use_cache" in inspect.signature(built.model.forward).parameters:
        kwargs.setdefault("use_cache", False)
    return kwargs


def _transformers_model(spec: Spec) -> tuple[nn.Module, Any]:
    try:
        import transformers
    except ImportError:
        raise UsageError("the model spec names a transformers class but transformers is not installed: "
                         "pip install 'warpforge[model]'") from None
    cls = getattr(transformers, spec.target, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"{spec.path}: transformers {transformers.__version__} has no model class {spec.target!r}")
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        raise ConfigError(f"{spec.path}: transformers.{spec.target} names no config_class to build it from")
    try:
        if spec.config_file is not None:
            values = json.loads(spec.config_file.read_text())
            config = config_class.from_dict(values)
        else:
            config = config_class(**spec.config)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise ConfigError(f"{spec.path}: the config of {spec.target} is not valid: {type(exc).__name__}: "
                          f"{_first_line(exc)}") from None
    try:
        return cls(config), config
    except Exception as exc:  # the library's own checks of the config raise anything
        raise ConfigError(f"{spec.path}: transformers.{spec.target} could not be built from its config: "
                          f"{type(exc).__name__}: {_first_line(exc)}") from None


def _file_model(spec: Spec) -> tuple[nn.Module, ModuleType]:
    """Import the file as its own module (registered, so its classes' source can be read back)."""
    name = f"warpforge_model_{Path(spec.target).stem}_{abs(hash(spec.target)) % 16**6:06x}"
    loader_spec = importlib.util.spec_from_file_location(name, spec.target)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"cannot import {spec.target}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"{spec.target} failed to import: {type(exc).__name__}: {_first_line(exc)}") from None
    model_class = getattr(module, "Model", None)
    if not (isinstance(model_class, type) and issubclass(model_class, nn.Module)):
        raise ConfigError(f"{spec.target} defines no class Model (an nn.Module), as KernelBench files do")
    if not spec.inputs and not callable(getattr(module, "get_inputs", None)):
        raise ConfigError(f"{spec.target} defines no get_inputs(): add one, or declare [[inputs]] in {spec.path.name}")
    try:
        init = module.get_init_inputs() if callable(getattr(module, "get_init_inputs", None)) else []
        return model_class(*init), module
    except Exception as exc:
        raise ConfigError(f"{spec.target}: Model(*get_init_inputs()) failed: {type(exc).__name__}: "
                          f"{_first_line(exc)}") from None


def _load_state(spec: Spec, model: nn.Module) -> None:
    assert spec.state_dict is not None
    try:
        state = torch.load(spec.state_dict, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ConfigError(f"{spec.path}: state_dict {spec.state_dict} cannot be read as tensors: {_first_line(exc)}") from None
    if not isinstance(state, dict):
        raise ConfigError(f"{spec.path}: state_dict {spec.state_dict} holds a {type(state).__name__}, not a state dict")
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        what = (f"lacks {len(result.missing_keys)} of the model's tensors (first: {result.missing_keys[0]})"
                if result.missing_keys else f"has {len(result.unexpected_keys)} the model does not "
                f"(first: {result.unexpected_keys[0]})")
        raise ConfigError(f"{spec.path}: state_dict {spec.state_dict.name} does not fit the model: it {what}")


class _recording:
    """Record every nn.Module's constructor arguments while the model is built: a profile function
    sees each __init__ call as it starts, when its frame's locals are exactly its arguments. Only
    the outermost __init__ of a module counts (the one its class runs, not a base's via super())."""

    def __init__(self, into: dict[int, Constructed]) -> None:
        self.into = into
        self.previous: Any = None

    def __enter__(self) -> None:
        self.previous = sys.getprofile()
        sys.setprofile(self._seen)

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self.previous)

    def _seen(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name != "__init__":
            return
        module = frame.f_locals.get("self")
        if not isinstance(module, nn.Module) or id(module) in self.into and self.into[id(module)].module() is module:
            return
        if getattr(type(module).__init__, "__code__", None) is not frame.f_code:
            return
        info = inspect.getargvalues(frame)
        named = {n: info.locals[n] for n in info.args[1:] if n in info.locals}
        varargs = tuple(info.locals.get(info.varargs, ())) if info.varargs else ()
        kwargs = dict(info.locals.get(info.keywords, {})) if info.keywords else {}
        self.into[id(module)] = Constructed(weakref.ref(module), named, varargs, kwargs)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
