"""The value decoder, run on both sides of a sandbox boundary: on the trusted side for what a
sandbox sends, and inside the tester and candidate processes of the tester path (its source is sent
there as text: standard library only, no project imports).

It turns the tagged JSON of `envs.code.encoder` back into plain built-in values and nothing else:
it only ever builds ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``,
``tuple``, ``set``, ``frozenset``, ``dict`` and ``complex`` (plus `Opaque` for a value the sender
could not encode), never unpickles, imports or evaluates anything. See `envs.code.values`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting accepted (the encoder's ``_RLVR_MAX_DEPTH``; a test checks they agree)."""


class DecodeError(ValueError):
    """What the sandbox sent is not a valid encoded value."""


class NotData(DecodeError):
    """A valid encoding of a value the sender could not encode (``{"$x": type}``), where only
    data is accepted (``decode(..., opaque=False)``)."""


class Opaque:
    """Stands for a value the sandbox could not encode; equal to nothing, itself included."""

    def __init__(self, type_name: str):
        self.type_name = str(type_name)[:80]

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<unserialisable {self.type_name}>"


def decode(data: Any, depth: int = 0, opaque: bool = True) -> Any:
    """Plain built-in values from the encoding; raises `DecodeError` on anything else.

    Args:
        opaque: Whether a ``{"$x": type}`` value becomes an `Opaque` (True) or raises `NotData`
            (False: callers that need every value to be real data, such as the tester).
    """
    if depth > MAX_DEPTH + 1:  # the encoder's cut-off marker sits one level below its limit
        raise DecodeError("value nested too deeply")
    t = type(data)
    if data is None or t in (bool, int, str, float):
        return data
    if t is list:
        return [decode(v, depth + 1, opaque) for v in data]
    if t is not dict or len(data) != 1:
        raise DecodeError(f"unexpected {t.__name__} in encoded value")
    (tag, body), = data.items()
    if tag == "$t":
        return tuple(decode(v, depth + 1, opaque) for v in _list(body))
    if tag in ("$s", "$fs"):
        items = [decode(v, depth + 1, opaque) for v in _list(body)]
        try:
            return set(items) if tag == "$s" else frozenset(items)
        except TypeError as e:
            raise DecodeError(f"unhashable set element: {e}") from e
    if tag == "$d":
        pairs = [(decode(k, depth + 1, opaque), decode(v, depth + 1, opaque)) for k, v in (_pair(p) for p in _list(body))]
        try:
            return dict(pairs)
        except TypeError as e:
            raise DecodeError(f"unhashable dict key: {e}") from e
    if tag == "$b":
        try:
            return base64.b64decode(str(body), validate=True)
        except ValueError as e:
            raise DecodeError(f"bad base64: {e}") from e
    if tag == "$c":
        re_, im = (decode(v, depth + 1, opaque) for v in _pair(body))
        if type(re_) is not float or type(im) is not float:
            raise DecodeError("complex parts must be floats")
        return complex(re_, im)
    if tag == "$f":
        if body not in ("nan", "inf", "-inf"):
            raise DecodeError(f"bad float tag {body!r}")
        return float(body)
    if tag == "$x":
        if not opaque:
            raise NotData(f"an unserialisable {str(body)[:80]}")
        return Opaque(body)
    raise DecodeError(f"unknown tag {tag!r}")


def _list(body: Any) -> list:
    if type(body) is not list:
        raise DecodeError("tag body must be a list")
    return body


def _pair(body: Any) -> list:
    if type(body) is not list or len(body) != 2:
        raise DecodeError("expected a pair")
    return body


def loads(text: str | bytes, opaque: bool = True) -> Any:
    """`json.loads` + `decode`; rejects JSON's NaN/Infinity literals (floats travel as tags)."""
    def no_constants(name: str) -> Any:
        raise DecodeError(f"bare {name} in JSON")

    try:
        return decode(json.loads(text, parse_constant=no_constants), opaque=opaque)
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as e:
        raise DecodeError(f"invalid JSON: {e}") from e
