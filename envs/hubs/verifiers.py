"""A verifiers (v1) taskset as an rlvr environment (``hubs/verifiers-v1``; task ids
``verifiers:NAME``, `tasks.hubs`). NAME is what ``vf-eval NAME`` takes: a taskset built into
verifiers (``nemo_gym``...) or an installed taskset package.

Each problem carries its task's data (``TaskData``, as the taskset's ``load()`` made it). A
verification rebuilds the task, records the prompt and the completion as one model turn of a
``vf.Trace``, runs the task's ``setup`` when it has one, then ``Task.score``: the reward is the
trace's weighted sum of the taskset's own ``@vf.reward`` functions (and plugged ones), as verifiers
computes it after a rollout. A reward function that raises, or a score past ``timeout_s``, is an
``error`` / ``timeout`` verdict with the reason.

Refused when the environment is built, naming the feature: tasks that need a container runtime
(``NEEDS_CONTAINER``), tasksets whose own ``Env`` drives the episode (a game engine or a simulated
user playing turns), and tasks whose every reward needs a runtime.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
from typing import Any

from envs.hubs.common import HubEnvironment, content_text
from envs.types import Problem, Verdict


def vf_module():
    try:
        return importlib.import_module("verifiers.v1")
    except ImportError as e:
        raise ImportError(f"verifiers: the 'verifiers' package is not installed ({e}); install it with: pip install 'rlvr[hubs]'") from e


def _config_error(taskset: str, e: Exception) -> ValueError:
    lines = [line.strip() for line in str(e).splitlines() if line.strip() and not line.strip().startswith("For further")]
    return ValueError(f"verifiers taskset {taskset!r}: bad config: {'; '.join(lines[:6])}")


def on_path(paths) -> None:
    """Make taskset packages in ``paths`` (folders) importable."""
    import sys

    for path in paths:
        if path not in sys.path:
            sys.path.insert(0, path)


@functools.lru_cache(maxsize=32)
def loaded(taskset: str, config_json: str, imports: tuple[str, ...] = ()) -> Any:
    """The taskset ``taskset`` with config ``config_json`` (what its ``load()`` runs on); built once per process."""
    vf = vf_module()
    task_class(taskset, imports)
    try:
        config = vf.taskset_config_type(taskset).model_validate({**json.loads(config_json), "id": taskset})
    except Exception as e:  # pydantic's ValidationError names the field
        raise _config_error(taskset, e) from None
    return vf.load_taskset(config)


@functools.lru_cache(maxsize=32)
def task_class(taskset: str, imports: tuple[str, ...] = ()) -> type:
    """The task class of taskset ``taskset``, checked for what rlvr can run (`check_supported`)."""
    vf = vf_module()
    for module in imports:
        importlib.import_module(module)
    try:
        task_type = vf.utils.loaders.taskset_class(taskset).task_type()
    except ModuleNotFoundError as e:
        raise ValueError(f"verifiers taskset {taskset!r} is not installed: {e}") from None
    except TypeError as e:  # a module that is not a taskset (e.g. verifiers:json): verifiers names what it exports
        raise ValueError(f"{taskset!r} is not a verifiers taskset: {e}".splitlines()[0]) from None
    check_supported(taskset, task_type)
    return task_type


@functools.lru_cache(maxsize=32)
def task_config(taskset: str, config_json: str) -> Any:
    """The ``TaskConfig`` each task of ``taskset`` gets from the taskset config's ``task`` section."""
    vf = vf_module()
    field = vf.taskset_config_type(taskset).model_fields["task"]
    kind = field.annotation if isinstance(field.annotation, type) else type(field.get_default(call_default_factory=True))
    try:
        return kind.model_validate(json.loads(config_json).get("task") or {})
    except Exception as e:
        raise _config_error(taskset, e) from None


def check_supported(taskset: str, task_type: type) -> None:
    """Refuse, naming the feature, a taskset whose tasks rlvr cannot score from a completion."""
    vf = vf_module()
    if getattr(task_type, "NEEDS_CONTAINER", False):
        raise ValueError(f"verifiers taskset {taskset!r}: its tasks need a container runtime (NEEDS_CONTAINER), "
                         "which rlvr's import does not provide")
    env_class = vf.environment_class(taskset)
    if env_class.run is not vf.SingleAgentEnv.run:
        raise ValueError(f"verifiers taskset {taskset!r}: its environment {env_class.__name__} drives its own multi-turn "
                         "episode (Env.run: a game engine or a simulated user plays turns), which rlvr's import does not run")
    rewards = _decorated(task_type, "reward")
    if rewards and all(_needs_runtime(fn) for fn in rewards):
        raise ValueError(f"verifiers taskset {taskset!r}: every reward of {task_type.__name__} needs a runtime "
                         f"({', '.join(fn.__name__ for fn in rewards)}), which rlvr's import does not provide")


