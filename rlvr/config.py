"""One config system for everything: typed dataclasses, YAML files, ``key=value`` overrides.

    cfg = load_config(TrainConfig, "quickstart", ["optim.lr=1e-4", "rollout.group_size=8"])

- A config file is YAML whose keys mirror the dataclass fields; nested dataclasses are nested
  mappings. A built-in config is addressed by name (``rlvr/configs/NAME.yaml``).
- An override ``a.b.c=value`` sets a nested field; the value is parsed as YAML (``1e-4``,
  ``true``, ``[1, 2]``, ``{k: v}``).
- Unknown keys are errors that name the key and suggest close matches; values are type-checked
  against the annotations; every error names the file and the key.
- Each field documents itself with ``field(metadata={"help": ...})``; `describe` prints them.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from rlvr import UserError

C = TypeVar("C")
CONFIG_DIR = Path(__file__).parent / "configs"


class ConfigError(UserError):
    """The configuration is invalid; the message names the file and key."""


def help_field(default: Any = dataclasses.MISSING, help: str = "", **kwargs: Any) -> Any:
    """A dataclass field with a help string (mutable defaults are copied per instance)."""
    if isinstance(default, (list, dict)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata={"help": help}, **kwargs)
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A YAML path, or the name of a built-in config (``quickstart`` -> rlvr/configs/quickstart.yaml)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    builtin = CONFIG_DIR / f"{name_or_path}.yaml"
    if builtin.exists():
        return builtin
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"config {str(name_or_path)!r} is neither a file nor a built-in config (built-ins: {', '.join(names)})")


def load_config(cls: type[C], source: str | Path | dict[str, Any] | None = None, overrides: list[str] | None = None) -> C:
    """Build ``cls`` from a YAML file/built-in name/dict, then apply ``key=value`` overrides."""
    where = "config"
    data: dict[str, Any] = {}
    if isinstance(source, dict):
        data = dict(source)
    elif source is not None:
        path = resolve_config_path(source)
        where = str(path)
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from e
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of keys to values at the top level, got {type(loaded).__name__}")
        data = loaded or {}
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. optim.lr=1e-4)")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: value is not valid YAML: {e}") from e
        _set_dotted(data, key.strip(), value)
    return from_dict(cls, data, where=where)


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def from_dict(cls: type[C], data: Any, *, where: str = "config", prefix: str = "") -> C:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys and mistyped values."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {prefix or 'top level'} must be a mapping, got {type(data).__name__} {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    hints = get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f" (did you mean '{prefix}{close[0]}'?)" if close else f" (known keys: {', '.join(fields)})"
        raise ConfigError(f"{where}: unknown key '{prefix}{key}'{hint}")
    kwargs = {name: _coerce(hints[name], value, where, f"{prefix}{name}") for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise ConfigError(f"{where}: {prefix or 'config'}: {e}") from e
    except ValueError as e:  # __post_init__ validation
        raise ConfigError(f"{where}: {prefix or 'config'}: {e}") from e


def _coerce(tp: Any, value: Any, where: str, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value if value is not None else {}, where=where, prefix=f"{key}.")
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: '{key}' = {value!r} matches none of {_type_name(tp)}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: '{key}' must be one of {', '.join(map(repr, get_args(tp)))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: '{key}' must be a list, got {value!r}")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [_coerce(item_tp, v, where, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: '{key}' must be a mapping, got {value!r}")
        return dict(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML reads 1e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp in (int, str, bool) and isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    if tp in (int, float, str, bool):
        raise ConfigError(f"{where}: '{key}' must be {tp.__name__}, got {type(value).__name__} {value!r}")
    return value


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain data (for the run directory's resolved config)."""
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: Any, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, help) for every field, nested keys dotted."""
    rows = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += describe(tp, f"{prefix}{f.name}.")
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
        rows.append((f"{prefix}{f.name}", repr(default), f.metadata.get("help", "")))
    return rows


__all__ = ["ConfigError", "describe", "dump_yaml", "from_dict", "help_field", "load_config", "resolve_config_path", "to_dict"]
