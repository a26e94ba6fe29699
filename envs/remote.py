"""Environments behind HTTP: rlvr's own environment server (`rlvr envs serve`) and the JSON calls
that every hub adapter makes to a remote server (OpenEnv, NeMo Gym).

A remote call either returns a JSON object or raises `RemoteError` with a one-line reason: the
server was unreachable, answered with an HTTP error, took longer than its budget, sent something
that is not JSON or not the expected shape. Environments turn it into an ``error`` or ``timeout``
verdict (``info['remote']`` names the URL), so a remote failure is counted like a local verifier's,
never a crash and never a silent 0.

    env = envs.make("remote-v1", url="http://127.0.0.1:8400", token="...")   # or $RLVR_ENV_TOKEN
    env = envs.make("remote-v1", url=["http://a:8400", "http://b:8400"])     # several servers
    env.verify(problem, completion)           # POST /verify on the least busy server

Calls go through `rlvr.serve.client.ServerPool` (pooled keep-alive connections, bounded retries
with backoff and jitter on transport errors, 503 and junk, failover between servers), so a server
that is busy, restarting or gone costs a retry, and only a request that fails on every try becomes
an error verdict.

The server's wire format (`rlvr.serve.env_server`): problems and verdicts as their ``to_dict``
forms; ``POST /verify {"problems": [...], "completions": [...]}`` → ``{"verdicts": [...]}`` (with
``"truncated": [bool, ...]`` when some completions were cut at their token budget, `CutText`);
``POST /step {"problem": ..., "turns": [{"role", "text"}]}`` → ``{"observation", "calls",
"rewards"}``; ``POST /verify_episode {"problem", "turns", "end"}`` → ``{"verdict"}``;
``GET /info`` → what the environment is (multi-turn, stop strings, limits).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from envs.base import Environment
from envs.episode import End, Episode, EpisodeLimits, MultiTurnEnvironment, StepResult, ToolCall, Turn
from envs.types import CutText, Problem, StepReward, Verdict
from envs.verdicts import validate_verdict
from rlvr.serve.client import Check, RemoteError, RetryPolicy, ServerPool, ServerSetupError

__all__ = ["TOKEN_ENV", "Endpoint", "RemoteEnvironment", "RemoteError", "RemoteMultiTurnEnvironment", "connect",
           "failed_verdict", "verdict_from_wire"]

TOKEN_ENV = "RLVR_ENV_TOKEN"
"""Where a client finds the server's bearer token when none is passed."""


class Endpoint:
    """One or more servers of ``rlvr envs serve`` (a `rlvr.serve.client.ServerPool`: pooled
    connections, least-outstanding balancing, bounded retries with backoff and failover)."""

    def __init__(self, url: str | Sequence[str], token: str | None = None, timeout_s: float = 60.0, retry: RetryPolicy | None = None):
        self.pool = ServerPool(url, token, timeout_s, retry or RetryPolicy())
        self.token = token
        self.timeout_s = float(timeout_s)

    @property
    def url(self) -> str:
        return self.pool.url

    @property
    def urls(self) -> tuple[str, ...]:
        return self.pool.urls

    def call(self, method: str, path: str, payload: dict[str, Any] | None = None, *, timeout_s: float | None = None,
             check: Check | None = None) -> dict[str, Any]:
        """``method path`` with a JSON body; the JSON object answered, or `RemoteError` after the retries
        (``check`` vets the answer: junk is retried on another server, `rlvr.serve.client.Check`)."""
        return self.pool.request(method, path, payload, timeout_s=timeout_s, check=check)


def failed_verdict(error: RemoteError, url: str, timeout_s: float = 0.0, **info: Any) -> Verdict:
    """The verdict for a remote call that failed: ``timeout`` (after ``timeout_s``) or ``error``, the reason kept."""
    remote = error.server or url  # the server that answered, when one did
    if error.timeout:
        return Verdict.timeout(timeout_s, error=str(error), remote=remote, **info)
    return Verdict.error(str(error), remote=remote, **info)


