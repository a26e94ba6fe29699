"""Other hubs' environments as rlvr tasks: a Harbor task folder written by hand after Harbor's
documented layout (``harbor:DIR``), run the way the format prescribes (the agent's commands in
/app, then the task's tests/test.sh writing /logs/verifier/reward.txt), passes `rlvr envs check`;
an rlvr export read back the same way keeps rlvr's rewards."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import tasks
from envs.checks import check_environment
from envs.types import Status
from rlvr.hubs import export


def hello_task(root: Path) -> Path:
    """A Harbor task in the shape of Harbor's documented hello-world example, written here."""
    task = root / "hello-world"
    files = {
        "instruction.md": "Create a file /app/hello.txt whose only line is: Hello, world!\n",
        "task.toml": 'version = "1.0"\n\n[metadata]\ndifficulty = "easy"\n\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 120.0\n',
        "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
        "solution/solve.sh": "#!/bin/bash\necho 'Hello, world!' > /app/hello.txt\n",
        "tests/test.sh": textwrap.dedent("""\
            #!/bin/bash
            mkdir -p /logs/verifier
            if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
              echo 1 > /logs/verifier/reward.txt
            else
              echo 0 > /logs/verifier/reward.txt
            fi
            """),
    }
    for rel, text in files.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return root


def test_a_hand_written_harbor_task_imports_and_passes_the_self_check(tmp_path):
    task = tasks.make(f"harbor:{hello_task(tmp_path)}")
    assert task.id.startswith("harbor:") and task.size("test") == 1
    problem = task.get("test", 0)
    env = task.env
    assert env.verify(problem, "```bash\necho 'Hello, world!' > /app/hello.txt\n```").passed
    assert not env.verify(problem, "```bash\necho 'Hello, world' > /app/hello.txt\n```").passed
    assert env.verify(problem, "").status is Status.NO_ANSWER
    report = check_environment(env, task.problems("test"), timeout_s=60)
    assert report.passed, [(r.name, r.detail) for r in report.results]


def test_missing_tests_or_folders_are_named(tmp_path):
    with pytest.raises(tasks.TaskError, match="no such folder"):
        tasks.make(f"harbor:{tmp_path / 'nope'}")
    (tmp_path / "t" / "x").mkdir(parents=True)
    (tmp_path / "t" / "x" / "instruction.md").write_text("do it")
    with pytest.raises(tasks.TaskError, match="no tests/test.sh"):
        tasks.make(f"harbor:{tmp_path / 't'}")


@pytest.mark.parametrize("env_id,task_id", [("math-v1", "arithmetic-v1"), ("code-v1", "program-synthesis-v1")])
def test_an_rlvr_export_runs_as_harbor_tasks_with_rlvr_rewards(tmp_path, env_id, task_id):
    source = tasks.make(task_id)
    export("harbor", env_id, source, tmp_path / "out", splits=["test"], limit=2)
    imported = tasks.make(f"harbor:{tmp_path / 'out'}")
    assert imported.size("test") == 2
    for i, problem in enumerate(source.problems("test", limit=2)):
        harbor_problem = imported.get("test", i)
        assert problem.prompt.strip() in harbor_problem.prompt
        for completion in (source.env.gold_completion(problem), *source.env.wrong_completions(problem)[:1]):
            want = source.env.verify(problem, completion)
            write = f"```bash\ncat > /app/response.txt <<'EOF_RESPONSE'\n{completion}\nEOF_RESPONSE\n```"
            got = imported.env.verify(harbor_problem, write)
            assert got.reward == want.reward, (completion, got, want)
