"""A SkyRL-Gym environment as an rlvr environment (``hubs/skyrl-gym-v1``; task ids
``skyrl-gym:NAME``, `tasks.hubs`): each verification builds the environment the way SkyRL's
generator does, ``skyrl_gym.make(NAME, env_config=..., extras=row)`` with the problem's dataset row,
calls ``init`` with the row's prompt and ``step`` with the completion, and takes the step's reward.

The reward is the SkyRL environment's own (its ``compute_score``) for every completion, empty and
malformed ones included (SkyRL's AIME gives -1 to both, as to a wrong answer: an empty reply never
outranks a wrong attempt); ``pass_reward`` says what counts as a pass. An environment that raises,
or returns something that is not a step output, is an ``error`` verdict naming it. A multi-turn SkyRL environment (one whose first step is not ``done``) is
judged on the reward of that first turn; ``info['done']`` says the episode would have gone on.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from envs.hubs.common import HubEnvironment
from envs.types import Problem, Verdict


def _skyrl_gym():
    try:
        return importlib.import_module("skyrl_gym")
    except ImportError as e:
        raise ImportError(f"skyrl-gym: the 'skyrl-gym' package is not installed ({e}); install it with: pip install 'rlvr[hubs]'") from e


class SkyRLGymEnv(HubEnvironment):
    """Args:
        env_class: The SkyRL-Gym environment id (``gsm8k``, ``aime``, or one a package registers).
        env_config: Its ``env_config``.
        imports: Modules to import first (packages that register their environments on import).
        pass_reward / gold: see `envs.hubs.common.HubEnvironment`.
    """

    hub = "skyrl-gym"

    def __init__(self, env_class: str, env_config: dict[str, Any] | None = None, imports: list[str] | tuple[str, ...] = (),
                 pass_reward: float = 1.0, gold: str | None = None):
        super().__init__(pass_reward, gold)
        if not isinstance(env_class, str) or not env_class:
            raise ValueError("env_class must name a SkyRL-Gym environment, e.g. 'gsm8k'")
        self.env_class = env_class
        self.env_config = dict(env_config or {})
        self.imports = tuple(imports)
        self.ensure_registered()

    def ensure_registered(self) -> None:
        gym = _skyrl_gym()
        for module in self.imports:
            importlib.import_module(module)
        if self.env_class not in gym.registry:
            known = ", ".join(sorted(gym.registry))
            raise ValueError(f"skyrl-gym has no environment {self.env_class!r}; registered: {known} "
                             "(a package that registers its own: name it in the task config's imports)")

    def format_prompt(self, problem: Problem):
        return problem.prompt

    def answer_fields(self, problem: Problem) -> dict[str, Any]:
        row = problem.reference["row"]
        fields = {k: v for k, v in row.items() if isinstance(v, (str, int, float))}
        for key in ("reward_spec", "reward_model"):
            spec = row.get(key)
            if isinstance(spec, dict) and "ground_truth" in spec:
                fields["ground_truth"] = spec["ground_truth"]
        return fields

    def verify(self, problem: Problem, completion: str) -> Verdict:
        self.ensure_registered()  # an empty completion too: its reward is the hub's (SkyRL's AIME gives it -1, as a wrong one)
        gym = _skyrl_gym()
        row = problem.reference["row"]
        extras = json.loads(json.dumps(row))
        for given, other in (("reward_spec", "reward_model"), ("reward_model", "reward_spec")):
            if given in extras and other not in extras:  # SkyRL's environments read one name or the other (aime: reward_model)
                extras[other] = extras[given]
        env = gym.make(self.env_class, env_config=self.env_config, extras=extras)
        try:
            env.init(row.get("prompt"))
            out = env.step(completion)
        finally:
            env.close()
        if not isinstance(out, dict) or "reward" not in out:
            return Verdict.error(f"skyrl-gym {self.env_class}.step returned {type(out).__name__}, not a step output with a reward")
        reward = out["reward"]
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            return Verdict.error(f"skyrl-gym {self.env_class}.step returned a reward of type {type(reward).__name__}")
        metadata = out.get("metadata") or {}
        return self.verdict(reward, completion, env_class=self.env_class, done=bool(out.get("done")),
                            metadata={k: v for k, v in metadata.items() if isinstance(v, (str, int, float, bool)) or v is None})
