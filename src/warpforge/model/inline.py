"""Write a module instance as torch-only Python source: the code a task file needs to rebuild it.

A task file may import only what a candidate may (evaluate/static.py: torch, math, os, ...), so a
transformers or user-file module cannot be imported there; its code is copied instead. `Writer`
does this for one module instance:
- torch's own modules (nn.Linear, nn.SiLU, ...) are written as constructor calls, with the
  arguments recorded while the model was built (build.py);
- any other class is copied from its source, with the methods its forward reaches, its base
  classes, and every global its code names: functions and classes (copied the same way),
  constants, torch and standard-library imports. Its __init__ is replaced by one that sets the
  instance's own state (its attributes, its weights as empty tensors of their shapes, its buffers
  as literal values, its children), so the model's config and registries are never needed;
- a plain object in an attribute (a transformers config) becomes a small stand-in class holding,
  as values, the attributes the copied code reads;
- decorators from outside torch are dropped (transformers' hub-kernel and RoPE-update wrappers),
  and transformers' attention registry becomes a stand-in returning the implementation the
  model ran (`attn_implementation`).
A global that cannot be written (a logger, a registry) is left out and listed in the notes: code
that reaches it fails with a NameError. Extract checks every written module against the model's
own output, so a difference is found there, not trusted. `NotWritable` never leaves extract.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from warpforge.errors import WarpforgeError
from warpforge.model.build import Constructed
from warpforge.model.source import (Rename, attribute_names, drop_lines, first_line, free_names,
                                    reached, source_of, with_init)

# what a candidate (and so a task file, whose A/A candidate is itself) may import: evaluate/static.py
IMPORTABLE = ("torch", "math", "os", "functools", "itertools", "typing", "collections", "operator", "numbers",
              "warnings", "dataclasses", "enum", "abc", "numpy")
BUFFER_LIMIT = 8192
"""Elements of a buffer written out as a literal (RoPE's inverse frequencies are head_dim / 2)."""
_MODULE_STATE = set(vars(nn.Module()))
RESERVED = {"Model", "ModelNew", "get_inputs", "get_init_inputs", "WARPFORGE"}
"""Names the task part of the file defines (extract.py); written code never takes them."""
_KEPT_DECORATORS = {"staticmethod", "classmethod", "property"}


class NotWritable(WarpforgeError):
    """This module cannot be written as a task's source; the message says why. Extract turns it
    into a skipped seam with that reason; it never reaches the command line."""


@dataclass
class _Unit:
    name: str
    text: str
    origin: str


@dataclass
class _StandIn:
    name: str
    value: Any


@dataclass
class Writer:
    constructed: Callable[[nn.Module], Constructed | None]
    """The model's record of how each torch module was constructed (Built.constructed)."""
    attn_implementation: str | None = None
    imports: dict[str, str] = field(default_factory=dict)
    constants: dict[str, str] = field(default_factory=dict)
    units: list[_Unit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _bound: dict[str, Any] = field(default_factory=dict)
    _inits: dict[str, tuple[type, nn.Module]] = field(default_factory=dict)
    _standins: list[_StandIn] = field(default_factory=list)
    _attrs: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._bound.update(torch=torch, nn=nn)
        self.imports.update(torch="import torch", nn="from torch import nn")

    def module(self, m: nn.Module) -> str:
        """An expression that builds a module like `m` (its weights' values aside)."""
        cls = type(m)
        if _from_torch(cls):
            return self._torch_module(m)
        name = self._class(cls)
        earlier = self._inits.get(name)
        if earlier is not None and earlier[1] is not m and self._init_text(earlier[1]) != self._init_text(m):
            raise NotWritable(f"two {cls.__qualname__} modules with different state in one seam")
        self._inits[name] = (cls, m)
        return f"{name}()"

    def source(self) -> str:
        """Imports, constants, the copied and stand-in classes and functions, in that order."""
        inits: dict[str, str] = {}
        while set(self._inits) - set(inits):  # an __init__ may name a class not written yet (a child's)
            for name in [n for n in self._inits if n not in inits]:
                inits[name] = self._init_text(self._inits[name][1])
        blocks = [with_init(u.text, inits[u.name]) if u.name in inits else u.text for u in self.units]
        blocks = [b.strip() + "\n" for b in blocks + [self._standin_text(s) for s in self._standins]]
        head = ["from __future__ import annotations", ""]
        head += sorted(set(self.imports.values()), key=lambda line: (not line.startswith("import "), line))
        consts = [f"{k} = {v}" for k, v in self.constants.items()]
        return "\n".join(head) + "\n\n" + ("\n".join(consts) + "\n\n\n" if consts else "\n") + "\n\n".join(blocks)

    # -- torch modules: constructor calls ------------------------------------------------------
    def _torch_module(self, m: nn.Module) -> str:
        cls = type(m)
        made = self.constructed(m)
        if made is None:
            raise NotWritable(f"the constructor call of {cls.__qualname__} was not seen while the model was built")
        ref = f"nn.{cls.__name__}" if getattr(nn, cls.__name__, None) is cls else self._global(cls.__name__, cls)
        try:
            params = inspect.signature(cls.__init__).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        args = [self.value(v, f"{cls.__name__} argument") for v in made.varargs]
        for key, v in {**made.named, **made.kwargs}.items():
            default = params[key].default if key in params else inspect.Parameter.empty
            if default is not inspect.Parameter.empty and _same(default, v):
                continue
            args.append(f"{key}={self.value(v, f'{cls.__name__}({key}=...)')}")
        expr = f"{ref}({', '.join(args)})"
        dtypes = {t.dtype for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)) if t.is_floating_point()}
        if len(dtypes) > 1:
            raise NotWritable(f"{cls.__qualname__} holds weights of several dtypes")
        if dtypes and dtypes != {torch.get_default_dtype()}:
            expr += f".to({_dtype(dtypes.pop())})"
        return expr

    # -- values --------------------------------------------------------------------------------
    def value(self, v: Any, where: str) -> str:
        """A literal, a dtype, a module, a stand-in object or a written global, as an expression."""
        if v is None or isinstance(v, bool | int | str | bytes):
            return repr(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f'float("{v}")'
        if isinstance(v, tuple | list | set):
            items = [self.value(x, where) for x in v]
            body = ", ".join(items) + ("," if isinstance(v, tuple) and len(items) == 1 else "")
            return {tuple: f"({body})", list: f"[{body}]"}.get(type(v), f"{{{body}}}" if items else "set()")
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.value(k, where)}: {self.value(x, where)}" for k, x in v.items()) + "}"
        if isinstance(v, torch.dtype):
            self.imports["torch"] = "import torch"
            return _dtype(v)
        if isinstance(v, nn.Module):
            return self.module(v)
        if isinstance(v, torch.Tensor):
            return self._tensor(v, where)
        if isinstance(v, type | types.FunctionType | types.BuiltinFunctionType):
            try:
                return self._global(getattr(v, "__name__", "value"), v)
            except _LeftOut as gone:
                raise NotWritable(f"{where} holds {gone}, which cannot be written") from None
        if hasattr(v, "__dict__") and not callable(v) and type(v).__module__ != "builtins":
            standin = next((s for s in self._standins if s.value is v), None)
            if standin is None:
                standin = _StandIn(self._free_name(type(v).__name__), v)
                self._bound[standin.name] = v
                self._standins.append(standin)
            return f"{standin.name}()"
        raise NotWritable(f"{where} holds a {type(v).__name__}, which cannot be written as source")

    def _tensor(self, t: torch.Tensor, where: str) -> str:
        if t.numel() > BUFFER_LIMIT:
            raise NotWritable(f"{where} is a tensor of {t.numel()} elements, too many to write as a literal")
        self.imports["torch"] = "import torch"
        return f"torch.tensor({self.value(t.detach().cpu().tolist(), where)}, dtype={_dtype(t.dtype)})"

    # -- globals -------------------------------------------------------------------------------
    def _global(self, name: str, v: Any) -> str:
        """The name under which `v` is bound in the written file (imported, copied or a constant)."""
        v = _unwrapped(v)
        if _literal(v):  # constants are equal, not identical: False is every flag's value
            if name in self._bound and _same(self._bound[name], v):
                return name
        else:
            for bound, value in self._bound.items():
                if value is v:
                    return bound
        if isinstance(v, types.ModuleType):
            root = v.__name__.split(".")[0]
            if root not in IMPORTABLE:
                raise _LeftOut(f"{name} (the module {v.__name__}): a task may import only {', '.join(IMPORTABLE)}")
            out = self._free_name(name)
            self._bound[out] = v
            self.imports[out] = f"import {v.__name__}" + (f" as {out}" if out != v.__name__ else "")
            return out
        if v is not None and isinstance(v, bool | int | float | str | tuple) and _literal(v):
            out = self._free_name(name)
            self._bound[out] = v
            self.constants[out] = self.value(v, name)
            return out
        if type(v).__name__ == "AttentionInterface" and hasattr(v, "get_interface"):
            return self._attention_registry(name, v)
        if isinstance(v, type | types.FunctionType | types.BuiltinFunctionType):
            home = getattr(v, "__module__", None) or ""
            if home == "builtins":
                return name
            if home.split(".")[0] in IMPORTABLE:
                out = self._free_name(name)
                self._bound[out] = v
                what = v.__qualname__.split(".")[0]
                self.imports[out] = f"from {home} import {what}" + (f" as {out}" if out != what else "")
                return out
            return self._class(v) if isinstance(v, type) else self._function(v)
        raise _LeftOut(f"{name} (a {type(v).__name__})")

    def _attention_registry(self, name: str, registry: Any) -> str:
        impl = self.attn_implementation or "eager"
        out = self._free_name(name)
        self._bound[out] = registry
        chosen = registry.get(impl) if impl != "eager" else None
        answer = "default"
        if chosen is not None:
            try:
                answer = f"{self._global(chosen.__name__, chosen)} if name == {impl!r} else default"
            except _LeftOut as gone:
                raise NotWritable(f"the attention implementation {impl} cannot be written: {gone}") from None
        cls = self._free_name("_AttentionFunctions")
        self._bound[cls] = cls
        text = (f"class {cls}:\n"
                f'    """transformers\' attention registry, reduced to the implementation the model ran ({impl})."""\n\n'
                "    def get_interface(self, name, default):\n"
                f"        return {answer}\n\n\n{out} = {cls}()\n")
        self.units.append(_Unit(cls, text, "warpforge"))
        return out

    def _free_name(self, name: str) -> str:
        out, n = name, 1
        while out in self._bound or out in RESERVED:
            n += 1
            out = f"{name}_{n}"
        return out

    # -- copied code -------------------------------------------------------------------------
    def _function(self, fn: Any) -> str:
        fn = inspect.unwrap(fn)
        out = self._free_name(fn.__name__)
        self._bound[out] = fn
        text = _source(fn)
        tree = ast.parse(text)
        node = tree.body[0]
        text = drop_lines(text, self._dropped_decorators(node, fn.__globals__, fn.__qualname__))
        self._finish_unit(out, fn.__name__, text, fn.__globals__, fn.__module__)
        return out

    def _class(self, cls: type) -> str:
        for bound, value in self._bound.items():
            if value is cls:
                return bound
        out = self._free_name(cls.__name__)
        self._bound[out] = cls
        text = _source(cls)
        node = ast.parse(text).body[0]
        assert isinstance(node, ast.ClassDef)
        namespace = vars(sys.modules[cls.__module__])
        kept = reached(node)
        cut = self._dropped_decorators(node, namespace, cls.__qualname__)
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                if item.name not in kept:
                    cut.append((first_line(item), item.end_lineno or item.lineno))
                else:
                    cut += self._dropped_decorators(item, namespace, f"{cls.__qualname__}.{item.name}")
        text = drop_lines(text, cut)
        self._finish_unit(out, cls.__name__, text, namespace, cls.__module__)
        return out

    def _finish_unit(self, out: str, name: str, text: str, namespace: dict[str, Any], origin: str) -> None:
        renames = {}
        for free in sorted(free_names(text) - {name}):
            if free in namespace:
                try:
                    bound = self._global(free, namespace[free])
                except _LeftOut as gone:
                    self.notes.append(f"not written (unreachable, or the check fails): {gone}")
                    continue
            elif hasattr(builtins, free):
                continue
            else:
                self.notes.append(f"not written: {free} (no value in {origin})")
                continue
            if bound != free:
                renames[free] = bound
        if out != name:
            renames[name] = out
        if renames:
            text = ast.unparse(Rename(renames).visit(ast.parse(text)))
        self._attrs |= attribute_names(text)
        self.units.append(_Unit(out, text, origin))

    def _dropped_decorators(self, node: Any, namespace: dict[str, Any], what: str) -> list[tuple[int, int]]:
        cut = []
        for dec in node.decorator_list:
            root = dec.func if isinstance(dec, ast.Call) else dec
            while isinstance(root, ast.Attribute):
                root = root.value
            head = root.id if isinstance(root, ast.Name) else ""
            value = namespace.get(head, getattr(builtins, head, None))
            if head in _KEPT_DECORATORS or isinstance(value, types.ModuleType) and value.__name__.split(".")[0] == "torch":
                continue
            cut.append((dec.lineno, dec.end_lineno or dec.lineno))
            self.notes.append(f"decorator @{ast.unparse(dec)} of {what} dropped")
        return cut

    # -- generated __init__ and stand-ins ------------------------------------------------------
    def _init_text(self, m: nn.Module) -> str:
        lines = ["def __init__(self):",
                 "    # the model instance's own state, written by `warpforge model extract` (the class's own",
                 "    # __init__ is not run: it may need the model's config, registries or files)",
                 "    torch.nn.Module.__init__(self)"]
        self.imports["torch"] = "import torch"
        own = set(attribute_names(next((u.text for u in self.units if self._bound.get(u.name) is type(m)), "")))
        for key, v in vars(m).items():
            if key in _MODULE_STATE or key.startswith("_") and key not in own:
                continue
            try:
                lines.append(f"    self.{key} = {self.value(v, f'{type(m).__qualname__}.{key}')}")
            except NotWritable:
                if key in self._attrs:
                    raise
                self.notes.append(f"{type(m).__qualname__}.{key} not written (a {type(v).__name__} no copied code reads)")
        for key, p in m._parameters.items():
            lines.append(f"    self.{key} = " + ("None" if p is None else
                         f"torch.nn.Parameter(torch.empty({tuple(p.shape)}, dtype={_dtype(p.dtype)}), "
                         f"requires_grad={p.requires_grad})"))
        for key, b in m._buffers.items():
            keep = key not in m._non_persistent_buffers_set
            value = "None" if b is None else self._tensor(b, f"buffer {type(m).__qualname__}.{key}")
            lines.append(f"    self.register_buffer({key!r}, {value}, persistent={keep})")
        for key, child in m._modules.items():
            lines.append(f"    self.{key} = " + ("None" if child is None else self.module(child)))
        return "\n".join(lines)

    def _standin_text(self, s: _StandIn) -> str:
        lines = [f"class {s.name}:",
                 f'    """Stand-in for the model\'s {type(s.value).__qualname__}: the attributes the code above reads, as values."""',
                 "", "    def __init__(self):"]
        for attr in sorted(self._attrs):
            if attr.startswith("__"):
                continue
            try:
                value = getattr(s.value, attr)
            except Exception:  # a property that raises, or an attribute this object lacks
                continue
            if _literal(value) or isinstance(value, torch.dtype):
                lines.append(f"        self.{attr} = {self.value(value, attr)}")
        if lines[-1].endswith("__init__(self):"):
            lines.append("        pass")
        return "\n".join(lines) + "\n"


