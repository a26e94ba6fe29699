"""rlvr's environment as a SkyRL-Gym text environment (the class an exported package registers with
``skyrl_gym.register``; importing this module needs the ``skyrl-gym`` package).

SkyRL builds one environment per sample, ``skyrl_gym.make(env_class, env_config=..., extras=row)``,
where ``row`` is the dataset row: the exported rows carry the rlvr problem in
``extra_info.rlvr_problem``. ``init`` returns the prompt as chat messages; each ``step(action)``
gets the model's turn: a single-turn environment answers with the verdict (``done``), a multi-turn
one with the tool's output as a user message until the episode ends, and then the verdict of the
whole episode. The reward is rlvr's; ``metadata["rlvr_verdict"]`` has the verdict (status, reason).
"""

from __future__ import annotations

import json
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from envs.types import Problem
from rlvr.hubs.session import Session, judge_for


class RlvrTextEnv(BaseTextEnv):
    """Args (from the registration's kwargs and SkyRL's make): ``rlvr`` = ``{"env", "env_kwargs",
    "timeout_s"}``; ``extras`` = the dataset row."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, rlvr: dict[str, Any] | None = None):
        super().__init__()
        if not rlvr or "env" not in rlvr:
            raise ValueError("RlvrTextEnv needs rlvr={'env': ID, 'env_kwargs': {...}} (set by the exported package's registration)")
        extras = extras or {}
        info = extras.get("extra_info") or {}
        if "rlvr_problem" not in info:
            raise ValueError("the dataset row has no extra_info.rlvr_problem: use the rows the exported package writes")
        judge = judge_for(rlvr["env"], rlvr.get("env_kwargs") or {}, timeout_s=float(rlvr.get("timeout_s", 30.0)))
        row = info["rlvr_problem"]
        self.session = Session(judge, Problem.from_dict(json.loads(row) if isinstance(row, str) else row))
        self.max_turns = judge.env.limits.max_turns if judge.multi_turn else 1

    def init(self, prompt: Any = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        return self.session.messages(), {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        reply = self.session.act(action)
        if not reply.done:
            return BaseTextEnvStepOutput(observations=[{"role": "user", "content": reply.observation}], reward=0.0, done=False, metadata={})
        verdict = reply.verdict
        return BaseTextEnvStepOutput(observations=[], reward=float(verdict.reward), done=True,
                                     metadata={"rlvr_verdict": verdict.to_dict()})

    def get_metrics(self) -> dict[str, Any]:
        v = self.session.verdict
        return {} if v is None else {"passed": float(v.passed), "verify_failed": float(v.status.is_failure)}
