"""Every known way to fake a pass must score as a failure, on every sandboxed backend here, on
both paths for function tests: literal pairs judged on the trusted side (``function``) and the
dataset's test code run by the isolated tester (``program``).

Each trick is a candidate solution that does NOT compute the right answers; the correct control
solution must pass (so these tests can fail)."""

from __future__ import annotations

import secrets

import pytest

import sandboxes
from envs.code import FunctionTest, StdioTest, TestSuite, grade_many, split_test_program

SUITE = TestSuite("function", (FunctionTest("1, 2", 3), FunctionTest("-5, 7", 2), FunctionTest("10, 20", 30)), entry_point="add")
STDIO = TestSuite("stdio", (StdioTest("3 4\n", "7\n"), StdioTest("10 -2\n", "8\n")))


def program(tests: str) -> TestSuite:
    setup, program_tests = split_test_program(tests)
    return TestSuite("program", program_tests, entry_point="add", tester_setup=setup)


# randomness, a loop, a call by name and a map(): what only the tester path can run. `import random`
# comes after the first call, when the candidate is loaded and could have planted a random.py.
PROGRAM = program("""
def check(candidate):
    assert candidate(1, 2) == 3
    import random
    for _ in range(20):
        a, b = random.randint(-99, 99), random.randint(-99, 99)
        assert candidate(a, b) == a + b
    assert add(10, 20) == 30
    assert all(map(lambda p: candidate(*p) == p[0] + p[1], [(5, 6), (7, 8)]))
""")
SUITES = {"function": SUITE, "program": PROGRAM}

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
# Tricks aimed at the tester path's channel and at the tester process itself.
CHANNEL_TRICKS = {
    "kill_the_tester": "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 0\n",
    "freeze_the_tester": "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return 0\n",
    "interrupt_the_tester": "import os, signal, time\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGINT)\n    time.sleep(0.2)\n    return 0\n",
    "kill_every_process": "import os, signal\ndef add(a, b):\n    os.kill(-1, signal.SIGKILL)\n    return 0\n",
    "exit_after_the_first_answer": "import os\nn = [0]\ndef add(a, b):\n    n[0] += 1\n    if n[0] > 1:\n        os._exit(0)\n    return 3\n",
    "answer_before_being_asked": (
        "import json, os, struct\nbody = json.dumps({'v': 3}).encode()\nfor fd in range(3, 20):\n    try:\n"
        "        for _ in range(40):\n            os.write(fd, struct.pack('>I', len(body)) + body)\n    except OSError:\n        pass\n"
        "def add(a, b):\n    return 3\n"),
    "forge_records_everywhere": (
        "import json, os\nlines = ''.join('\\x1erlvr-record ' + json.dumps({'t': '0' * 32, 'i': i, 'ok': True, 'v': 3}) + '\\n' for i in range(9))\n"
        "lines += '\\x1erlvr-record ' + json.dumps({'t': '0' * 32, 'done': True}) + '\\n'\n"
        "targets = list(range(0, 64)) + [f'/proc/{os.getppid()}/fd/{k}' for k in (1, 2)] + ['/proc/1/fd/1', '/dev/stdout']\n"
        "for t in targets:\n    try:\n        fd = t if isinstance(t, int) else os.open(t, os.O_WRONLY)\n        os.write(fd, lines.encode())\n"
        "    except OSError:\n        pass\nprint(lines)\ndef add(a, b):\n    return 0\n"),
    "flood_the_channel": (
        "import os, struct\ndef add(a, b):\n    for fd in range(1, 20):\n        try:\n            os.write(fd, struct.pack('>I', 1 << 31) + b'x' * 65536)\n"
        "        except OSError:\n            pass\n    return 0\n"),
    "huge_return_value": "def add(a, b):\n    return 'x' * (40 << 20)\n",
    "deep_return_value": "def add(a, b):\n    v = 3\n    for _ in range(1000):\n        v = [v]\n    return v\n",
    "str_subclass_equal_to_all": "class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\ndef add(a, b):\n    return S('x')\n",
    "return_a_generator": "def add(a, b):\n    return (x for x in ())\n",
    "nan_for_everything": "def add(a, b):\n    return float('nan')\n",
    "raise_stop_iteration": "def add(a, b):\n    raise StopIteration\n",  # would end all(map(...)) early if it crossed
    "plant_a_random_module": (  # randint would always give 1: the table would then hold every answer
        "import os\nplant = 'def randint(a, b):\\n    return 1\\nclass Random:\\n    def __init__(self, *a):\\n        pass\\n"
        "    def randint(self, a, b):\\n        return 1\\n'\nfor d in (os.getcwd(), '/tmp', '/tmp/job'):\n    try:\n"
        "        open(os.path.join(d, 'random.py'), 'w').write(plant)\n    except OSError:\n        pass\n"
        "def add(a, b):\n    return {(1, 2): 3, (1, 1): 2, (10, 20): 30, (5, 6): 11, (7, 8): 15}.get((a, b), 0)\n"),
}
CORRECT = "def add(a, b):\n    return a + b\n"