def verdict_from_wire(row: Any, source: str) -> Verdict:
    """A verdict sent by a server, validated; junk becomes an ``error`` verdict that says what."""
    try:
        verdict = Verdict.from_dict(row)
    except (KeyError, TypeError, ValueError) as e:
        return Verdict.error(f"{source} sent a malformed verdict: {type(e).__name__}: {e}", invalid_verdict=repr(row)[:300])
    return validate_verdict(verdict, source)


def _junk_verdict(row: Any) -> str | None:
    """What is wrong with one verdict a server sent (`verdict_from_wire` would make it an error), or None."""
    verdict = verdict_from_wire(row, "")
    return verdict.info.get("error") if "invalid_verdict" in verdict.info else None


def verdicts_check(count: int) -> Check:
    """The `Check` of a ``/verify`` answer: ``count`` verdicts, each well-formed (a finite reward...)."""
    def check(answer: dict[str, Any]) -> str | None:
        rows = answer.get("verdicts")
        if not isinstance(rows, list) or len(rows) != count:
            got = f"{len(rows)} verdicts" if isinstance(rows, list) else f"no verdict list ({sorted(answer)[:5]})"
            return f"{got} for {count} completions"
        return next((f"verdict {i}: {why}" for i, why in enumerate(map(_junk_verdict, rows)) if why), None)
    return check


def _episode_check(answer: dict[str, Any]) -> str | None:
    return _junk_verdict(answer.get("verdict"))


def _step_result(answer: dict[str, Any]) -> StepResult:
    """A ``/step`` answer as a `StepResult`; ValueError naming what is malformed."""
    observation = answer.get("observation")
    if observation is not None and not isinstance(observation, str):
        raise ValueError(f"an observation of type {type(observation).__name__}")
    try:
        calls = tuple(ToolCall(**c) for c in answer.get("calls") or ())
        rewards = tuple(StepReward.from_dict(r) for r in answer.get("rewards") or ())
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        raise ValueError(f"malformed calls or rewards: {e}") from None
    return StepResult(observation, calls, rewards)


def _step_check(answer: dict[str, Any]) -> str | None:
    if answer.get("error"):
        return None  # the environment's own step error: an answer, reported as such
    try:
        _step_result(answer)
    except ValueError as e:
        return str(e)
    return None


def _turns_to_wire(turns: Sequence[Turn]) -> list[dict[str, str]]:
    return [t.to_dict() for t in turns]


