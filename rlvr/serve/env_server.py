"""An environment (and its task's problems) served over HTTP: the reward server remote trainers and
the hub exports call (``rlvr envs serve ID --task TASK``).

Routes (JSON; every one but ``GET /health`` needs the bearer token, see `rlvr.serve.http`):

====================  =========================================================================
``GET /info``         the environment and task: id, multi-turn, stop strings, limits, splits, and
                      ``digest`` (`verdict_digest`: equal on servers that score alike)
``POST /problems``    ``{"split", "start", "limit"}`` → ``{"problems": [...], "size"}``
``POST /prompt``      ``{"problem"}`` → ``{"prompt"}`` (the environment's ``format_prompt``)
``POST /verify``      ``{"problems": [...], "completions": [...]}`` → ``{"verdicts": [...]}`` (``"truncated"``: which were cut)
``POST /step``        ``{"problem", "turns"}`` → ``{"observation", "calls", "rewards"}`` (multi-turn)
``POST /verify_episode``  ``{"problem", "turns", "end"}`` → ``{"verdict"}`` (multi-turn)
``POST /session/start``   ``{"problem"}`` → ``{"session", "prompt"}``: an episode held by the server
``POST /session/act``     ``{"session", "text"}`` → ``{"observation"}`` (a tool's output: act again)
                          or ``{"verdict"}`` (the episode is over and judged)
``POST /session/close``   ``{"session"}`` → ``{}``
====================  =========================================================================

Sessions are for clients that hold no transcript (the OpenEnv export): the server plays the episode
as rlvr's trainer does (`rlvr.hubs.session.Session`). At most ``MAX_SESSIONS`` are open; one idle for
``SESSION_IDLE_S`` is dropped, and acting on it is a 404 naming it.

A problem is either a full problem (``{"id", "prompt", "reference", "metadata"}``) or a reference
into the served task, ``{"split": "test", "index": 3}``, which keeps the reference answer on the
server (with ``"checksum"``, an export's checksum of that problem: a server whose task differs from
the export's refuses it). Verification runs in a `envs.pool.VerifierPool` (each item within ``timeout_s``; the
process kind kills a verifier that hangs) and steps in a `envs.episode.StepRunner` (each within the
environment's ``step_timeout_s``): an error or timeout is a verdict with its reason, as locally.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import envs
from envs.episode import End, Episode, MultiTurnEnvironment, Role, StepRunner, Turn
from envs.pool import PoolKind, VerifierPool
from envs.types import CutText, Problem
from rlvr.serve.http import GuardedServer, Guards, Handler, HTTPFailure

MAX_ITEMS = 1024
"""Problems one request may verify."""

MAX_SESSIONS = 1024
"""Episodes the server holds open at once (`POST /session/start`)."""

SESSION_IDLE_S = 600.0
"""Seconds an open episode may go unused before the server drops it."""


@dataclass(frozen=True)
class VerifySettings:
    """How the server verifies: ``workers`` in a ``kind`` pool, each item within ``timeout_s``."""

    workers: int = 2
    kind: PoolKind = "process"
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"verify workers must be an integer >= 1 (--verify-workers), got {self.workers!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"the verify timeout must be > 0 seconds (--verify-timeout), got {self.timeout_s!r}")


class EnvService:
    """The routes' logic for one environment, optionally bound to a task (for references and
    ``/problems``). Thread-safe: requests are handled in threads."""

    def __init__(self, env: envs.Environment, task: Any = None, verify: VerifySettings = VerifySettings(),
                 env_kwargs: dict[str, Any] | None = None):
        self.env = env
        self.task = task
        self.settings = verify
        self.digest = verdict_digest(env, task, env_kwargs)
        self._pool: VerifierPool | None = None
        self._steps = StepRunner(max_workers=32)
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[Any, float]] = {}

    @property
    def multi_turn(self) -> bool:
        return isinstance(self.env, MultiTurnEnvironment)

    def routes(self) -> dict[tuple[str, str], Handler]:
        routes: dict[tuple[str, str], Handler] = {
            ("GET", "/info"): self.info, ("POST", "/problems"): self.problems, ("POST", "/prompt"): self.prompt,
            ("POST", "/verify"): self.verify,
        }
        if self.multi_turn:
            routes[("POST", "/step")] = self.step
            routes[("POST", "/verify_episode")] = self.verify_episode
        routes.update({("POST", "/session/start"): self.session_start, ("POST", "/session/act"): self.session_act,
                       ("POST", "/session/close"): self.session_close})
        return routes

    # -- routes -------------------------------------------------------------------------------

    def info(self, _: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"env": self.env.id or type(self.env).__name__, "multi_turn": self.multi_turn,
                               "verify_timeout_s": self.settings.timeout_s, "digest": self.digest}
        if self.multi_turn:
            env: MultiTurnEnvironment = self.env  # type: ignore[assignment]
            limits = env.limits
            out.update(stop=list(env.stop), observation_role=env.observation_role,
                       limits={"max_turns": limits.max_turns, "max_tokens": limits.max_tokens, "max_tool_s": limits.max_tool_s,
                               "step_timeout_s": limits.step_timeout_s})
        if self.task is not None:
            out["task"] = self.task.id
            out["splits"] = {s: self.task.size(s) for s in self.task.splits}
            out["heldout_splits"] = list(self.task.heldout_splits)
        return out

    def problems(self, body: dict[str, Any]) -> dict[str, Any]:
        task = self._need_task()
        split = _field(body, "split", str)
        start = _field(body, "start", int, 0)
        limit = _field(body, "limit", int, 100)
        if start < 0 or not 1 <= limit <= MAX_ITEMS:
            raise HTTPFailure(400, f"start must be >= 0 and limit in 1..{MAX_ITEMS}")
        self._check_split(split)
        size = task.size(split)
        stop = start + limit if size is None else min(size, start + limit)
        return {"problems": [task.get(split, i).to_dict() for i in range(start, stop)], "size": size}

    def prompt(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": self.env.format_prompt(self._problem(body.get("problem"), "problem"))}

    def verify(self, body: dict[str, Any]) -> dict[str, Any]:
        items = body.get("problems")
        completions = body.get("completions")
        if not isinstance(items, list) or not isinstance(completions, list) or len(items) != len(completions):
            raise HTTPFailure(400, "'problems' and 'completions' must be lists of the same length")
        if len(items) > MAX_ITEMS:
            raise HTTPFailure(413, f"{len(items)} completions in one request; at most {MAX_ITEMS}")
        if not all(isinstance(c, str) for c in completions):
            raise HTTPFailure(400, "every completion must be a string")
        cut = body.get("truncated")
        if cut is not None:
            if not isinstance(cut, list) or len(cut) != len(completions) or not all(isinstance(t, bool) for t in cut):
                raise HTTPFailure(400, "'truncated' must be a list of true/false, one per completion")
            completions = [CutText(c) if t else c for c, t in zip(completions, cut)]
        problems = [self._problem(p, f"problems[{i}]") for i, p in enumerate(items)]
        return {"verdicts": [v.to_dict() for v in self._verify(problems, completions)]}

    def step(self, body: dict[str, Any]) -> dict[str, Any]:
        env: MultiTurnEnvironment = self.env  # type: ignore[assignment]
        problem = self._problem(body.get("problem"), "problem")
        turns = _turns(body.get("turns"))
        if not turns or turns[-1].role is not Role.MODEL:
            raise HTTPFailure(400, "'turns' must end with a model turn")
        outcome = self._steps.run(env, [(problem, turns)], env.limits.step_timeout_s)[0]
        if outcome.error is not None:
            return {"error": outcome.error.splitlines()[0]}
        if outcome.timed_out or outcome.result is None:
            return {"error": f"the step did not return within {env.limits.step_timeout_s:g} s", "timeout": True}
        result = outcome.result
        return {"observation": result.observation, "calls": [c.to_dict() for c in result.calls],
                "rewards": [r.to_dict() for r in result.rewards]}

    def verify_episode(self, body: dict[str, Any]) -> dict[str, Any]:
        problem = self._problem(body.get("problem"), "problem")
        turns = _turns(body.get("turns"))
        try:
            end = End(body.get("end", "answer"))
        except ValueError:
            raise HTTPFailure(400, f"'end' must be one of {', '.join(e.value for e in End)}") from None
        episode = Episode(tuple(turns), end)
        return {"verdict": self._verify([problem], [episode])[0].to_dict()}

    def session_start(self, body: dict[str, Any]) -> dict[str, Any]:
        import secrets
        import time

        from rlvr.hubs.session import Session

        problem = self._problem(body.get("problem"), "problem")
        session = Session(_ServiceJudge(self), problem)
        now = time.monotonic()
        with self._lock:
            for key in [k for k, (_, used) in self._sessions.items() if now - used > SESSION_IDLE_S]:
                del self._sessions[key]
            if len(self._sessions) >= MAX_SESSIONS:
                raise HTTPFailure(503, f"{MAX_SESSIONS} sessions are open; close some (POST /session/close) or retry later")
            key = secrets.token_hex(12)
            self._sessions[key] = (session, now)
        return {"session": key, "prompt": session.prompt, "multi_turn": self.multi_turn}

    def session_act(self, body: dict[str, Any]) -> dict[str, Any]:
        import time

        key = _field(body, "session", str)
        text = _field(body, "text", str)
        with self._lock:
            held = self._sessions.get(key)
            if held is None:
                raise HTTPFailure(404, f"no open session {key!r} (it ended, was closed, or sat idle over {SESSION_IDLE_S:g} s)")
            self._sessions[key] = (held[0], time.monotonic())
        reply = held[0].act(text)
        if reply.done:
            with self._lock:
                self._sessions.pop(key, None)
            return {"verdict": reply.verdict.to_dict()}
        return {"observation": reply.observation}

    def session_close(self, body: dict[str, Any]) -> dict[str, Any]:
        key = _field(body, "session", str)
        with self._lock:
            self._sessions.pop(key, None)
        return {}

    # -- helpers ------------------------------------------------------------------------------

    def _verify(self, problems: list[Problem], completions: list[Any]):
        with self._lock:
            if self._pool is None:
                s = self.settings
                self._pool = VerifierPool(self.env, workers=s.workers, kind=s.kind, timeout_s=s.timeout_s)
            pool = self._pool
        return pool.verify(problems, completions)

    def _need_task(self):
        if self.task is None:
            raise HTTPFailure(400, "this server has no task: start it with --task to serve problems by split and index")
        return self.task

    def _check_split(self, split: str) -> None:
        if split not in self.task.splits:
            raise HTTPFailure(400, f"no split {split!r}; splits: {', '.join(self.task.splits)}")

    def _problem(self, item: Any, where: str) -> Problem:
        if not isinstance(item, dict):
            raise HTTPFailure(400, f"{where} must be an object (a problem, or {{'split', 'index'}})")
        if "reference" not in item:
            task = self._need_task()
            split, index = item.get("split"), item.get("index")
            if not isinstance(split, str) or isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise HTTPFailure(400, f"{where} must be a problem or {{'split': str, 'index': int >= 0}}")
            self._check_split(split)
            size = task.size(split)
            if size is not None and index >= size:
                raise HTTPFailure(400, f"{where}: split {split!r} has {size} problems, no index {index}")
            problem = task.get(split, index)
            checksum = item.get("checksum")
            if checksum is not None:  # an export's reference: the served problem must be the one it exported
                from tasks import problems_checksum

                if problems_checksum([problem]) != checksum:
                    raise HTTPFailure(400, f"{where}: problem {index} of {split!r} on this server is not the one the export "
                                           f"wrote (checksum differs): serve the export's task and task config")
            return problem
        try:
            return Problem.from_dict(item)
        except (KeyError, TypeError, ValueError) as e:
            raise HTTPFailure(400, f"{where} is not a problem: {type(e).__name__}: {e}") from None

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
        self._steps.close()


class _ServiceJudge:
    """What `rlvr.hubs.session.Session` needs of a judge, from the service's own pool and steps."""

    def __init__(self, service: EnvService):
        self.env = service.env
        self.steps = service._steps
        self.multi_turn = service.multi_turn
        self._service = service

    def verify(self, problem: Problem, completion: Any):
        return self._service._verify([problem], [completion])[0]


