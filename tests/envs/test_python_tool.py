"""The Python tool on the real sandbox (the best backend here: bubblewrap workers): call syntax,
output budget, and every way a call can go wrong contained, shown to the model as text, counted,
and never holding up the other episodes of a batch."""

from __future__ import annotations

import time

import pytest

from envs.episode import StepRunner, Turn
from envs.math_code import MathCodeEnv
from envs.tools import CALL_END, PythonTool, blank_calls, find_call, render_output
from envs.types import Problem

PROBLEM = Problem("p", "Compute 48213*7719.\n", "372156147")


def call(code: str) -> str:
    return f"```python\n{code}\n```\n"


def test_a_call_is_the_python_block_that_ends_the_turn():
    assert find_call("Let me check.\n" + call("print(2+2)")).code == "print(2+2)\n"
    assert find_call(call("").replace("\n\n", "\n")).code == ""  # an empty block
    assert find_call(call("print(1)") + "Answer: 3") is None  # text after the block: not a call
    assert find_call("```text\nhello\n```\n") is None  # another kind of block
    assert find_call("inline ```python print(1)``` is not a block") is None
    turn = "a\n" + call("print(1)")
    found = find_call(turn)
    assert turn[found.start:found.end] == "print(1)\n" and turn.endswith(CALL_END)


def test_blanking_calls_keeps_length_and_lines():
    text = "Think.\n" + call("print('Answer: 42')") + "Answer: 5"
    blanked = blank_calls(text)
    assert len(blanked) == len(text) and blanked.count("\n") == text.count("\n")
    assert "42" not in blanked and blanked.endswith("Answer: 5") and blanked.startswith("Think.\n")


def test_output_is_rendered_and_cut_to_its_budget():
    assert render_output("7\n") == "```output\n7\n```\n" and render_output("7") == "```output\n7\n```\n"
    tool = PythonTool(output_chars=50)
    observation, record = tool.run("print('x' * 10000)")
    assert record.status == "ok" and record.output_truncated
    assert observation.startswith("```output\n" + "x" * 50 + "...[") and len(observation) < 120


CASES = {
    "ok": ("print(48213*7719)", "ok", "372156147"),
    "exception": ("print('before')\n1/0", "error", "ZeroDivisionError: division by zero"),
    "exit_code": ("import sys\nsys.exit(3)", "error", ""),
    "hang": ("while True:\n    pass", "timeout", "[timeout: stopped after 2 s]"),
    "sleep": ("import time\ntime.sleep(60)", "timeout", "[timeout"),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", None, ""),
    "output_flood": ("import sys\nwhile True:\n    sys.stdout.write('y' * 65536)", "output_limit", "[output limit exceeded"),
    "memory": ("x = bytearray(2 * 1024**3)", "memory", "[memory limit exceeded"),
    "segfault": ("import ctypes\nctypes.string_at(0)", "killed", "[killed by SIGSEGV]"),
}


@pytest.fixture(scope="module")
def tool():
    return PythonTool(wall_s=2.0, memory_mb=128, output_chars=200)


@pytest.mark.parametrize("name", list(CASES))
def test_every_failure_comes_back_as_text_and_is_counted(tool, name):
    code, status, shown = CASES[name]
    observation, record = tool.run(code)
    assert observation.startswith("```output\n") and observation.endswith("```\n") and len(observation) < 400
    assert shown in observation
    if status is not None:
        assert record.status == status, observation
    else:  # a fork bomb hits the process limit: the program fails or is stopped, never the host
        assert record.status in ("error", "killed", "timeout", "memory"), observation
    assert record.failed is (name != "ok")
    assert 'File "<string>"' not in observation  # the sandbox's own frames are not shown


def test_a_sandbox_that_cannot_run_is_a_counted_sandbox_error():
    tool = PythonTool(backend="remote", backend_options={"url": "http://127.0.0.1:9"})  # nothing listens there
    observation, record = tool.run("print(1)")
    assert record.status == "sandbox_error" and record.failed
    assert "[the sandbox failed to run this call]" in observation


class Timed(MathCodeEnv):
    """Records when each step started and ended (monotonic seconds), by the code it ran."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.times: dict[str, tuple[float, float]] = {}

    def step(self, problem, turns):
        start = time.monotonic()
        result = super().step(problem, turns)
        self.times[turns[-1].text] = (start, time.monotonic())
        return result


def test_hung_calls_do_not_hold_up_the_batch():
    """Two episodes' calls hang until their 2 s limit, one fork-bombs, one floods, one crashes; the
    other episodes' calls come back while the hung ones still run, and every outcome is counted."""
    env = Timed(tool_wall_s=2.0, backend="local", backend_options={"workers": 3})
    codes = ["import time\ntime.sleep(60)", "while True:\n    pass", "import os\nwhile True:\n    os.fork()", "print('z' * 10**7)", "1/0"]
    codes += [f"print({i}*{i})" for i in range(6)]
    runner = StepRunner()
    try:
        outcomes = runner.run(env, [(PROBLEM, (Turn.model(call(c)),)) for c in codes], timeout_s=30)
    finally:
        runner.close()
    records = [o.result.calls[0] for o in outcomes]
    assert [r.status for r in records[:2]] == ["timeout", "timeout"] and records[3].status == "output_limit" and records[4].status == "error"
    assert records[2].status in ("error", "killed", "timeout", "memory")
    assert [r.output for r in records[5:]] == [f"{i * i}\n" for i in range(6)] and all(r.status == "ok" for r in records[5:])
    assert all(o.result.observation.startswith("```output\n") for o in outcomes)
    # the hung calls ran side by side, and everything else finished while they were still running
    (start0, end0), (start1, end1) = (env.times[call(c)] for c in codes[:2])
    assert start1 < end0 and start0 < end1
    assert all(env.times[call(c)][1] < min(end0, end1) for c in codes[2:])
    # process rewards: 1.0 for a call that ran and exited 0, else 0.0
    assert [o.result.rewards[0].reward for o in outcomes] == [0.0] * 5 + [1.0] * 6
