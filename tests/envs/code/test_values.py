import math
from collections import Counter, OrderedDict, namedtuple

import pytest

from envs.code import values
from envs.code.values import Opaque, decode, encode, loads, values_equal


def sandbox_encode(v):
    ns: dict = {}
    exec(values.ENCODER_SOURCE, ns)  # the encoder exactly as the sandbox runs it
    return ns["_rlvr_encode"](v)


SAMPLES = [None, True, 0, -7, 10**30, 1.5, float("nan"), float("inf"), -float("inf"), "é\n", b"\x00\xff", [1, [2]], (1, (2, 3)),
           {1, 2}, frozenset({"a"}), {"k": [1, 2], 3: (4,)}, 1 + 2j, [], (), {}]


@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_round_trip_through_both_encoders(value):
    for enc in (encode, sandbox_encode):
        back = loads(values.json.dumps(enc(value)))
        assert values_equal(back, value) and type(back) is type(value)


def test_subclasses_travel_as_their_builtin_data_and_cannot_lie():
    class Liar(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__

    class Lister(list):
        def __iter__(self):
            return iter([99])

    Point = namedtuple("Point", "x y")
    for enc in (encode, sandbox_encode):
        assert decode(enc(Liar(3))) == 3 and type(decode(enc(Liar(3)))) is int
        assert decode(enc(Lister([1, 2]))) == [1, 2]
        assert decode(enc(Counter("aab"))) == {"a": 2, "b": 1}
        assert decode(enc(OrderedDict(a=1))) == {"a": 1}
        assert decode(enc(Point(1, 2))) == (1, 2)
        assert isinstance(decode(enc(object())), Opaque)


def test_decoder_rejects_anything_but_the_encoding():
    for bad in ['{"a": 1}', '{"$t": 5}', '{"$zz": []}', "NaN", '{"$f": "1e5"}', '{"$s": [[1]]}', '{"$c": [1, 2]}']:
        with pytest.raises(values.DecodeError):
            loads(bad)
    deep = "[" * 200 + "]" * 200
    with pytest.raises(values.DecodeError):
        loads(deep)


def test_type_aware_comparison():
    eq = values_equal
    assert eq(1, 1.0) and eq(True, 1) and not eq("1", 1) and not eq(None, 0) and not eq(None, [])
    assert not eq([1, 2], (1, 2)) and eq((1, [2]), (1, [2])) and not eq(b"a", "a")
    assert eq({1, 2}, frozenset({2, 1})) and not eq({1}, {1, 2}) and eq({0.1 + 0.2}, {0.3})
    assert eq({"a": [1.0]}, {"a": [1]}) and not eq({"a": 1}, {"b": 1})
    assert eq(0.1 + 0.2, 0.3) and not eq(1.0, 1.001) and eq(1e9, 1e9 + 1)  # relative 1e-6
    assert eq(math.nan, math.nan) and not eq(math.inf, -math.inf) and not eq(math.inf, 1e308)
    assert eq(1.0, 1.05, abs_tol=0.1, rel_tol=0) and not eq(1.0, 1.2, abs_tol=0.1, rel_tol=0)
    assert not eq(Opaque("x"), Opaque("x"))


def test_strict_decoding_refuses_what_is_not_data():  # the tester's side of the channel
    from envs.code import decoder, encoder

    assert decoder.MAX_DEPTH == encoder._RLVR_MAX_DEPTH
    with pytest.raises(decoder.NotData, match="generator"):
        decode(encode([1, (x for x in ())]), opaque=False)
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(decoder.NotData, match="too deep"):  # the encoder cuts it off: never data
        decode(encode(deep), opaque=False)
    assert decode(encode({"a": (1, b"x")}), opaque=False) == {"a": (1, b"x")}
