"""The ``math-code`` environment: tool-integrated reasoning over math problems.

The model may run Python (`envs.tools.PythonTool`) as often as the episode's limits allow, reads
the output, and ends with a final answer in its own words, graded by the math checker
(`envs.math`). The answer is read from the model's own turns with its tool calls blanked out: a
program that prints ``Answer: 42`` or ``\\boxed{42}`` earns nothing unless the model then writes
the answer itself.

    task.env=math-code-v1   # any math task (gsm8k-v1, hendrycks-math-v1, ...) with the tool
"""

from __future__ import annotations

from typing import Any, Sequence

from envs.episode import Episode, EpisodeLimits, MultiTurnEnvironment, StepResult, Turn
from envs.math import MathEnv, plain_number
from envs.tools.python import PythonTool, blank_calls, find_call
from envs.types import Message, Problem, StepReward, Verdict

INSTRUCTIONS = (
    "You can run Python: write a ```python block and end it with ```; what it prints comes back in an "
    "```output block. Give the final answer yourself as \\boxed{...} or 'Answer: ...'.\n\n"
)


class MathCodeEnv(MultiTurnEnvironment):
    """Math with a Python tool, graded by `envs.math.check` on the model's own prose.

    Per-turn process rewards: each tool call's block gets 1.0 when the call ran and exited 0,
    else 0.0 (on top of the checker's step rewards). ``info['episode']['tool_output_correct']``
    says whether some call printed the gold answer (plain numbers only; for reports, never part
    of the reward).

    Args:
        instructions: Text put before each prompt (a system message for chat prompts); "" for none.
        max_turns / max_tokens / max_tool_s / step_timeout_s: The episode's `EpisodeLimits`.
        tool_wall_s / tool_memory_mb / output_chars / backend / backend_options: The `PythonTool`.
        extraction / timeout_s / rel_tol / process_rewards / numeric_literal: The math checker
            (`envs.math.MathEnv`).
    """

    stop = PythonTool.stop

    def __init__(self, instructions: str = INSTRUCTIONS, max_turns: int = 4, max_tokens: int = 1024, max_tool_s: float = 20.0,
                 step_timeout_s: float = 30.0, tool_wall_s: float = 3.0, tool_memory_mb: int = 256, output_chars: int = 400,
                 backend: str = "auto", backend_options: dict[str, Any] | None = None, extraction: str = "strict",
                 timeout_s: float = 1.0, rel_tol: float | None = None, process_rewards: bool = True, numeric_literal: bool = True):
        self.instructions = instructions
        self.limits = EpisodeLimits(max_turns, max_tokens, max_tool_s, step_timeout_s)
        self.tool = PythonTool(backend, tool_wall_s, tool_memory_mb, output_chars, backend_options=backend_options)
        self.math = MathEnv(extraction=extraction, timeout_s=timeout_s, rel_tol=rel_tol, process_rewards=process_rewards,
                            numeric_literal=numeric_literal)

    def format_prompt(self, problem: Problem) -> str | list[Message]:
        if not self.instructions:
            return problem.prompt
        if isinstance(problem.prompt, str):
            return self.instructions + problem.prompt
        return [{"role": "system", "content": self.instructions.strip()}, *problem.prompt]

    def step(self, problem: Problem, turns: Sequence[Turn]) -> StepResult:
        call = find_call(turns[-1].text)
        if call is None:  # the turn closed some other block: it is the final answer
            return StepResult(None)
        observation, record = self.tool.run(call.code)
        reward = StepReward(call.start, call.end, 0.0 if record.failed else 1.0, f"python: {record.status}")
        return StepResult(observation, (record,), (reward,))

    def verify(self, problem: Problem, completion: str) -> Verdict:
        """The math checker on the model's text with its tool calls blanked (same length)."""
        return self.math.verify(problem, blank_calls(completion))

    def verify_episode(self, problem: Problem, episode: Episode) -> Verdict:
        verdict = super().verify_episode(problem, episode)
        gold = plain_number(str(problem.reference))
        if gold is not None and episode.calls and "episode" in verdict.info:
            verdict.info["episode"]["tool_output_correct"] = any(plain_number(c.output.strip()) == gold for c in episode.calls if not c.failed)
        return verdict

    # -- self-check hooks ---------------------------------------------------------------------

    def gold_completion(self, problem: Problem) -> str:
        return self.math.gold_completion(problem)

    def wrong_completions(self, problem: Problem) -> list[str]:
        gold = str(problem.reference)
        # a program that prints the right answer is not the model answering
        return self.math.wrong_completions(problem) + [f"```python\nprint('Answer: {gold}')\n```\n", f"```python\nprint(r'\\boxed{{{gold}}}')\n```\n"]

    def scripted_turns(self, problem: Problem) -> list[str]:
        """A real tool call (it prints the reference), then the gold answer in the model's words."""
        return [f"```python\nprint({str(problem.reference)!r})\n```\n", self.gold_completion(problem)]

    def echo_completions(self, problem: Problem) -> list[str]:
        return self.math.echo_completions(problem)

    def examples(self) -> list[Problem]:
        return self.math.examples()
