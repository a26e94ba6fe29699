"""A config section that names a registered function and carries that function's own arguments.

    algo:
      policy_loss: {name: cispo, clip_high: 4.0}
      advantage: {name: gae, gamma: 1.0, lam: 0.95}

A `Part` is that section: a mapping with ``name`` and the function's keyword arguments. Its
arguments are checked against the function's signature (`part_parameters`): an unknown one is an
error naming what the function takes, a missing one takes the function's default. So a part's
hyperparameters live in one place, its signature, and a new part with a new hyperparameter is one
registered function (in rlvr, or in a package that registers it through the ``rlvr.algos``
entry-point group).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from rlvr.config import _BOUNDS, ConfigError, broken_bound

ALGOS_GROUP = "rlvr.algos"  # the entry-point group third-party packages register algorithm parts and presets through


class Part(dict):
    """``{name: <registered id>, **arguments}``: a plain mapping in YAML and in the run's config."""

    @property
    def name(self) -> str:
        return self["name"]

    @property
    def params(self) -> dict[str, Any]:
        """The function's keyword arguments (everything but ``name``)."""
        return {k: v for k, v in self.items() if k != "name"}

    @classmethod
    def from_config(cls, value: Any, where: str, key: str) -> Part:
        """A section from a mapping with ``name``, or from a bare name (``algo.ratio=sequence``)."""
        if isinstance(value, str):
            return cls(name=value)
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            raise ConfigError(f"{where}: '{key}' must be a registered name or a mapping with a name and its arguments, "
                              f"e.g. {{name: clipped, clip_high: 0.28}}; got {value!r}")
        return cls(value)


def check_output(kind: str, name: str, value: Any, shape: tuple[int, ...], with_stats: bool = False) -> None:
    """Raise a one-line `TypeError` naming the part when a registered function (perhaps a plugin's)
    returns something other than a tensor of ``shape`` (and, ``with_stats``, a dict of statistics beside it)."""
    import torch

    def describe(v: Any) -> str:
        return f"a tensor {list(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__

    pair = isinstance(value, tuple) and len(value) == 2
    tensor, stats = (value if pair else (None, None)) if with_stats else (value, {})
    if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(shape) or not isinstance(stats, dict):
        got = "(" + ", ".join(map(describe, value)) + ")" if isinstance(value, tuple) else describe(value)
        expected = f"(a tensor {list(shape)}, a dict of statistics)" if with_stats else f"a tensor {list(shape)}"
        raise TypeError(f"the {name} {kind} returned {got}; it must return {expected}")


def argument_bounds(**bounds: dict[str, float]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the ranges of a part's numeric arguments, checked when a config is read (a plugin's too):

        @POLICY_LOSSES.register("mine")
        @argument_bounds(clip_high={"ge": 0}, gamma={"ge": 0, "le": 1})
        def my_loss(inp, clip_high=0.2, gamma=1.0): ...

    Each value maps ``gt``/``ge``/``lt``/``le`` to a bound, as `rlvr.config.help_field` does; None passes."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = inspect.signature(fn).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for name, limits in bounds.items():  # a misspelt bound or argument is said where the part is defined, not ignored
            if name not in params and not takes_any:
                raise TypeError(f"argument_bounds({name}=...) on {fn.__name__}: it takes no argument {name!r} (it takes: {', '.join(params)})")
            if not isinstance(limits, dict) or not limits or set(limits) - set(_BOUND_NAMES) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in limits.values()):
                raise TypeError(f"argument_bounds({name}=...) on {fn.__name__}: give a mapping of {', '.join(_BOUND_NAMES)} to numbers, "
                                f"e.g. {{'gt': 0}}; got {limits!r}")
        fn.argument_bounds = {**getattr(fn, "argument_bounds", {}), **bounds}  # type: ignore[attr-defined]
        return fn
    return mark


_BOUND_NAMES = tuple(_BOUNDS)


def part_parameters(fn: Callable[..., Any], leading: int) -> dict[str, inspect.Parameter]:
    """The keyword arguments of a registered function after its ``leading`` data arguments (the
    tensors every part of its kind receives), with their defaults."""
    params = list(inspect.signature(fn).parameters.values())
    return {p.name: p for p in params[leading:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def complete(key: str, kind: str, part: Part, fn: Callable[..., Any], leading: int, supplied: set[str]) -> Part:
    """``part`` with every argument of ``fn`` filled (the function's default where unset). An
    argument the user ``supplied`` that ``fn`` does not take is an error; one that only a preset
    set for another function of its kind is dropped."""
    accepted = part_parameters(fn, leading)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())  # a **kwargs function
    unknown = [] if takes_any else sorted(k for k in part.params if k not in accepted and k in supplied)
    if unknown:
        raise ConfigError(f"algo.{key}.{unknown[0]}: the {part.name} {kind} takes no argument {unknown[0]!r} "
                          f"(it takes: {', '.join(accepted) or 'nothing'})")
    missing = [k for k, p in accepted.items() if k not in part.params and p.default is inspect.Parameter.empty]
    if missing:
        raise ConfigError(f"algo.{key}.{missing[0]}: the {part.name} {kind} needs a value for {missing[0]!r} (it has no default)")
    values = {k: part.params.get(k, p.default) for k, p in accepted.items()}
    bounds = getattr(fn, "argument_bounds", {})
    for k in part.params.keys() & accepted.keys():
        values[k] = _check_number(f"algo.{key}.{k}", part.params[k], accepted[k])
        broken = broken_bound(values[k], bounds.get(k, {}))
        if broken:
            raise ConfigError(f"algo.{key}.{k} {broken} (the {part.name} {kind}'s range)")
    extra = {k: v for k, v in part.params.items() if k not in accepted and k in supplied} if takes_any else {}
    return Part(name=part.name, **values, **extra)


def _annotation_words(param: inspect.Parameter) -> set[str]:
    """The type names an argument's annotation joins (``float | None`` -> {float, None})."""
    annotation = param.annotation if isinstance(param.annotation, str) else getattr(param.annotation, "__name__", str(param.annotation))
    return set(annotation.replace("|", " ").replace("Optional[", " ").replace("]", " ").split())


def _numeric(param: inspect.Parameter) -> tuple[bool, bool]:
    """Whether an argument takes a number (its default is one, or its annotation says int or float), and whether None
    is allowed too (a default of None, or ``| None`` in the annotation)."""
    words = _annotation_words(param)
    default = param.default
    numeric = (isinstance(default, (int, float)) and not isinstance(default, bool)) or (bool(words) and words <= {"int", "float", "None"}
                                                                                       and bool(words & {"int", "float"}))
    return numeric, default is None or "None" in words


def _boolean(param: inspect.Parameter) -> bool:
    """Whether an argument takes true or false (its default is a bool, or its annotation says bool)."""
    words = _annotation_words(param)
    return isinstance(param.default, bool) or (bool(words) and words <= {"bool", "None"} and "bool" in words)


def _check_number(setting: str, value: Any, param: inspect.Parameter) -> Any:
    """``value``, or a one-line `ConfigError` when an argument that takes a number is given something else (a string, a
    list, a bool, nan or infinity): said when the config is read, not as a traceback from the update. A number YAML read
    as a string (``1e-8``: YAML 1.1 wants ``1.0e-8``) is that number, as everywhere else in a config."""
    import math

    numeric, optional = _numeric(param)
    if _boolean(param) and not isinstance(value, bool) and not (value is None and optional):
        raise ConfigError(f"{setting} must be true or false, got {value!r}")
    if not numeric or (value is None and optional):
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{setting} must be a finite number{' (or null)' if optional else ''}, got {value!r}")
    return value
