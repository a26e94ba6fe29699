"""A NeMo Gym resources server as an rlvr environment (``hubs/nemo-gym-v1``; task ids
``nemo-gym:CONFIG_OR_ROWS``, `tasks.hubs`). Each verification calls the server the way NeMo Gym's
agents do: ``POST /seed_session`` with the problem's dataset row, then ``POST /verify`` with the row
and ``response``, a Responses API object holding the completion as the model's output message (the
session's cookies carried from one call to the next); the reward is the one the server answers.

A server that is down, answers an HTTP error, takes longer than ``timeout_s``, or answers without a
numeric ``reward`` gives an ``error`` / ``timeout`` verdict naming the URL and the reason. rlvr's own
server (`rlvr.serve.nemo_gym`) also answers its verdict, which is taken whole (status and reason).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from envs.hubs.common import HubEnvironment
from envs.remote import TOKEN_ENV, RemoteError, failed_verdict, verdict_from_wire
from envs.types import Problem, Verdict


def responses_object(text: str, params: dict[str, Any]) -> dict[str, Any]:
    """A completed Responses API object whose one output message is ``text``."""
    return {"id": f"resp_{uuid.uuid4().hex}", "created_at": time.time(), "model": str(params.get("model") or "rlvr"),
            "object": "response", "status": "completed",
            "output": [{"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": params.get("parallel_tool_calls", True), "tool_choice": params.get("tool_choice", "auto"),
            "tools": params.get("tools") or []}


class NeMoGymEnv(HubEnvironment):
    """Args:
        url: The resources server's base URL.
        token: A bearer token to send (default ``$RLVR_ENV_TOKEN``; none when unset).
        headers: Other headers to send with every call.
        timeout_s: Seconds one call may take.
        pass_reward / gold: see `envs.hubs.common.HubEnvironment`.
    """

    hub = "nemo-gym"

    def __init__(self, url: str, token: str | None = None, headers: dict[str, str] | None = None, timeout_s: float = 60.0,
                 pass_reward: float = 1.0, gold: str | None = None):
        super().__init__(pass_reward, gold)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be the resources server's http:// or https:// address, got {url!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.headers = dict(headers or {})
        self.timeout_s = float(timeout_s)

    def format_prompt(self, problem: Problem):
        return problem.prompt

    def answer_fields(self, problem: Problem) -> dict[str, Any]:
        return {k: v for k, v in problem.reference["row"].items() if isinstance(v, (str, int, float))}

    def _post(self, opener, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", **self.headers}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url = f"{self.url}{path}"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with opener.open(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace").strip()
            raise RemoteError(f"{url} answered HTTP {e.code}: {detail or e.reason}") from None
        except (TimeoutError, socket.timeout):
            raise RemoteError(f"{url} did not answer within {self.timeout_s:g} s", timeout=True) from None
        except urllib.error.URLError as e:
            timed_out = isinstance(e.reason, (TimeoutError, socket.timeout))
            raise RemoteError(f"{url} " + (f"did not answer within {self.timeout_s:g} s" if timed_out else f"unreachable: {e.reason}"),
                              timeout=timed_out) from None
        except OSError as e:
            raise RemoteError(f"{url} failed: {type(e).__name__}: {e}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise RemoteError(f"{url} sent something that is not JSON: {raw[:120]!r}") from None
        if not isinstance(answer, dict):
            raise RemoteError(f"{url} sent a JSON {type(answer).__name__}, expected an object")
        return answer

    def verify(self, problem: Problem, completion: str) -> Verdict:
        row = problem.reference["row"]
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        try:
            self._post(opener, "/seed_session", row)
            answer = self._post(opener, "/verify", {**row, "response": responses_object(completion, row.get("responses_create_params") or {})})
        except RemoteError as e:
            return failed_verdict(e, self.url, self.timeout_s)
        if isinstance(answer.get("rlvr_verdict"), dict):  # rlvr's own server: its verdict, status and reason kept
            return verdict_from_wire(answer["rlvr_verdict"], f"{self.url}/verify")
        reward = answer.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            return Verdict.error(f"{self.url}/verify answered without a numeric reward (keys: {', '.join(sorted(answer)[:8])})", remote=self.url)
        extra = {k: v for k, v in answer.items() if k not in row and k not in ("response", "reward") and isinstance(v, (str, int, float, bool))}
        return self.verdict(reward, completion, remote=self.url, **extra)
