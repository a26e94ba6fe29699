"""One config system for everything: typed dataclasses, YAML files, ``key=value`` overrides.

    cfg = load_config(TrainConfig, "quickstart", ["optim.lr=1e-4", "rollout.group_size=8"])

- A config file is YAML whose keys mirror the dataclass fields; nested dataclasses are nested
  mappings. A built-in config is addressed by name (``rlvr/configs/NAME.yaml``).
- An override ``a.b.c=value`` sets a nested field; the value is parsed as YAML (``1e-4``,
  ``true``, ``[1, 2]``, ``{k: v}``).
- Unknown keys are errors that name the key and suggest close matches; values are type-checked
  against the annotations; every error names the file and the key.
- Each field documents itself with ``help_field(default, help)``; `describe` prints them.
- Bounds are declared beside the default (``help_field(32, "...", gt=0)``) and checked when the
  config is built, so a bad value is a one-line error naming the key before anything is loaded.
- A field whose type has ``from_config(value, where, key)`` reads itself: an algorithm part
  (`rlvr.algos.parts.Part`) is a mapping of a registered name and that function's arguments.
- A field may belong to another (``belongs_to="id"``): when an override changes its owner and not
  the field itself, the field falls back to its default (``task.id=gsm8k-v1`` does not keep the
  previous task's ``task.config``).
- A field whose config key is a Python keyword is spelled with a trailing underscore in Python and
  declares its key (``async_: AsyncConfig = field(..., metadata={"key": "async"})``): files,
  overrides, the resolved config and the reference all use the key (``rollout.async.max_staleness``).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import math
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from rlvr import UserError

C = TypeVar("C")
CONFIG_DIR = Path(__file__).parent / "configs"


class ConfigError(UserError):
    """The configuration is invalid; the message names the file and key."""


_BOUNDS = {"gt": (lambda v, b: v > b, "> {}"), "ge": (lambda v, b: v >= b, ">= {}"),
           "lt": (lambda v, b: v < b, "< {}"), "le": (lambda v, b: v <= b, "<= {}")}


def config_key(f: dataclasses.Field) -> str:
    """The key a config file and an override use for field ``f`` (its name unless it declares one)."""
    return f.metadata.get("key", f.name)


def help_field(default: Any = dataclasses.MISSING, help: str = "", *, gt: float | None = None, ge: float | None = None,
               lt: float | None = None, le: float | None = None, belongs_to: str | None = None, **kwargs: Any) -> Any:
    """A dataclass field with a help string (mutable defaults are copied per instance), optional
    bounds (``gt``/``ge``/``lt``/``le``, checked when a config is built; None values pass) and an
    owner field (``belongs_to``, see the module docstring)."""
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("lt", lt), ("le", le)) if v is not None}
    metadata = {"help": help, "bounds": bounds, "belongs_to": belongs_to}
    if isinstance(default, (list, dict)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def check_bounds(key: str, value: Any, bounds: dict[str, float], where: str = "config") -> None:
    """Raise `ConfigError` naming ``key`` when a number breaks one of ``bounds``."""
    broken = broken_bound(value, bounds)
    if broken:
        raise ConfigError(f"{where}: '{key}' {broken}")


def broken_bound(value: Any, bounds: dict[str, float]) -> str | None:
    """``"must be >= 0, got -5"`` when the number ``value`` breaks one of ``bounds`` (``gt``/``ge``/``lt``/``le``), else None."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    for name, bound in bounds.items():
        ok, text = _BOUNDS[name]
        if not ok(value, bound):
            return f"must be {text.format(bound)}, got {value}"
    return None


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
    data, where = read_config(source)
    return build_with_overrides(cls, data, where, overrides or [])


