"""The runtime side of every export: one rlvr environment judging the turns a hub sends it.

A hub calls its environment in its own way (verifiers' reward hooks, SkyRL's ``step``, OpenEnv's
``reset``/``step``, NeMo Gym's ``verify``); each adapter holds a `Session` per episode and feeds it
the model's turns. A single-turn environment judges the first turn; a multi-turn one answers each
turn that ends at a tool call with its observation (the step function within the environment's
``step_timeout_s``) until the model answers or a limit ends the episode, and then judges the whole
episode from the model's own turns, exactly as in rlvr's trainer (`envs.episode`).

Verification goes through a `envs.pool.VerifierPool` shared by the process (`judge_for`), each
item within ``timeout_s``: an error or timeout is a verdict with its reason, never an exception in
the hub's loop.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import envs
from envs.episode import EpisodeRecorder, MultiTurnEnvironment, StepRunner
from envs.pool import PoolKind, VerifierPool
from envs.types import Message, Problem, Verdict

_JUDGES: dict[str, Judge] = {}
_JUDGES_LOCK = threading.Lock()


class Judge:
    """An environment, its verifier pool and step runner, shared by a process's sessions."""

    def __init__(self, env: envs.Environment, *, timeout_s: float = 30.0, kind: PoolKind = "thread", workers: int = 4):
        self.env = env
        self.timeout_s = timeout_s
        self.pool = VerifierPool(env, workers=workers, kind=kind, timeout_s=timeout_s)
        self.steps = StepRunner(max_workers=32)

    @property
    def multi_turn(self) -> bool:
        return isinstance(self.env, MultiTurnEnvironment)

    def verify(self, problem: Problem, completion: Any) -> Verdict:
        return self.pool.verify([problem], [completion])[0]

    def close(self) -> None:
        self.pool.close()
        self.steps.close()


def judge_for(env_id: str, env_kwargs: dict[str, Any] | None = None, **settings: Any) -> Judge:
    """The process's `Judge` for ``env_id`` with ``env_kwargs`` (built on first use)."""
    key = json.dumps([env_id, env_kwargs or {}, settings], sort_keys=True, default=str)
    with _JUDGES_LOCK:
        if key not in _JUDGES:
            _JUDGES[key] = Judge(envs.make(env_id, **(env_kwargs or {})), **settings)
        return _JUDGES[key]


@dataclass(frozen=True)
class Reply:
    """What the environment answers to a model turn.

    Attributes:
        observation: Text for the model's next turn (a tool's output), or None when the episode is over.
        verdict: The final verdict once the episode is over.
    """

    observation: str | None
    verdict: Verdict | None

    @property
    def done(self) -> bool:
        return self.verdict is not None


class Session:
    """One episode: `prompt`, then `act` with each model turn until `Reply.done`."""

    def __init__(self, judge: Judge, problem: Problem):
        self.judge = judge
        self.problem = problem
        env = judge.env
        self._recorder = EpisodeRecorder(env.limits) if isinstance(env, MultiTurnEnvironment) else None
        self.verdict: Verdict | None = None

    @property
    def prompt(self) -> list[Message]:
        return hub_prompt(self.judge.env, self.problem)

    def messages(self) -> list[Message]:
        """The prompt as chat messages, with the answer-format instruction."""
        return self.prompt

    def act(self, text: str) -> Reply:
        if self.verdict is not None:
            raise RuntimeError("the episode is over: start a new session")
        if not isinstance(text, str):
            raise TypeError(f"a model turn must be text, got {type(text).__name__}")
        recorder = self._recorder
        if recorder is None:
            return self._finish(text)
        env: MultiTurnEnvironment = self.judge.env  # type: ignore[assignment]
        text = at_tool_call(text, env.stop)
        if recorder.model_turn(text, at_stop=any(text.endswith(s) for s in env.stop)):
            outcome = self.judge.steps.run(env, [(self.problem, recorder.turns)], env.limits.step_timeout_s)[0]
            observation = recorder.stepped(outcome)
            if observation is not None:
                recorder.observation(observation)
                return Reply(observation, None)
        return self._finish(recorder.episode())

    def _finish(self, completion: Any) -> Reply:
        self.verdict = self.judge.verify(self.problem, completion)
        return Reply(None, self.verdict)


def hub_prompt(env: envs.Environment, problem: Problem) -> list[Message]:
    """The prompt every export shows: chat messages, the question followed by the environment's
    answer-format instruction (as rlvr shows a chat model; a hub's models are chat models)."""
    from rlvr.rollout.prompts import PromptStyle

    return PromptStyle(chat=True).render(env, problem)


def at_tool_call(text: str, stop: tuple[str, ...]) -> str:
    """``text`` ending at its stop string when it ends at one but for trailing whitespace: a chat API
    returns a turn without the stop's trailing newline (``...\\n```"`` for ``"\\n```\\n"``)."""
    if any(text.endswith(s) for s in stop):
        return text
    trimmed = text.rstrip()
    for s in stop:
        if (trimmed + s[len(s.rstrip()):]).endswith(s):
            return trimmed + s[len(s.rstrip()):]
    return text


def score_text(env_id: str, env_kwargs: dict[str, Any], problem: Problem, text: str, **settings: Any) -> Verdict:
    """The verdict on a single-turn completion (the reward hooks of single-turn exports)."""
    return judge_for(env_id, env_kwargs, **settings).verify(problem, text)