class _LeftOut(NotWritable):
    """A global the written file does without (the message names it): a note, unless code needs it."""


def _unwrapped(v: Any) -> Any:
    """The function behind a wrapper: functools.wraps' __wrapped__, or the function that the
    `kernels` package (a transformers 5 dependency) turns into a module instance called `Func`
    (transformers' apply_rotary_pos_emb is one), found in its forward's closure."""
    if isinstance(v, nn.Module) and type(v).__name__ == "Func":
        forward = type(v).forward
        cells = dict(zip(forward.__code__.co_freevars, forward.__closure__ or ()))
        if "func" in cells and callable(cells["func"].cell_contents):
            return inspect.unwrap(cells["func"].cell_contents)
    if isinstance(v, types.FunctionType) and hasattr(v, "__wrapped__"):
        return inspect.unwrap(v)
    return v


def _source(obj: Any) -> str:
    text = source_of(obj)
    if text is None:
        raise NotWritable(f"the source of {getattr(obj, '__qualname__', obj)} cannot be read")
    return text


def _from_torch(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "torch"


def _dtype(d: torch.dtype) -> str:
    return f"torch.{str(d).removeprefix('torch.')}"


def _literal(v: Any) -> bool:
    if v is None or isinstance(v, bool | int | str):
        return True
    if isinstance(v, float):
        return True
    if isinstance(v, tuple | list):
        return all(_literal(x) for x in v)
    if isinstance(v, dict):
        return all(_literal(k) and _literal(x) for k, x in v.items())
    return False


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a tensor default, or an object that cannot compare
        return False
