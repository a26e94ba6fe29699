"""rlvr environments as reward functions for TRL's ``GRPOTrainer`` and ``RLOOTrainer``.

    from trl import GRPOConfig, GRPOTrainer
    from rlvr.interop.trl import RewardFunction, trl_dataset

    task = tasks.make("arithmetic-v1")
    trainer = GRPOTrainer(model=..., reward_funcs=RewardFunction(task.env),
                          train_dataset=trl_dataset(task, "train", limit=4096), args=GRPOConfig(...))

TRL calls a reward function with keyword arguments ``prompts``, ``completions`` (plain strings,
or for conversational data a list of messages per completion), ``completion_ids``, every other
dataset column (one value per completion), ``trainer_state``, and, in recent versions,
``log_metric`` / ``log_extra``; it expects one float per completion, where ``None`` means "no
reward for this sample": TRL (>= 1.x) turns it into NaN, leaves it out of the group baseline and
gives it zero advantage. So a verifier error or timeout is returned as ``None`` (not 0, which
would count as a wrong answer), counted, warned about, and logged through ``log_metric`` as
``rlvr/verify_errors`` and ``rlvr/verify_timeouts``. ``on_failure="zero"`` scores it 0 instead.

The dataset carries each problem in a ``rlvr_problem`` column (JSON) beside ``prompt``, so the
reward function verifies exactly the problem the prompt came from.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Sequence

import envs
import tasks
from envs.base import Environment
from envs.types import Problem, Status
from rlvr.interop.scoring import PooledScorer, ScorerSettings

PROBLEM_COLUMN = "rlvr_problem"


def completion_text(completion: Any) -> str:
    """The model's text: a plain string as is; for chat format, the assistant messages' contents
    joined by newlines (tool or user turns in between are not the model's words)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)) and all(isinstance(m, dict) for m in completion):
        parts = [m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant"]
        if all(isinstance(p, str) for p in parts):
            return "\n".join(parts)
    raise TypeError(f"a completion must be a string or a list of chat messages with string 'content', got {type(completion).__name__}: {completion!r:.120}")


def problem_to_column(problem: Problem) -> str:
    return json.dumps(problem.to_dict(), sort_keys=True, ensure_ascii=False)


def problem_from_column(value: Any) -> Problem:
    try:
        return Problem.from_dict(json.loads(value) if isinstance(value, str) else value)
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"column {PROBLEM_COLUMN!r} must hold a problem written by rlvr.interop.trl.trl_dataset: {e}") from e


class RewardFunction:
    """An rlvr environment as a TRL reward function (see the module docstring).

    Args:
        env: An `Environment`, or a registered environment id.
        env_kwargs: Keyword arguments for an environment given by id.
        workers / kind / timeout_s: The verifier pool (`ScorerSettings`): each completion gets a
            verdict within ``timeout_s``; the process kind stops a verifier that hangs.
        on_failure: What an error or timeout verdict becomes: ``"none"`` (TRL's "no reward",
            default) or ``"zero"``.

    Attributes:
        counts: Verdicts so far by outcome (`ScoreCounts`).
    """

    def __init__(self, env: Environment | str, *, env_kwargs: dict[str, Any] | None = None, workers: int = 2,
                 kind: Literal["process", "thread"] = "process", timeout_s: float = 30.0,
                 on_failure: Literal["none", "zero"] = "none"):
        if on_failure not in ("none", "zero"):
            raise ValueError(f"on_failure must be 'none' or 'zero', got {on_failure!r}")
        if isinstance(env, str):
            env = envs.make(env, **(env_kwargs or {}))
        self.scorer = PooledScorer(env, ScorerSettings(workers=workers, kind=kind, timeout_s=timeout_s))
        self.on_failure = on_failure
        # TRL names the reward's metrics after this (rewards/rlvr:math-v1/mean)
        self.__name__ = f"rlvr:{self.scorer.name}"

    @property
    def counts(self):
        return self.scorer.counts

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], rlvr_problem: Sequence[Any] | None = None,
                 log_metric=None, log_extra=None, **_: Any) -> list[float | None]:
        if rlvr_problem is None:
            raise ValueError(f"the training dataset has no {PROBLEM_COLUMN!r} column: build it with rlvr.interop.trl.trl_dataset")
        if not len(prompts) == len(completions) == len(rlvr_problem):
            raise ValueError(f"{len(prompts)} prompts, {len(completions)} completions and {len(rlvr_problem)} problems: TRL passes one of each per completion")
        problems = [problem_from_column(p) for p in rlvr_problem]
        verdicts = self.scorer.verify(problems, [completion_text(c) for c in completions])
        fail = None if self.on_failure == "none" else 0.0
        rewards = [fail if v.status.is_failure else v.reward for v in verdicts]
        if log_metric is not None:
            log_metric("rlvr/verify_errors", float(sum(v.status == Status.ERROR for v in verdicts)))
            log_metric("rlvr/verify_timeouts", float(sum(v.status == Status.TIMEOUT for v in verdicts)))
            log_metric("rlvr/passed", sum(v.passed for v in verdicts) / max(len(verdicts), 1))
        if log_extra is not None:
            log_extra("rlvr_status", [v.status.value for v in verdicts])
        return rewards

    def close(self) -> None:
        """Stop the verifier pool's workers (also done when the object is collected)."""
        self.scorer.close()


def trl_dataset(task: tasks.Task | str, split: str, *, limit: int | None = None, seed: int = 0,
                conversational: bool = False, task_config: dict[str, Any] | None = None):
    """A task split as the ``datasets.Dataset`` TRL trains on: ``prompt`` and ``rlvr_problem``.

    The prompt is the task environment's ``format_prompt`` (chat messages stay messages;
    ``conversational=True`` wraps plain text as one user message). A finite split gives its
    problems in order (the first ``limit``); an unbounded one (procedural ``train``) needs
    ``limit`` and gives the first ``limit`` problems of rlvr's own training stream for ``seed``,
    the order `rlvr train` would use.
    """
    from datasets import Dataset

    if isinstance(task, str):
        task = tasks.make(task, **(task_config or {}))
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if task.size(split) is None:
        if limit is None:
            raise tasks.TaskError(f"split {split!r} of {task.id} is unbounded: pass limit")
        stream = task.stream(split, seed=seed)
        problems = [next(stream) for _ in range(limit)]
    else:
        problems = task.problems(split, limit=limit)
    env = task.env
    rows = []
    for p in problems:
        prompt = env.format_prompt(p)
        if conversational and isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        rows.append({"prompt": prompt, PROBLEM_COLUMN: problem_to_column(p)})
    return Dataset.from_list(rows)
