"""Values across the sandbox boundary: a data-only tagged JSON encoding and type-aware comparison.

Encoding (the same on both sides; the sandbox's copy is `ENCODER_SOURCE`)::

    None, bool, int, str, finite float  -> themselves      list      -> [ ... ]
    tuple -> {"$t": [...]}   set -> {"$s": [...]}   frozenset -> {"$fs": [...]}
    dict  -> {"$d": [[k, v], ...]}   bytes -> {"$b": base64}   complex -> {"$c": [re, im]}
    nan/inf -> {"$f": "nan" | "inf" | "-inf"}     anything else -> {"$x": "<type name>"}

A subclass of a built-in type (``Counter``, a namedtuple, an ``IntEnum``, or an ``int`` whose
``__eq__`` always returns True) is encoded as its built-in *data*, read through the built-in
type's own methods, so no method of the candidate's class runs and an overridden ``__eq__`` or
``__iter__`` changes nothing. Other objects become ``{"$x": type name}``, which equals nothing.
The trusted side only ever calls `json.loads` and builds plain built-in values from the tags
(`decode`, in `envs.code.decoder`); it never unpickles or evaluates what a sandbox sent.

Comparison (`values_equal`) is type-aware, on those plain values, and otherwise follows Python's
``==`` for data (so dataset asserts keep their meaning):
- numbers (``bool``, ``int``, ``float``) compare as numbers, as in Python (``True == 1``); when
  either is a float they are equal if ``|a - b| <= max(abs_tol, rel_tol * max(|a|, |b|))``, with
  `REL_TOL` = 1e-6 and `ABS_TOL` = 1e-9 by default (a test may set its own, e.g. from
  ``abs(f(x) - y) < 1e-6``); two NaNs are equal, an infinity equals only itself;
- ``None`` equals only ``None``; ``str`` and ``bytes`` exactly, never each other or a number;
- ``list`` equals only ``list`` and ``tuple`` only ``tuple`` (as in Python), element by element;
  ``set`` and ``frozenset`` as sets; ``dict`` by keys and values; ``complex`` part by part.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any

from envs.code import decoder as decoder_module
from envs.code import encoder as encoder_module
from envs.code.decoder import MAX_DEPTH, DecodeError, Opaque, decode, loads
from envs.code.encoder import _rlvr_encode

REL_TOL = 1e-6
ABS_TOL = 1e-9


def encode(value: Any) -> Any:
    """The tagged form of ``value`` (the same code the sandbox runs: `envs.code.encoder`)."""
    return _rlvr_encode(value)


def dumps(value: Any) -> str:
    return json.dumps(encode(value), separators=(",", ":"))


def values_equal(actual: Any, expected: Any, *, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL, depth: int = 0) -> bool:
    """Type-aware equality of two decoded values (rules in the module docstring)."""
    if depth > MAX_DEPTH or isinstance(actual, Opaque) or isinstance(expected, Opaque):
        return False
    ta, te = type(actual), type(expected)
    if actual is None or expected is None:
        return actual is None and expected is None
    numbers = (bool, int, float)
    if ta in numbers and te in numbers:
        if ta is not float and te is not float:
            return int(actual) == int(expected)
        a, e = float(actual), float(expected)
        if math.isnan(a) or math.isnan(e):
            return math.isnan(a) and math.isnan(e)
        if math.isinf(a) or math.isinf(e):
            return a == e
        return abs(a - e) <= max(abs_tol, rel_tol * max(abs(a), abs(e)))
    if ta is complex or te is complex:
        if ta not in (int, float, complex) or te not in (int, float, complex):
            return False
        a, e = complex(actual), complex(expected)
        return values_equal(a.real, e.real, rel_tol=rel_tol, abs_tol=abs_tol) and values_equal(a.imag, e.imag, rel_tol=rel_tol, abs_tol=abs_tol)
    sets = (set, frozenset)
    if ta in sets and te in sets:
        if len(actual) != len(expected):
            return False
        remaining = list(expected)
        for a in actual:  # elements may be floats: match with the same tolerance, not by hash
            for i, e in enumerate(remaining):
                if values_equal(a, e, rel_tol=rel_tol, abs_tol=abs_tol, depth=depth + 1):
                    del remaining[i]
                    break
            else:
                return False
        return True
    if ta is not te:
        return False
    if ta in (list, tuple):
        return len(actual) == len(expected) and all(
            values_equal(a, e, rel_tol=rel_tol, abs_tol=abs_tol, depth=depth + 1) for a, e in zip(actual, expected))
    if ta is dict:
        if len(actual) != len(expected):
            return False
        for k, e in expected.items():
            match = next((ka for ka in actual if values_equal(ka, k, depth=depth + 1)), _MISSING)
            if match is _MISSING or not values_equal(actual[match], e, rel_tol=rel_tol, abs_tol=abs_tol, depth=depth + 1):
                return False
        return True
    return ta in (str, bytes) and actual == expected


_MISSING = object()


# The encoder and decoder as they run inside the sandbox: the very sources of their modules.
ENCODER_SOURCE = inspect.getsource(encoder_module)
DECODER_SOURCE = inspect.getsource(decoder_module)

__all__ = ["ABS_TOL", "DECODER_SOURCE", "ENCODER_SOURCE", "MAX_DEPTH", "REL_TOL", "DecodeError", "Opaque", "decode", "dumps", "encode",
           "loads", "values_equal"]
