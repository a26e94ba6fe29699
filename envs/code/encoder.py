"""The value encoder, run on both sides: in the sandbox (its source is sent there as text, so it
uses only builtins and names prefixed ``_rlvr_``) and on the trusted side for expected values.

See `envs.code.values` for the encoding and why subclasses are read through base-type methods.
"""

_RLVR_MAX_DEPTH = 64
_RLVR_EXACT = (bool, int, float, str, bytes, list, tuple, dict, set, frozenset, complex)
_RLVR_READERS = (
    (int, lambda v: int.__add__(v, 0)), (float, lambda v: float.__add__(v, 0.0)),
    (str, lambda v: str.__add__("", v)), (bytes, lambda v: bytes.__add__(b"", v)),
    (list, lambda v: list(list.__iter__(v))), (tuple, lambda v: tuple(tuple.__iter__(v))),
    (dict, lambda v: dict(dict.items(v))), (set, lambda v: set(set.__iter__(v))),
    (frozenset, lambda v: frozenset(frozenset.__iter__(v))),
)


def _rlvr_plain(value):
    """The built-in data of an instance of a built-in type's subclass, read without calling any
    method the subclass defines; None for other objects."""
    if isinstance(value, bool):
        return bool(int.__add__(value, 0))
    for base, read in _RLVR_READERS:
        if isinstance(value, base):
            return read(value)
    return None


def _rlvr_encode(value, depth=0, _b64=__import__("base64"), _math=__import__("math")):
    """JSON-ready tagged form of ``value`` (built-in data only; anything else is {"$x": type})."""
    t = type(value)
    if t not in _RLVR_EXACT and value is not None:
        plain = _rlvr_plain(value)
        if plain is None:
            return {"$x": t.__name__}
        value, t = plain, type(plain)
    if depth > _RLVR_MAX_DEPTH:
        return {"$x": "too deep"}
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        if _math.isnan(value):
            return {"$f": "nan"}
        if _math.isinf(value):
            return {"$f": "inf" if value > 0 else "-inf"}
        return value
    if t is list:
        return [_rlvr_encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"$t": [_rlvr_encode(v, depth + 1) for v in value]}
    if t is set or t is frozenset:
        return {"$s" if t is set else "$fs": [_rlvr_encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"$d": [[_rlvr_encode(k, depth + 1), _rlvr_encode(v, depth + 1)] for k, v in value.items()]}
    if t is bytes:
        return {"$b": _b64.b64encode(value).decode()}
    if t is complex:
        return {"$c": [_rlvr_encode(value.real, depth + 1), _rlvr_encode(value.imag, depth + 1)]}
    return {"$x": t.__name__}
