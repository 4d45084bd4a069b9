"""Where an `EvalConfig`'s values come from, in order: its defaults, a `--config` TOML file, the
environment (`WARPFORGE_<KEY>`), then the command line; a later source wins.

A config file has one table per group of `config.GROUPS`, and its keys are `EvalConfig`'s
field names:

    [timing]
    rep_ms = 50
    paired_rounds = 7

    [limits]
    timeout_s = 300

Any field can also be set as `WARPFORGE_<FIELD>` (`WARPFORGE_REP_MS=50`); `WARPFORGE_CACHE`
and `WARPFORGE_REFERENCE_TIMEOUT` are kept as the names of `cache_dir` and
`reference_timeout_s`. A value that does not fit its field is a ConfigError naming where it
came from and what it must be.
"""

from __future__ import annotations

import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from warpforge.config import GROUP_TYPES, GROUPS, EvalConfig
from warpforge.errors import ConfigError

ENV_PREFIX = "WARPFORGE_"
ENV_ALIASES = {"cache_dir": "WARPFORGE_CACHE", "reference_timeout_s": "WARPFORGE_REFERENCE_TIMEOUT"}
"""Fields whose environment variable predates the WARPFORGE_<FIELD> rule."""
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_name(field: str) -> str:
    """The environment variable that sets `field`."""
    return ENV_ALIASES.get(field, ENV_PREFIX + field.upper())


def load_config(file: str | Path | None = None, flags: Mapping[str, Any] | None = None,
                env: Mapping[str, str] | None = None) -> EvalConfig:
    """The EvalConfig of defaults, then `file`, then `env` (default: os.environ), then `flags`
    (field name -> value, only what the command line set)."""
    values: dict[str, Any] = {}
    if file is not None:
        values.update(read_file(file))
    values.update(from_env(os.environ if env is None else env))
    values.update(flags or {})
    return EvalConfig.of(**values)


def read_file(file: str | Path) -> dict[str, Any]:
    """The fields a TOML config file sets, checked against their types."""
    path = Path(file)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the config file {path} is not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    sections = ", ".join(f"[{g}]" for g in GROUPS)
    for group, table in data.items():
        if group not in GROUPS or not isinstance(table, dict):
            raise ConfigError(f"{path}: {group!r} is not a section of a config file: its sections are {sections}, "
                              "each holding keys (docs/reference.md, 'Configuration file')")
        for key, value in table.items():
            if key not in GROUPS[group]:
                home = next((g for g, keys in GROUPS.items() if key in keys), None)
                hint = f"it belongs in [{home}]" if home else f"[{group}]'s keys are {', '.join(GROUPS[group])}"
                raise ConfigError(f"{path}: [{group}] has no key {key!r}: {hint}")
            values[key] = coerce(key, value, f"[{group}] {key} in {path}")
    return values


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The fields the environment sets (WARPFORGE_<FIELD>, and the older aliases)."""
    values: dict[str, Any] = {}
    for field in FIELD_TYPES:
        name = env_name(field)
        if env.get(name, "") != "":
            values[field] = coerce(field, env[name], f"${name}")
    return values


def coerce(field: str, value: Any, where: str) -> Any:
    """`value` (from TOML, or a string from the environment) as `field`'s type, or a ConfigError
    saying what `where` must be."""
    kinds = _kinds(FIELD_TYPES[field])
    if isinstance(value, str) and value.lower() in ("none", "") and type(None) in kinds:
        return None
    for kind in kinds:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in TRUE + FALSE:
                return value.lower() in TRUE
        elif kind is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                return int(value)
        elif kind is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
        elif kind is str:
            if isinstance(value, str):
                return value
        elif kind is tuple:  # server_gap_ms: two numbers, "1,20" in the environment
            items = value.split(",") if isinstance(value, str) else value
            try:
                pair = tuple(float(x) for x in items)
            except (TypeError, ValueError):
                pair = ()
            if len(pair) == 2:
                return pair
        elif isinstance(kind, tuple) and value in kind:  # a Literal's choices
            return value
    raise ConfigError(f"{where} is {value!r}, but {field} must be {_describe(kinds)}")


def _kinds(hint: Any) -> list[Any]:
    """A field's type as a list of plain kinds: bool, int, float, str, tuple, None's type, or a
    tuple of a Literal's choices."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return [k for arg in typing.get_args(hint) for k in _kinds(arg)]
    if origin is typing.Literal:
        return [typing.get_args(hint)]
    if origin is tuple:
        return [tuple]
    return [hint]


def _describe(kinds: list[Any]) -> str:
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
             tuple: "two numbers", type(None): "none"}
    return " or ".join(words.get(k) or " or ".join(repr(c) for c in k) for k in kinds)


FIELD_TYPES: dict[str, Any] = {name: kind for owner in (EvalConfig, *GROUP_TYPES.values())
                               for name, kind in typing.get_type_hints(owner).items() if name not in GROUP_TYPES}
"""Each setting's type, by its flat name: EvalConfig's own fields and its groups' (tests/test_config_sources.py
checks GROUPS covers them all)."""
