"""rlvr's environment as a SkyRL-Gym text environment (the class an exported package registers with
``skyrl_gym.register``; importing this module needs the ``skyrl-gym`` package).

SkyRL builds one environment per sample, ``skyrl_gym.make(env_class, env_config=..., extras=row)``,
where ``row`` is the dataset row: the exported rows carry the rlvr problem in
``extra_info.rlvr_problem``. ``init`` returns the prompt as chat messages; each ``step(action)``
gets the model's turn: a single-turn environment answers with the verdict (``done``), a multi-turn
one with the tool's output as a user message until the episode ends, and then the verdict of the
whole episode. The reward is rlvr's; ``metadata["rlvr_verdict"]`` has the verdict (status, reason).

The problem judged is the exported one at the row's ``extra_info`` ``split`` and ``index``, read from the
package's data folder only if it matches its checksums; a row that is not the one the export wrote
for them (a changed gold, prompt or problem) is refused, naming its parquet file.
"""

from __future__ import annotations

import json
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

import functools
from pathlib import Path

from envs.types import Problem
from rlvr.hubs import HubError
from rlvr.hubs.session import Session, judge_for


@functools.lru_cache(maxsize=16)
def _exported(data: str, split: str, checksum: str | None, env_class: str) -> tuple[list[Problem], list[dict]]:
    """The exported problems of ``split`` and the rows the export wrote for them (checked once per process)."""
    from rlvr.hubs.common import read_split
    from rlvr.hubs.skyrl_gym import dataset_rows

    return read_split(Path(data), split, checksum), dataset_rows(Path(data), split, env_class, checksum)


class RlvrTextEnv(BaseTextEnv):
    """Args (from the registration's kwargs and SkyRL's make): ``rlvr`` = ``{"env", "env_kwargs",
    "timeout_s"}``; ``extras`` = the dataset row."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, rlvr: dict[str, Any] | None = None):
        super().__init__()
        if not rlvr or "env" not in rlvr:
            raise ValueError("RlvrTextEnv needs rlvr={'env': ID, 'env_kwargs': {...}} (set by the exported package's registration)")
        extras = extras or {}
        info = extras.get("extra_info") or {}
        judge = judge_for(rlvr["env"], rlvr.get("env_kwargs") or {}, timeout_s=float(rlvr.get("timeout_s", 30.0)))
        self.session = Session(judge, self._problem(rlvr, extras, info))
        self.max_turns = judge.env.limits.max_turns if judge.multi_turn else 1

    @staticmethod
    def _problem(rlvr: dict[str, Any], row: dict[str, Any], info: dict[str, Any]) -> Problem:
        split, index = info.get("split"), info.get("index")
        if "data" not in rlvr:  # a registration without the export's data folder: the row's own problem
            if "rlvr_problem" not in info:
                raise HubError("the dataset row has no extra_info.rlvr_problem: use the rows the exported package writes")
            problem = info["rlvr_problem"]
            return Problem.from_dict(json.loads(problem) if isinstance(problem, str) else problem)
        from rlvr.hubs.skyrl_gym import same_row

        checksums = rlvr.get("checksums") or {}
        files = " or ".join(str(Path(rlvr["data"]) / f"{s}.parquet") for s in checksums)
        if not isinstance(split, str) or split not in checksums or isinstance(index, bool) or not isinstance(index, int):
            what = "has no extra_info" if not info else f"names no exported problem (extra_info.split {split!r}, index {index!r})"
            raise HubError(f"the dataset row {what}: use the rows of {files}")
        problems, rows = _exported(rlvr["data"], split, checksums[split], row.get("env_class") or "")
        if not 0 <= index < len(problems):
            raise HubError(f"the dataset row names problem {index} of {split!r}, which has {len(problems)}: use the rows of "
                           f"{Path(rlvr['data']) / (split + '.parquet')}")
        if not same_row(row, rows[index]):
            raise HubError(f"{Path(rlvr['data']) / (split + '.parquet')}: row {index} is not the row the export wrote "
                           f"(its problem, prompt or gold was changed)")
        return problems[index]

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
