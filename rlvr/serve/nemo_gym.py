"""The NeMo Gym dialect of the environment server: rlvr's environment answers as a NeMo Gym
resources server (``rlvr envs serve ID --task T --dialect nemo-gym``), behind the same guards
(bearer token, size and time limits).

NeMo Gym's agents call a resources server with the dataset row: ``POST /seed_session`` with the row,
then, once the model has answered, ``POST /verify`` with the row plus ``response`` (a Responses API
object whose ``output`` holds the model's messages); the answer is the request with ``reward`` added.
Here a row names its rlvr problem in ``rlvr_problem``: ``{"split", "index", "checksum"}`` into the
served task, as the NeMo Gym export writes it, and nothing else (a whole problem would bring its own
reference; a checksum that differs is refused). The row's prompt (the non-system messages of
``responses_create_params.input``) must ask that problem's question (the export's prompt adds the
answer format, which a row may reword), so a row never pairs one problem's question with another's
answer. The completion is the text of the
response's output messages, and the answer adds ``reward`` (rlvr's verdict's), ``passed``,
``verify_failed`` and ``rlvr_verdict`` (status and reason). A verifier error or timeout is a
verdict with its reason (reward 0, ``verify_failed`` true), as everywhere in rlvr.

``POST /verify`` keeps answering rlvr's own requests (``{"problems", "completions"}``) too, so the
``remote-v1`` client works against the same server.
"""

from __future__ import annotations

from typing import Any

from rlvr.hubs.session import hub_prompt
from rlvr.serve.env_server import EnvService
from rlvr.serve.http import Handler, HTTPFailure


def response_text(response: Any) -> str:
    """The text of a Responses API object's output messages (``output_text`` parts, in order)."""
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        raise HTTPFailure(400, "'response' must be a Responses API object with an 'output' list")
    parts = []
    for item in response["output"]:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(c.get("text", "")) for c in content if isinstance(c, dict) and c.get("type") in ("output_text", "text")]
    return "".join(parts)


class NeMoGymDialect:
    """The NeMo Gym routes for one `EnvService` (see the module docstring)."""

    def __init__(self, service: EnvService):
        if service.multi_turn:
            raise ValueError(f"the nemo-gym dialect serves single-turn environments; {service.env.id or type(service.env).__name__} "
                             "is multi-turn (its tool calls are text in the model's turns, not NeMo Gym tool routes)")
        self.service = service

    def routes(self) -> dict[tuple[str, str], Handler]:
        return {("POST", "/seed_session"): self.seed_session, ("POST", "/verify"): self.verify}

    def seed_session(self, body: dict[str, Any]) -> dict[str, Any]:
        self._problem(body)  # a row that names no problem is refused before the rollout starts
        return {}

    def verify(self, body: dict[str, Any]) -> dict[str, Any]:
        if "responses_create_params" not in body and "problems" in body:
            return self.service.verify(body)  # rlvr's own /verify
        problem = self._problem(body)
        text = response_text(body.get("response"))
        verdict = self.service._verify([problem], [text])[0]
        return {**body, "reward": verdict.reward, "passed": verdict.passed, "verify_failed": verdict.status.is_failure,
                "rlvr_verdict": verdict.to_dict()}

    def _problem(self, body: dict[str, Any]):
        if not isinstance(body.get("responses_create_params"), dict):
            raise HTTPFailure(400, "a NeMo Gym row needs 'responses_create_params' (an object)")
        if "rlvr_problem" not in body:
            raise HTTPFailure(400, "the row has no 'rlvr_problem' (rows from `rlvr envs export ... --to nemo-gym` carry it)")
        reference = body["rlvr_problem"]
        if not isinstance(reference, dict) or set(reference) != REFERENCE_KEYS or not isinstance(reference.get("checksum"), str):
            # a whole problem would be judged by the row's own reference: anyone sending rows could set the gold
            raise HTTPFailure(400, "'rlvr_problem' must be {'split', 'index', 'checksum'} naming a problem of the served task "
                                   "(as `rlvr envs export ... --to nemo-gym` writes it)")
        problem = self.service._problem(reference, "rlvr_problem")
        asked = _user_turns(body["responses_create_params"].get("input"))
        question = _question(problem.prompt)
        if asked is None or question not in "\n".join(t for _, t in asked if isinstance(t, str)):
            raise HTTPFailure(400, f"the row's responses_create_params.input is not the prompt of problem {reference['index']} of "
                                   f"{reference['split']!r} that its 'rlvr_problem' names")
        return problem


REFERENCE_KEYS = {"split", "index", "checksum"}


def _question(prompt: Any) -> str:
    """The question a problem asks: its prompt, or the last user message of a chat prompt."""
    if isinstance(prompt, str):
        return prompt.strip()
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1] if users else "").strip()


def _user_turns(messages: Any) -> list[tuple[str, str]] | None:
    """(role, text) of the non-system messages of a Responses API ``input`` (a string is one user
    turn): what the model was asked. System turns are left out: an agent may add its own."""
    if isinstance(messages, str):
        return [("user", messages)]
    if not isinstance(messages, list):
        return None
    turns = []
    for m in messages:
        if not isinstance(m, dict):
            return None
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        if m.get("role") not in ("system", "developer"):
            turns.append((m.get("role"), content))
    return turns

