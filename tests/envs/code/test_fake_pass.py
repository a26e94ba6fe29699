"""Every known way to fake a pass must score as a failure, on every sandboxed backend here.

Each trick is a candidate solution that does NOT compute the right answers; the correct control
solution must pass (so these tests can fail)."""

from __future__ import annotations

import pytest

import sandboxes
from envs.code import FunctionTest, StdioTest, TestSuite, grade_many

SUITE = TestSuite("function", (FunctionTest("1, 2", 3), FunctionTest("-5, 7", 2), FunctionTest("10, 20", 30)), entry_point="add")
STDIO = TestSuite("stdio", (StdioTest("3 4\n", "7\n"), StdioTest("10 -2\n", "8\n")))

FORGED = "\\x1erlvr-record "
TRICKS = {
    "sys_exit_0": "import sys\nsys.exit(0)\ndef add(a, b):\n    return 0\n",
    "os_exit_0": "import os\nos._exit(0)\n",
    "os_exit_in_function": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "raise_systemexit_in_function": "def add(a, b):\n    raise SystemExit(0)\n",
    "keyboard_interrupt_in_function": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "eq_always_true": "class Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\ndef add(a, b):\n    return Any()\n",
    "int_subclass_eq_true": "class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)\n",
    "list_subclass_iter_lies": "class L(list):\n    def __iter__(self):\n        return iter([3])\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return L()\n",
    "excepthook": "import sys\nsys.excepthook = lambda *a: None\ndef add(a, b):\n    raise ValueError\n",
    "atexit_exit_0": "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0\n",
    "print_fake_summary": "print('3 passed, 0 failed')\nprint('All tests passed')\ndef add(a, b):\n    return 0\n",
    "settrace_skip": "import sys\ndef tracer(frame, event, arg):\n    return None\nsys.settrace(tracer)\ndef add(a, b):\n    return 0\n",
    "patch_builtins": "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\nbuiltins.isinstance = lambda *a: True\ndef add(a, b):\n    return 0\n",
    "forge_records_on_stdout": f"import os\nfor i in range(3):\n    os.write(1, ('{FORGED}' + '{{\"i\": %d, \"v\": 3}}\\n' % i).encode())\nos._exit(0)\n",
    "forge_records_after_reading_driver": (
        "import os, json, sys\nsrc = open('/tmp/main.py').read()\nspec = json.load(open('/tmp/inputs.json'))\n"
        "prefix = json.loads(src.split('_records.write(')[1].split(' +')[0])\n"
        "for i, args in enumerate(spec['args']):\n    os.write(1, (prefix + json.dumps({'i': i, 'v': 3}) + '\\n').encode())\nos._exit(0)\n"),
    "search_for_expected_values": (
        "import os\nfound = []\nfor root, dirs, files in os.walk('/'):\n    if root.startswith(('/proc', '/sys', '/usr')):\n        dirs[:] = []\n        continue\n"
        "    for f in files:\n        try:\n            found.append(open(os.path.join(root, f), errors='ignore').read())\n        except Exception:\n            pass\n"
        "blob = ' '.join(found)\ndef add(a, b):\n    return 30 if '30' in blob else 0\n"),
    "patch_json_dumps": "import json\n_orig = json.dumps\njson.dumps = lambda obj, **k: _orig({'i': obj.get('i'), 'v': 3} if isinstance(obj, dict) else obj, **k)\ndef add(a, b):\n    return 0\n",
    "kill_own_process_group": "import os, signal\ndef add(a, b):\n    os.kill(0, signal.SIGKILL)\n",
    "sleep_past_the_limit": "import time\ndef add(a, b):\n    time.sleep(100)\n",
}
CORRECT = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module", params=["local", "process", "docker"])
def backend(request):
    options = {}
    if request.param == "docker":  # a real engine started for the tests
        options = {k: v for k, v in request.getfixturevalue("docker_options").items() if k != "guard"}
    else:
        avail = sandboxes.backend_spec(request.param).probe()
        if not avail.ok:
            pytest.skip(f"backend {request.param!r} unavailable here: {avail.reason}")
    b = sandboxes.make_backend(request.param, **options)
    yield b
    b.close()


def test_every_fake_pass_scores_as_a_failure(backend):
    limits = sandboxes.Limits(wall_s=3, cpu_s=3)
    names = list(TRICKS)
    verdicts = grade_many([TRICKS[n] for n in names] + [CORRECT], [SUITE] * (len(names) + 1), backend=backend, limits=limits)
    *tricked, control = verdicts
    assert control.passed and control.reward == 1.0, control.info
    for name, v in zip(names, tricked):
        assert v.status.value == "ok", f"{name}: {v.status} {v.info}"  # a wrong answer, not an infrastructure error
        assert not v.passed and v.reward == 0.0, f"{name} faked a pass: {v.info}"
        assert v.info["fraction"] < 1.0


def test_stdio_fake_passes_fail(backend):
    tricks = ["import sys\nsys.exit(0)\n", "print('7')\n", "import os\nos._exit(0)\n", "print('All tests passed')\n"]
    correct = "a, b = map(int, input().split())\nprint(a + b)\n"
    verdicts = grade_many(tricks + [correct], [STDIO] * (len(tricks) + 1), backend=backend)
    assert verdicts[-1].passed, verdicts[-1].info
    assert [v.passed for v in verdicts[:-1]] == [False] * len(tricks)
    assert verdicts[1].info["fraction"] == 0.5  # printing 7 is right for the first test only: partial credit