def build_with_overrides(cls: type[C], data: dict[str, Any], where: str, overrides: list[str]) -> C:
    """``cls`` from ``data`` (read from ``where``) with ``key=value`` overrides applied; an error
    about a key an override set names the override, not the file."""
    try:
        return from_dict(cls, apply_overrides(cls, data, overrides), where=where)
    except ConfigError as e:
        message = str(e)
        for item in reversed(overrides):
            key = item.partition("=")[0].strip()
            prefix = f"{where}: '{key}'"
            if message.startswith(prefix):
                raise ConfigError(f"command-line override {shown(item)}: '{key}'{message[len(prefix):]}") from None
            parts = key.split(".")
            named = {".".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}
            if message.startswith(f"{where}: unknown key") and any(f"unknown key '{n}'" in message for n in named):
                raise ConfigError(f"command-line override {shown(item)}: {message[len(where) + 2:]}") from None
        body = message[len(where) + 2:] if message.startswith(f"{where}: ") else message
        setting = body.split(" ", 1)[0].rstrip(":")  # a section's own check names its setting first (algo.correction.cap must be ...)
        for item in reversed(overrides):
            key = item.partition("=")[0].strip()
            if "." in setting and (setting == key or setting.startswith(key + ".") or key.startswith(setting + ".")):
                raise ConfigError(f"command-line override {shown(item)}: {body}") from None
        # a check across keys (__post_init__): the first override that breaks it, unless the file alone is refused (its error)
        if overrides and message.startswith(f"{where}: ") and not _fails(cls, data, where):
            for i, item in enumerate(overrides):
                if any(later.partition("=")[0].strip() == item.partition("=")[0].strip() for later in overrides[i + 1:]):
                    continue  # a key given again: the later value is the one in effect
                try:
                    from_dict(cls, apply_overrides(cls, data, overrides[: i + 1]), where=where)
                except ConfigError as first:
                    raise ConfigError(f"command-line override {shown(item)}: {str(first)[len(where) + 2:]}") from None
        raise


def in_file(error: ConfigError, where: str) -> ConfigError:
    """``error`` naming the file it is about (``where``), unless it does already, is about an override, or there is no
    file (``config``: a mapping)."""
    message = str(error)
    if where == "config" or message.startswith((f"{where}: ", "command-line override ")):
        return error
    return ConfigError(f"{where}: {message}")


def override_named(message: str, overrides: Sequence[str]) -> str | None:
    """The last of ``overrides`` setting the key ``message`` is about (the key it starts with: a check names its setting
    first; a key named later in the message, as a hint, is not what failed), if any."""
    import re

    for item in reversed(overrides):
        key = item.partition("=")[0].strip()
        if key and re.match(rf"{re.escape(key)}(?=[=: '.]|$)", message):  # (task={id: x} set task.id)
            return item
    return None


def shown(text: str) -> str:
    """``text`` (an override, a URL) as a message may show it: a ``user:password@`` in a URL replaced by ``***@``."""
    import re

    return re.sub(r"(://)[^/@\s]*@", r"\1***@", text)


def _fails(cls: type, data: dict[str, Any], where: str) -> bool:
    try:
        from_dict(cls, data, where=where)
    except ConfigError:
        return True
    return False