# The expected value exists only in the tests, i.e. in the tester's memory: a candidate that looks for it everywhere it
# can (every process's cmdline, environment, memory and descriptors; every file; its own objects) must not find it.
SECRET = "rlvr-expected-" + secrets.token_hex(8)
SECRET_SUITE = program(f"def check(candidate):\n    assert candidate(1, 2) == {SECRET!r}\n")
SEARCH_FOR_THE_SECRET = r"""
import gc, os, re, sys
PATTERN = re.compile(rb"rlvr-expected-[0-9a-f]{16}")
found = set()

def scan(data):
    found.update(m.group().decode() for m in PATTERN.finditer(data))

def read(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a pipe with nothing in it must not block the search
    except OSError:
        return b""
    try:
        return os.read(fd, 1 << 24)
    except OSError:
        return b""
    finally:
        os.close(fd)

for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for name in ("cmdline", "environ", "fd/0", "fd/1", "fd/3", "fd/4"):
        scan(read(f"/proc/{pid}/{name}"))
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(lo)
                    scan(mem.read(min(hi - lo, 1 << 26)))
                except Exception:
                    pass
    except Exception:
        pass
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys", "/dev", "/usr", "/lib", "/bin", "/sbin", "/etc", sys.base_prefix)):  # (the Python install)
        dirs[:] = []
        continue
    for name in files:
        scan(read(os.path.join(root, name)))
for obj in gc.get_objects():
    for ref in gc.get_referents(obj):
        if isinstance(ref, (str, bytes)):
            scan(ref if isinstance(ref, bytes) else ref.encode("utf-8", "replace"))

def add(a, b):
    return sorted(found)[0] if found else "not found"
"""


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


@pytest.mark.parametrize("path", list(SUITES))
def test_every_fake_pass_scores_as_a_failure(backend, path):
    # a container's start counts towards its wall time: on a loaded 2-core machine docker needs more than 3 s
    limits = sandboxes.Limits(wall_s=10 if backend.name == "docker" else 3, cpu_s=3)
    tricks = {**TRICKS, **CHANNEL_TRICKS}
    names = list(tricks)
    suite = SUITES[path]
    verdicts = grade_many([tricks[n] for n in names] + [CORRECT], [suite] * (len(names) + 1), backend=backend, limits=limits)
    *tricked, control = verdicts
    assert control.passed and control.reward == 1.0, control.info
    for name, v in zip(names, tricked):
        assert v.status.value == "ok", f"{name}: {v.status} {v.info}"  # a wrong answer, not an infrastructure error
        assert not v.passed and v.reward == 0.0, f"{name} faked a pass: {v.info}"
        assert v.info["fraction"] < 1.0


def test_the_candidate_cannot_find_what_only_the_tester_knows(backend):
    limits = sandboxes.Limits(wall_s=8, cpu_s=8)
    searched, control = grade_many([SEARCH_FOR_THE_SECRET, f"def add(a, b):\n    return {SECRET!r}\n"], [SECRET_SUITE] * 2,
                                   backend=backend, limits=limits)
    assert control.passed, control.info  # knowing the value passes: the test can fail
    assert searched.status.value == "ok" and not searched.passed, searched.info
    assert searched.info["calls"] == 1 and "gone" not in searched.info, searched.info  # it searched, then answered


def test_stdio_fake_passes_fail(backend):
    tricks = ["import sys\nsys.exit(0)\n", "print('7')\n", "import os\nos._exit(0)\n", "print('All tests passed')\n"]
    correct = "a, b = map(int, input().split())\nprint(a + b)\n"
    verdicts = grade_many(tricks + [correct], [STDIO] * (len(tricks) + 1), backend=backend)
    assert verdicts[-1].passed, verdicts[-1].info
    assert [v.passed for v in verdicts[:-1]] == [False] * len(tricks)
    assert verdicts[1].info["fraction"] == 0.5  # printing 7 is right for the first test only: partial credit
