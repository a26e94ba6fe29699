"""A Harbor task folder as an rlvr environment (``hubs/harbor-v1``): a completion is the agent's
shell commands (its last ```bash block, else the whole text), run in ``/app`` of a bubblewrap
sandbox, then the task's own ``tests/test.sh`` writes the reward (`rlvr.hubs.harbor`). A task
whose tests never write a reward, or that run past ``timeout_s``, is an ``error`` / ``timeout``
verdict with the reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

from envs.base import Environment
from envs.types import Problem, Verdict


class HarborEnv(Environment):
    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s

    def reward_semantics(self) -> str:
        return ("the task's own tests/test.sh reward for every completion (no commands included), after the completion's "
                "commands ran in /app; passed at reward >= 1")

    def answer_instruction(self, problem: Problem) -> str:
        return "Reply with the shell commands that do the task, in one ```bash block."

    def verify(self, problem: Problem, completion: str) -> Verdict:
        from rlvr.hubs import HubError
        from rlvr.hubs.harbor import commands_of, run_harbor_task

        commands = commands_of(completion)  # none at all too: the task's own tests/test.sh gives that its reward
        try:
            reward, info = run_harbor_task(Path(problem.reference["task_dir"]), commands, self.timeout_s)
        except subprocess.TimeoutExpired:
            return Verdict.timeout(self.timeout_s, where="harbor task")
        except (HubError, ValueError, OSError) as e:
            return Verdict.error(f"harbor task {problem.id}: {e}")
        return Verdict(reward, reward >= 1.0, extracted=commands[:200], info=info)

    def gold_completion(self, problem: Problem) -> str | None:
        solve = Path(problem.reference["task_dir"]) / "solution" / "solve.sh"
        return f"```bash\n{solve.read_text()}```\n" if solve.is_file() else None

    def wrong_completions(self, problem: Problem) -> list[str]:
        return ["```bash\ntrue\n```\n", "```bash\necho done > /app/response.txt\n```\n"]