def verdict_digest(env: envs.Environment, task: Any = None, env_kwargs: dict[str, Any] | None = None) -> str:
    """sha256 over what decides a verdict: the environment's id and keyword arguments, the task's id
    and config. Servers that agree on it score an answer alike; the kwargs themselves (which may hold
    secrets) never leave the server. ``env_kwargs`` default to the task's."""
    import hashlib
    import json

    if env_kwargs is None:
        env_kwargs = dict(getattr(task, "env_kwargs", None) or {})
    what = {"env": env.id or type(env).__name__, "env_kwargs": env_kwargs,
            "task": getattr(task, "id", None), "task_config": getattr(task, "config", None) if task is not None else None}
    return "sha256:" + hashlib.sha256(json.dumps(what, sort_keys=True, default=repr).encode()).hexdigest()


def _field(body: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    value = body.get(name, default)
    if value is ... or isinstance(value, bool) or not isinstance(value, kind):
        raise HTTPFailure(400, f"'{name}' must be a {kind.__name__}")
    return value


def _turns(rows: Any) -> list[Turn]:
    if not isinstance(rows, list):
        raise HTTPFailure(400, "'turns' must be a list of {'role': 'model'|'observation', 'text': str}")
    turns = []
    for i, row in enumerate(rows):
        try:
            turns.append(Turn(Role(row["role"]), row["text"]))
        except (KeyError, TypeError, ValueError):
            raise HTTPFailure(400, f"turns[{i}] must be {{'role': 'model'|'observation', 'text': str}}") from None
        if not isinstance(turns[-1].text, str):
            raise HTTPFailure(400, f"turns[{i}].text must be a string")
    return turns


def make_env_server(env: envs.Environment, guards: Guards, *, task: Any = None, host: str = "127.0.0.1", port: int = 0,
                    verify: VerifySettings = VerifySettings(), allow_remote: bool = False, dialect: str | None = None,
                    extra_routes: dict[tuple[str, str], Handler] | None = None,
                    env_kwargs: dict[str, Any] | None = None) -> tuple[GuardedServer, EnvService]:
    """A server for ``env`` (and ``task``'s problems) behind ``guards``, not yet serving: call
    ``serve_forever()`` or ``serve_in_thread()``. ``dialect`` adds another hub's routes (`rlvr.serve.dialects`);
    ``extra_routes`` adds any others; ``env_kwargs`` (default the task's) go into ``/info``'s digest."""
    import importlib

    from rlvr.serve.dialects import DIALECTS

    service = EnvService(env, task, verify, env_kwargs)
    routes = service.routes()
    if dialect is not None:
        if dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; dialects: {', '.join(sorted(DIALECTS))}")
        module, _, name = DIALECTS[dialect].partition(":")
        routes.update(getattr(importlib.import_module(module), name)(service).routes())
    routes.update(extra_routes or {})
    server = GuardedServer(routes, guards, host, port, name="rlvr-env", allow_remote=allow_remote)
    return server, service
