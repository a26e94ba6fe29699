"""An OpenEnv environment server as an rlvr environment (``hubs/openenv-v1``; task ids
``openenv:URL``, `tasks.hubs`). OpenEnv keeps an episode in a WebSocket session (``/ws``), so each
verification opens one, the way OpenEnv's own ``EnvClient`` does: ``reset`` with the problem's reset
arguments (its seed), then ``step`` with the completion as the action's text field; the reward is the
one the environment answers. The problem's prompt is the observation that ``reset`` returned.

An OpenEnv environment whose first step does not end the episode (``done`` false) is judged on that
step's reward; ``info['done']`` says the episode would have gone on. A server that is down, answers
an error message, takes longer than ``timeout_s`` or answers without a reward gives an ``error`` /
``timeout`` verdict naming the URL and the reason.
"""

from __future__ import annotations

import json
from typing import Any

from envs.hubs.common import HubEnvironment
from envs.remote import RemoteError, failed_verdict
from envs.types import Problem, Verdict


def ws_url(url: str) -> str:
    return ("ws://" + url.removeprefix("http://") if url.startswith("http://") else "wss://" + url.removeprefix("https://")).rstrip("/") + "/ws"


class OpenEnvSession:
    """One OpenEnv episode over the server's WebSocket (``with OpenEnvSession(...) as s``)."""

    def __init__(self, url: str, timeout_s: float, headers: dict[str, str] | None = None):
        self.url = url
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self._ws = None

    def __enter__(self) -> OpenEnvSession:
        from websockets.sync.client import connect

        try:
            self._connection = connect(ws_url(self.url), open_timeout=self.timeout_s, close_timeout=2,
                                       additional_headers=self.headers or None, max_size=16 << 20)
            self._ws = self._connection.__enter__()
        except TimeoutError:
            raise RemoteError(f"{self.url} did not accept a session within {self.timeout_s:g} s", timeout=True) from None
        except Exception as e:
            raise RemoteError(f"{self.url} unreachable: {type(e).__name__}: {e}") from None
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._ws.send(json.dumps({"type": "close"}))
        except Exception:
            pass
        try:
            self._connection.__exit__(None, None, None)
        except Exception:
            pass

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message``; the ``data`` of the observation answered, or `RemoteError`."""
        try:
            self._ws.send(json.dumps(message))
            raw = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            raise RemoteError(f"{self.url} did not answer {message['type']} within {self.timeout_s:g} s", timeout=True) from None
        except Exception as e:
            raise RemoteError(f"{self.url} {message['type']} failed: {type(e).__name__}: {e}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise RemoteError(f"{self.url} sent something that is not JSON: {str(raw)[:120]!r}") from None
        if not isinstance(answer, dict):
            raise RemoteError(f"{self.url} sent a JSON {type(answer).__name__}, expected an object")
        if answer.get("type") == "error":
            data = answer.get("data") or {}
            raise RemoteError(f"{self.url} {message['type']} error {data.get('code', '')}: {data.get('message', data)}".strip())
        data = answer.get("data")
        if answer.get("type") != "observation" or not isinstance(data, dict):
            raise RemoteError(f"{self.url} answered {message['type']} with {str(answer)[:120]}, not an observation")
        return data

    def reset(self, **kwargs: Any) -> dict[str, Any]:
        return self.call({"type": "reset", "data": kwargs})

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return self.call({"type": "step", "data": action})


class OpenEnvEnv(HubEnvironment):
    """Args:
        url: The OpenEnv server's base URL.
        action_field: The action's text field the completion goes into.
        headers: Headers to send when opening a session.
        timeout_s: Seconds one message may take.
        pass_reward / gold: see `envs.hubs.common.HubEnvironment`.
    """

    hub = "openenv"

    def __init__(self, url: str, action_field: str = "message", headers: dict[str, str] | None = None, timeout_s: float = 60.0,
                 pass_reward: float = 1.0, gold: str | None = None):
        super().__init__(pass_reward, gold)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be the OpenEnv server's http:// or https:// address, got {url!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.url = url.rstrip("/")
        self.action_field = action_field
        self.headers = dict(headers or {})
        self.timeout_s = float(timeout_s)

    def format_prompt(self, problem: Problem):
        return problem.prompt

    def answer_fields(self, problem: Problem) -> dict[str, Any]:
        observation = problem.reference.get("observation") or {}
        return {k: v for k, v in observation.items() if isinstance(v, (str, int, float))}

    def verify(self, problem: Problem, completion: str) -> Verdict:
        try:
            with OpenEnvSession(self.url, self.timeout_s, self.headers) as session:
                session.reset(**problem.reference["reset"])
                answer = session.step({self.action_field: completion})
        except RemoteError as e:
            return failed_verdict(e, self.url, self.timeout_s)
        reward = answer.get("reward")
        if isinstance(reward, bool):
            reward = float(reward)
        if not isinstance(reward, (int, float)):
            return Verdict.error(f"{self.url} answered the step without a numeric reward ({reward!r})", remote=self.url)
        observation = answer.get("observation") or {}
        extra = {k: v for k, v in observation.items() if isinstance(v, (str, int, float, bool)) and k != self.action_field}
        verdict = observation.get("verdict")
        if isinstance(verdict, dict) and verdict.get("status") in ("error", "timeout"):  # rlvr's own export: its failure, counted
            reason = (verdict.get("info") or {}).get("error", verdict["status"])
            return Verdict.timeout(self.timeout_s, error=reason, remote=self.url) if verdict["status"] == "timeout" else Verdict.error(reason, remote=self.url)
        return self.verdict(reward, completion, remote=self.url, done=bool(answer.get("done")), observation=extra)