def read_config(source: str | Path | dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The raw mapping of a YAML file / built-in name / dict, and where it came from (for errors)."""
    if source is None:
        return {}, "config"
    if isinstance(source, dict):
        return dict(source), "config"
    path = resolve_config_path(source)
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a config file (a run directory holds a config.yaml: resume it with --resume)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}): a config is a YAML text file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read: {e.strerror or e}") from None
    try:
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader that refuses repeated keys
    except _RepeatedKey as e:
        raise ConfigError(f"{path}: key {e.key!r} is given twice (line {e.line}); each key once") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read (a config is a few levels of mappings)") from None
    if loaded is None and not text.strip():
        raise ConfigError(f"{path}: the file is empty (a config maps keys to values; `rlvr train --show-config` lists them)")
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values at the top level, got {type(loaded).__name__}")
    return loaded or {}, str(path)


class _RepeatedKey(Exception):
    def __init__(self, key: Any, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that gives a key twice (the safe loader keeps the last
    silently, so a repeated key would hide the setting written first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:  # the mapping's own keys: one merged in (<<) may be overridden on purpose
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise _RepeatedKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep)


def apply_overrides(cls: type, data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``data`` with ``key=value`` overrides applied (values parsed as YAML). A field that
    ``belongs_to`` a sibling the overrides change, and is not overridden itself, is dropped (its
    default applies)."""
    before = data
    data = copy.deepcopy(data)
    owners = {owner: _get_dotted(data, owner) for owner, _ in _belongs(cls)}
    keys = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"command-line override {shown(item)!r} must look like key=value (e.g. optim.lr=1e-4)")
        text = _text_kind(_field_type(cls, key.strip()))
        if text and not raw.strip().startswith(("'", '"', "[", "{")):
            # a text setting takes the text as written: name=- is no list, name=0042 no number, 'name=run #1' no comment
            value = None if text == "optional" and raw.strip() in ("", "null", "~", "Null", "NULL") else raw.strip()
        else:
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError as e:
                problem = " ".join(str(getattr(e, "problem", "") or "").split()) or "cannot be read"
                raise ConfigError(f"command-line override {shown(item)!r}: value is not valid YAML ({problem}); quote it if it is text") from None
        _set_dotted(data, key.strip(), value)
        keys.append(key.strip())
    for name, section_type in _rebasing_sections(cls):  # a section that re-reads what the file set when an override changes it
        if name in data and data.get(name) != before.get(name):
            data[name] = section_type.rebase_overridden(before.get(name), data[name],
                                                        {k[len(name) + 1:] for k in keys if k.startswith(name + ".")} | ({""} if name in keys else set()))
    for owner, dependent in _belongs(cls):
        changed = _get_dotted(data, owner) != owners[owner]
        if changed and not any(k == dependent or k.startswith(dependent + ".") for k in keys):
            _drop_dotted(data, dependent)
    return data


def _rebasing_sections(cls: type) -> list[tuple[str, type]]:
    """(key, type) of the top-level sections of ``cls`` whose type has ``rebase_overridden(file_value, value, overridden)``:
    given the section as the file had it, as the overrides left it, and the overridden keys within it ("" for the whole
    section), it returns what is read (the algorithm: a new preset drops the file's restatements of the old one)."""
    if not dataclasses.is_dataclass(cls):
        return []
    hints = get_type_hints(cls)
    return [(config_key(f), hints[f.name]) for f in dataclasses.fields(cls) if hasattr(hints[f.name], "rebase_overridden")]


def _field_type(cls: type, key: str) -> Any:
    """The declared type of dotted ``key`` in dataclass ``cls`` (None: no such field)."""
    tp: Any = cls
    for part in key.split("."):
        if not dataclasses.is_dataclass(tp):
            return None
        fields = {config_key(f): f for f in dataclasses.fields(tp)}
        if part not in fields:
            return None
        tp = get_type_hints(tp)[fields[part].name]
    return tp


def _text_kind(tp: Any) -> str | None:
    """"text" for a ``str`` setting, "optional" for ``str | None``, else None."""
    if tp is str:
        return "text"
    if get_origin(tp) in (Union, types.UnionType) and set(get_args(tp)) == {str, type(None)}:
        return "optional"
    return None


