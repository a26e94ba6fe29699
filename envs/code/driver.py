"""The program that runs in the sandbox for function-call tests.

It loads the candidate's code, calls the entry point once per test with that test's arguments
(literals, or for `FunctionTest.evaluated` tests an expression evaluated in the candidate's own
module), and writes one JSON record per test to a private copy of stdout taken before the
candidate's code runs (the candidate's own prints go to a buffer). It never sees an expected
value, so there is nothing in the sandbox to compare against, patch or forge: the records are
data, decoded and judged on the trusted side by `envs.code.grade`.

A candidate can still write garbage or forged records to the channel; that cannot earn a pass,
because a record only passes if its value equals the hidden expected value. Duplicate records for
a test make the whole run invalid (`grade` checks).
"""

from __future__ import annotations

import json

from envs.code.values import ENCODER_SOURCE

CANDIDATE_FILE = "candidate.py"
INPUTS_FILE = "inputs.json"
RECORD_PREFIX = "\x1erlvr-record "  # records start with an ASCII record separator

DRIVER_TEMPLATE = r'''
import ast as _ast, io as _io, json as _json, os as _os, sys as _sys
_records = _os.fdopen(_os.dup(1), "w", encoding="utf-8")
_sys.stdout = _io.StringIO()
__ENCODER__
def _rlvr_emit(record):
    _records.write(__PREFIX__ + _json.dumps(record) + "\n")
    _records.flush()
with open(__INPUTS__, encoding="utf-8") as _f:
    _spec = _json.load(_f)
with open(__CANDIDATE__, encoding="utf-8") as _f:
    _source = _f.read()
_ns = {"__name__": "__candidate__", "__builtins__": __builtins__}
try:
    exec(compile(_source, __CANDIDATE__, "exec"), _ns)
    _fn = _ns[_spec["entry_point"]]
except BaseException as _e:
    _rlvr_emit({"load_error": type(_e).__name__ + ": " + str(_e)[:300]})
    _records.flush()
    _os._exit(0)
for _i, (_args, _evaluated) in enumerate(zip(_spec["args"], _spec["evaluated"])):
    try:
        if _evaluated:
            _a = eval("(" + _args + ",)", _ns)
        else:
            _a = _ast.literal_eval("(" + _args + ",)") if _args.strip() else ()
        _sys.stdout = _io.StringIO()
        _v = _fn(*_a)
        _rlvr_emit({"i": _i, "v": _rlvr_encode(_v)})
    except BaseException as _e:
        _rlvr_emit({"i": _i, "e": type(_e).__name__ + ": " + str(_e)[:200]})
_records.flush()
_os._exit(0)
'''


def driver_source() -> str:
    return (DRIVER_TEMPLATE.replace("__ENCODER__", ENCODER_SOURCE)
            .replace("__PREFIX__", json.dumps(RECORD_PREFIX))
            .replace("__INPUTS__", json.dumps(INPUTS_FILE))
            .replace("__CANDIDATE__", json.dumps(CANDIDATE_FILE)))


DRIVER = driver_source()