class RemoteEnvironment(Environment):
    """An environment served by ``rlvr envs serve`` (see the module docstring).

    Args:
        url: The server's base URL, or several servers of the same environment (a list, or one
            string with commas): each request goes to the least busy live one, and a server that
            fails is retried elsewhere (`rlvr.serve.client`).
        token: Their bearer token (default ``$RLVR_ENV_TOKEN``).
        timeout_s: Seconds one call may take (the server bounds each verification itself; this
            bounds the round trip).
    """

    def __init__(self, url: str | Sequence[str], token: str | None = None, timeout_s: float = 60.0):
        self.endpoint = Endpoint(url, token if token is not None else os.environ.get(TOKEN_ENV), timeout_s)

    @property
    def url(self) -> str:
        return self.endpoint.url

    def format_prompt(self, problem: Problem):
        try:
            return self.endpoint.call("POST", "/prompt", {"problem": problem.to_dict()})["prompt"]
        except (RemoteError, KeyError):
            return problem.prompt

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return self.verify_many([problem], [completion])[0]

    def verify_many(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        if len(problems) != len(completions):
            raise ValueError(f"verify_many: {len(problems)} problems but {len(completions)} completions")
        try:
            body: dict[str, Any] = {"problems": [p.to_dict() for p in problems], "completions": list(completions)}
            if any(isinstance(c, CutText) for c in completions):  # JSON carries text only: say which were cut
                body["truncated"] = [isinstance(c, CutText) for c in completions]
            answer = self.endpoint.call("POST", "/verify", body, check=verdicts_check(len(problems)))
        except RemoteError as e:
            return [failed_verdict(e, self.url, self.endpoint.timeout_s) for _ in problems]
        rows = answer.get("verdicts")
        if not isinstance(rows, list) or len(rows) != len(problems):
            got = f"{len(rows)} verdicts" if isinstance(rows, list) else f"no verdict list ({sorted(answer)[:5]})"
            return [Verdict.error(f"{self.url}/verify sent {got} for {len(problems)} completions", remote=self.url) for _ in problems]
        return [verdict_from_wire(r, f"{self.url}/verify") for r in rows]

    def info(self) -> dict[str, Any]:
        """The server's ``GET /info``."""
        return self.endpoint.call("GET", "/info")


class RemoteMultiTurnEnvironment(RemoteEnvironment, MultiTurnEnvironment):
    """A multi-turn environment served by ``rlvr envs serve``: each step and the final verdict are
    calls to the server (which holds no state between them: every call carries the transcript)."""

    def __init__(self, url: str | Sequence[str], token: str | None = None, timeout_s: float = 60.0, stop: Sequence[str] = (),
                 limits: dict[str, Any] | None = None, observation_role: str = "tool"):
        super().__init__(url, token, timeout_s)
        self.stop = tuple(stop)
        self.limits = EpisodeLimits(**(limits or {}))
        self.observation_role = observation_role

    def step(self, problem: Problem, turns: Sequence[Turn]) -> StepResult:
        # a remote failure raises: the episode then ends with an error verdict naming it. A malformed
        # answer is junk (`_step_check`): retried on another server, and past the retries named by server
        answer = self.endpoint.call("POST", "/step", {"problem": problem.to_dict(), "turns": _turns_to_wire(turns)}, check=_step_check)
        if answer.get("error"):
            raise RemoteError(f"{self.url}/step: {answer['error']}")
        return _step_result(answer)

    def verify_episode(self, problem: Problem, episode: Episode) -> Verdict:
        if episode.end in (End.STEP_ERROR, End.STEP_TIMEOUT):
            return super().verify_episode(problem, episode)
        try:
            answer = self.endpoint.call("POST", "/verify_episode", {"problem": problem.to_dict(), "turns": _turns_to_wire(episode.turns),
                                                                    "end": episode.end.value}, check=_episode_check)
        except RemoteError as e:
            return failed_verdict(e, self.url, self.endpoint.timeout_s)
        return verdict_from_wire(answer.get("verdict"), f"{self.url}/verify_episode")


def connect(url: str | Sequence[str], token: str | None = None, timeout_s: float = 60.0) -> RemoteEnvironment:
    """The environment served at ``url`` (one server or several of the same environment): multi-turn
    when the servers say so (``GET /info``). Every server must answer and serve the same environment
    before anything else starts (else `ServerSetupError`, one line). Registered as ``remote-v1``."""
    env = RemoteEnvironment(url, token, timeout_s)
    try:
        infos = env.endpoint.pool.check("/info", timeout_s=min(timeout_s, 10.0))
    except RemoteError as e:
        raise ServerSetupError(f"cannot reach the environment server: {e}") from None
    described = {u: {k: i.get(k) for k in ("env", "task", "multi_turn", "stop", "limits")} for u, i in infos.items()}
    if len({repr(d) for d in described.values()}) > 1:
        listed = "; ".join(f"{u}: env {d['env']!r}, task {d['task']!r}" for u, d in described.items())
        raise ServerSetupError(f"the environment servers do not serve the same environment ({listed})")
    digests = {u: i.get("digest") for u, i in infos.items()}
    if len(set(digests.values())) > 1:
        groups: dict[Any, list[str]] = {}
        for u, d in digests.items():
            groups.setdefault(d, []).append(u)
        listed = "; ".join(", ".join(us) for us in groups.values())
        raise ServerSetupError(f"the environment servers score differently (their env kwargs or task config differ, see "
                         f"GET /info 'digest'): start them with the same settings; servers that agree: {listed}")
    info = next(iter(infos.values()))
    if info.get("multi_turn"):
        return RemoteMultiTurnEnvironment(url, env.endpoint.token, timeout_s, stop=info.get("stop") or (),
                                          limits=info.get("limits") or None, observation_role=info.get("observation_role", "tool"))
    return env
