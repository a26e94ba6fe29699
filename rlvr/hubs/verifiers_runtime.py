"""rlvr's environment as a verifiers v1 taskset (the classes an exported package subclasses;
importing this module needs the ``verifiers`` package).

- `RlvrTask`: one problem (``data.rlvr_problem``); its ``@vf.reward`` ``rlvr`` is rlvr's verdict on
  the episode, and the ``@vf.metric`` s ``rlvr_passed`` and ``rlvr_verify_failed`` say whether it
  passed and whether the verifier failed (error or timeout: reward 0 then, and counted here).
- `RlvrTaskset`: loads the frozen problems of ``config.split`` from ``config.data_dir``.
- `RlvrEpisodeEnv`: for a multi-turn environment, drives the exchange: each model turn that ends at
  a tool call gets the tool's output as the next user turn, until the model answers.

The single-turn verdict is on the model's last reply; a multi-turn one is the session's verdict on
the whole episode (model turns only), stored in ``trace.info["rlvr_verdict"]``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import verifiers.v1 as vf

from envs.types import Problem, Verdict
from rlvr.hubs import HubError
from rlvr.hubs.common import read_split
from rlvr.hubs.session import Session, hub_prompt, judge_for

VERDICT_KEY = "rlvr_verdict"


class RlvrData(vf.TaskData):
    rlvr_problem: dict
    """The rlvr problem (``Problem.to_dict``)."""
    split: str = "train"


class RlvrTaskConfig(vf.TaskConfig):
    env: str = ""
    """The rlvr environment id."""
    env_kwargs: dict = {}
    timeout_s: float = 30.0
    """Budget of one verification."""


def _judge(config: RlvrTaskConfig):
    return judge_for(config.env, dict(config.env_kwargs), timeout_s=config.timeout_s)


class RlvrTask(vf.Task[RlvrData, vf.State, RlvrTaskConfig]):
    @property
    def key(self) -> str:
        pid = str(self.data.rlvr_problem["id"])
        return pid if pid.startswith(f"{self.data.split}/") else f"{self.data.split}/{pid}"

    def verdict(self, trace: vf.Trace) -> Verdict:
        cached = trace.info.get(VERDICT_KEY)
        if isinstance(cached, dict):
            return Verdict.from_dict(cached)
        judge = _judge(self.config)
        replies = trace.assistant_messages
        text = (replies[-1].content or "") if replies else ""
        verdict = judge.verify(Problem.from_dict(self.data.rlvr_problem), text if isinstance(text, str) else "")
        trace.info[VERDICT_KEY] = verdict.to_dict()
        return verdict

    @vf.metric
    async def rlvr_passed(self, trace: vf.Trace) -> float:
        return float((await asyncio.to_thread(self.verdict, trace)).passed)

    @vf.metric
    async def rlvr_verify_failed(self, trace: vf.Trace) -> float:
        return float((await asyncio.to_thread(self.verdict, trace)).status.is_failure)

    @vf.reward(weight=1.0)
    async def rlvr(self, trace: vf.Trace) -> float:
        return float((await asyncio.to_thread(self.verdict, trace)).reward)


class RlvrTasksetConfig(vf.TasksetConfig):
    data_dir: str = ""
    """The folder with the exported splits and rlvr_export.json."""
    split: str = "train"
    """The split played (held-out ones, flagged in rlvr_export.json, are for evaluation)."""
    task: RlvrTaskConfig = RlvrTaskConfig()


def vf_prompt(prompt: Any) -> tuple[str | list, str | None]:
    """(verifiers prompt, system prompt) for an rlvr prompt (text, or chat messages)."""
    if isinstance(prompt, str):
        return prompt, None
    system = "\n\n".join(m["content"] for m in prompt if m.get("role") == "system") or None
    kinds = {"user": vf.UserMessage, "assistant": vf.AssistantMessage}
    return [kinds[m["role"]](content=m["content"]) for m in prompt if m.get("role") in kinds], system


class RlvrTaskset(vf.Taskset[RlvrTask, RlvrTasksetConfig]):
    CHECKSUMS: ClassVar[dict[str, str]] = {}
    """``{split: checksum}`` the exported package's code carries: a split that no longer matches is
    refused. A class constant, not a config field (the config is the user's to override)."""

    def load(self):
        config: RlvrTasksetConfig = self.config
        judge = _judge(config.task)
        if config.split not in self.CHECKSUMS:
            raise HubError(f"{config.data_dir}: no exported split {config.split!r}; exported splits: {', '.join(self.CHECKSUMS)}")
        for index, problem in enumerate(read_split(Path(config.data_dir), config.split, self.CHECKSUMS[config.split])):
            prompt, system = vf_prompt(hub_prompt(judge.env, problem))
            yield RlvrTask(RlvrData(idx=index, id=problem.id, prompt=prompt, system_prompt=system,
                                    rlvr_problem=problem.to_dict(), split=config.split), config.task)


class RlvrEpisodeEnv(vf.SingleAgentEnv):
    """Drives a multi-turn rlvr episode through an interaction (see the module docstring)."""

    async def run(self, task: RlvrTask, agents) -> None:
        session = Session(_judge(task.config), Problem.from_dict(task.data.rlvr_problem))
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                replies = [m for m in segment.messages if isinstance(m, vf.AssistantMessage)]
                text = (replies[-1].content or "") if replies else ""
                reply = await asyncio.to_thread(session.act, text if isinstance(text, str) else "")
                if reply.done:
                    break
                segment = await interaction.turn(reply.observation)
            if session.verdict is None:  # the run ended (a limit) before the model answered
                session.verdict = await asyncio.to_thread(session.judge.verify, session.problem, session._recorder.episode())
            interaction.trace.info[VERDICT_KEY] = session.verdict.to_dict()