def _decorated(task_type: type, attr: str) -> list:
    """The functions of ``task_type`` tagged ``@vf.<attr>`` (as verifiers discovers them)."""
    names = {name for klass in task_type.__mro__ for name, fn in vars(klass).items() if callable(fn) and hasattr(fn, attr)}
    return [fn for name in sorted(names) if hasattr(fn := getattr(task_type, name), attr)]


def _needs_runtime(fn) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def task_prompt(data: Any) -> str | list[dict[str, str]]:
    """The rlvr prompt of a verifiers task: its text when it is one user turn without a system
    prompt, else the chat messages (system prompt first)."""
    prompt = data.prompt
    messages: list[dict[str, str]] = []
    if data.system_prompt:
        messages.append({"role": "system", "content": data.system_prompt})
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": prompt})
    else:
        messages += [{"role": m.role, "content": content_text(m.model_dump(mode="json").get("content"))} for m in prompt or []]
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return messages


class VerifiersEnv(HubEnvironment):
    """Args:
        taskset: The verifiers taskset id.
        taskset_config: Its config (the fields of its ``TasksetConfig``, as ``--env.taskset.*`` sets them).
        imports: Modules to import first.
        paths: Folders to import taskset packages from (an export not installed: ``exports/arith-vf``).
        timeout_s: Budget of one scoring (the pool's per-item timeout bounds it too).
        pass_reward / gold: see `envs.hubs.common.HubEnvironment`.
    """

    hub = "verifiers"

    def __init__(self, taskset: str, taskset_config: dict[str, Any] | None = None, imports: list[str] | tuple[str, ...] = (),
                 timeout_s: float = 60.0, pass_reward: float = 1.0, gold: str | None = None, paths: list[str] | tuple[str, ...] = ()):
        super().__init__(pass_reward, gold)
        if not isinstance(taskset, str) or not taskset:
            raise ValueError("taskset must name a verifiers taskset, e.g. 'nemo_gym'")
        self.taskset = taskset
        self.taskset_config = dict(taskset_config or {})
        self.imports = tuple(imports)
        self.paths = tuple(str(p) for p in paths)
        self.timeout_s = float(timeout_s)
        self._loaded()  # refuse what cannot run at once

    def _loaded(self) -> tuple[type, Any]:
        """(task class, task config), built once per process."""
        on_path(getattr(self, "paths", ()))
        return (task_class(self.taskset, self.imports),
                task_config(self.taskset, json.dumps(self.taskset_config, sort_keys=True, default=str)))

    def format_prompt(self, problem: Problem):
        return problem.prompt

    def answer_fields(self, problem: Problem) -> dict[str, Any]:
        data = problem.reference["data"]
        return {k: v for k, v in data.items() if isinstance(v, (str, int, float)) and k not in ("prompt", "system_prompt")}

    def task(self, problem: Problem):
        """The verifiers task of ``problem``, rebuilt from its data."""
        task_type, config = self._loaded()
        data = task_type.data_type().model_validate(problem.reference["data"])
        return task_type(data, config)

    def trace(self, task, completion: str):
        """A trace of one exchange: the task's prompt, then ``completion`` as the model's turn."""
        vf = vf_module()
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.state import state_cls

        prompt = task_prompt(task.data)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
        nodes = []
        for m in messages:
            nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=kinds[m["role"]](content=m["content"])))
        nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=vf.AssistantMessage(content=completion), sampled=True))
        return vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                        state=state_cls(type(task))(), agent=vf.AgentInfo(config=vf.AgentConfig(), name="rlvr", trainable=False),
                        nodes=nodes, is_completed=True, ok=True, stop_condition="agent_completed")

    def verify(self, problem: Problem, completion: str) -> Verdict:
        vf = vf_module()
        task = self.task(problem)
        trace = self.trace(task, completion)

        async def run() -> None:
            if type(task).setup is not vf.Task.setup:
                await task.setup(trace, None)
            await task.score(trace)

        try:
            asyncio.run(asyncio.wait_for(run(), self.timeout_s))
        except (asyncio.TimeoutError, TimeoutError):
            return Verdict.timeout(self.timeout_s, where=f"verifiers taskset {self.taskset}")
        except Exception as e:
            cause = e.__cause__ or e
            return Verdict.error(f"verifiers taskset {self.taskset}: {type(cause).__name__}: {cause}".splitlines()[0])
        missing = [name for name, r in trace.rewards.items() if r is None]
        if missing:
            return Verdict.error(f"verifiers taskset {self.taskset}: rewards not scored: {', '.join(missing)}")
        if not trace.rewards:
            return Verdict.error(f"verifiers taskset {self.taskset}: the task has no reward that runs without a runtime")
        rewards = {name: r.score for name, r in trace.rewards.items()}
        return self.verdict(trace.reward, completion, taskset=self.taskset, rewards=rewards,
                            metrics={k: v for k, v in trace.metrics.items() if v is not None})