def _get_dotted(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _belongs(cls: type, prefix: str = "") -> list[tuple[str, str]]:
    """(owner key, dependent key) for every ``belongs_to`` field of ``cls``, dotted."""
    out = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _belongs(hints[f.name], f"{prefix}{config_key(f)}.")
        elif f.metadata.get("belongs_to"):
            out.append((f"{prefix}{f.metadata['belongs_to']}", f"{prefix}{config_key(f)}"))
    return out


def _drop_dotted(data: dict[str, Any], key: str) -> None:
    *parents, last = key.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        if isinstance(node.get(part), str):  # a part chosen by name (algo.advantage=rloo): its argument keeps the name
            node[part] = {"name": node[part]}
        elif not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def from_dict(cls: type[C], data: Any, *, where: str = "config", prefix: str = "") -> C:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys and mistyped values."""
    if not isinstance(data, dict):
        what = f"'{prefix.rstrip('.')}'" if prefix else "the top level"
        raise ConfigError(f"{where}: {what} must be a mapping, got {type(data).__name__} {data!r}")
    fields = {config_key(f): f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    hints = get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        moved = getattr(cls, "RENAMED", {}).get(key)
        if moved:
            raise ConfigError(f"{where}: '{prefix}{key}' is now '{prefix}{moved}'")
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f" (did you mean '{prefix}{close[0]}'?)" if close else f" (known keys: {', '.join(fields)})"
        raise ConfigError(f"{where}: unknown key '{prefix}{key}'{hint}")
    values = {key: _coerce(hints[fields[key].name], value, where, f"{prefix}{key}") for key, value in data.items()}
    for key, value in values.items():
        check_bounds(f"{prefix}{key}", value, fields[key].metadata.get("bounds", {}), where)
    try:
        return cls(**{fields[key].name: value for key, value in values.items()})
    except TypeError as e:  # a required field is missing
        raise ConfigError(f"{where}: {prefix or 'config'}: {e}") from e
    except ValueError as e:  # __post_init__ validation (a message that names its keys needs no prefix)
        first = str(e).split(" ", 1)[0].rstrip(":")  # (a section read alone, e.g. `rlvr eval --rollout`, names itself rollout.vllm.)
        named = bool(prefix) and (first.startswith(prefix) or f".{prefix}" in f".{first}")
        raise ConfigError(f"{where}: {e}" if named else f"{where}: {prefix or 'config'}: {e}") from e


def _coerce(tp: Any, value: Any, where: str, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if hasattr(tp, "from_config"):  # a type that reads itself (an algorithm part, the algorithm)
        return tp.from_config(value, where, key)
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
        if isinstance(value, bool) and ("off" if value is False else "on") in get_args(tp):
            value = "off" if value is False else "on"  # YAML 1.1 reads an unquoted off/on as a bool
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
    if tp is float and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            number = float(value)  # YAML reads 1e-4 (no dot) as a string
        except ValueError:
            number = None
        if number is not None and not math.isfinite(number):  # a setting is a number; "no limit" is spelt None
            raise ConfigError(f"{where}: '{key}' must be a finite number, got {value!r}")
        if number is not None:
            return number
    if tp in (int, str, bool) and isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    if tp is str and isinstance(value, (int, float, bool, datetime.date)):  # YAML 1.1 read unquoted text as something else
        raise ConfigError(f"{where}: '{key}' must be text, got {type(value).__name__} {value!r}: YAML reads some unquoted text "
                          f"(0042, 1.5, yes, 2026-11-30) as a number, bool or date: quote it ('...')")
    if tp in (int, float, str, bool):
        raise ConfigError(f"{where}: '{key}' must be {tp.__name__}, got {type(value).__name__} {value!r}")
    return value


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain data under its config keys (for the run directory's resolved config)."""
    return _plain(cfg)


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` with each field under its `config_key`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {config_key(f): _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return copy.deepcopy(value)


def dump_yaml(cfg: Any, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True), encoding="utf-8")


# mappings of a dict subclass (a `Part`) are written as plain mappings
yaml.SafeDumper.add_multi_representer(dict, yaml.representer.SafeRepresenter.represent_dict)


def renamed_keys(cls: type, prefix: str = "") -> dict[str, str]:
    """Old spellings of the keys of ``cls`` and of its nested sections (each class's ``RENAMED`` map),
    dotted, with their current spelling: ``{"rollout.hf_decode": "rollout.hf.decode"}``."""
    out = {f"{prefix}{old}": f"{prefix}{new}" for old, new in getattr(cls, "RENAMED", {}).items()}
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out |= renamed_keys(hints[f.name], f"{prefix}{f.name}.")
    return out


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, help) for every field, nested keys dotted; a bounded key's help ends with its bounds (``(> 0)``)."""
    rows = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], config_key(f)
        if dataclasses.is_dataclass(tp):
            rows += describe(tp, f"{prefix}{key}.")
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
        bounds = ", ".join(_BOUNDS[name][1].format(bound) for name, bound in f.metadata.get("bounds", {}).items())
        rows.append((f"{prefix}{key}", repr(default), " ".join(filter(None, (f.metadata.get("help", ""), bounds and f"({bounds})")))))
    return rows


__all__ = ["ConfigError", "apply_overrides", "broken_bound", "check_bounds", "config_key", "describe", "dump_yaml", "from_dict", "help_field", "in_file", "load_config", "override_named",
           "read_config", "renamed_keys", "resolve_config_path", "to_dict"]
