"""The request bodies of `rlvr rollout serve`, parsed and checked at the server's edge, before any engine.

Every route that takes token ids or sampling settings reads its JSON body here, into one typed
request (`GenerateRequest`, `ScoreRequest`), so a bad body is refused the same way whichever engine
serves it (``--engine hf`` or ``vllm``): a `RequestError` whose one-line message names the field
(``prompt_ids[0][3]``, ``sampling.temperature``), which the server answers with HTTP 400.

What is checked: types (a JSON bool is not a number), token ids within the served model's vocabulary,
non-empty prompts, ``temperature >= 0``, ``0 < top_p <= 1``, ``top_k >= 0``, ``n >= 1``,
``max_new_tokens >= 1``, and the caps of `ServeLimits` (the model's context length and what the
server's admin allows: ``--max-new-tokens``, ``--max-n``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from rlvr.rollout.base import SamplingParams

DEFAULT_MAX_NEW_TOKENS = 4096
"""``rlvr rollout serve --max-new-tokens``: the longest completion a request may ask for."""

DEFAULT_MAX_N = 256
"""``rlvr rollout serve --max-n``: the most completions per prompt a request may ask for."""

MAX_SEED = 2 ** 63 - 1
"""Largest ``sampling.seed`` (what a torch generator takes)."""


class RequestError(ValueError):
    """A request body the server refuses (HTTP 400); the message names the field."""


@dataclass(frozen=True)
class ServeLimits:
    """What a served model and its admin allow a request.

    Attributes:
        vocab_size: Rows of the model's embedding: every token id must be in ``[0, vocab_size)``.
        context_length: Longest prompt + completion (``max_new_tokens``, or the given completion
            for ``/score``) the model takes; None when the model does not say.
        max_new_tokens: Largest ``sampling.max_new_tokens`` a request may ask (``--max-new-tokens``).
        max_n: Largest ``n`` (completions per prompt) a request may ask (``--max-n``).
    """

    vocab_size: int
    context_length: int | None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    max_n: int = DEFAULT_MAX_N

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_new_tokens", "max_n"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class GenerateRequest:
    """``POST /generate``: ``n`` completions of each prompt, sampled with ``sampling``."""

    prompt_ids: list[list[int]]
    n: int
    sampling: SamplingParams

    @classmethod
    def parse(cls, body: dict[str, Any], limits: ServeLimits) -> GenerateRequest:
        _only(body, ("prompt_ids", "n", "sampling"), "")
        prompts = _prompts(_required(body, "prompt_ids"), "prompt_ids", limits)
        n = _int(_required(body, "n"), "n", low=1, high=limits.max_n, cap="--max-n")
        sampling = _sampling(body.get("sampling", {}), limits)
        if limits.context_length is not None:
            longest = max(range(len(prompts)), key=lambda i: len(prompts[i]), default=None)
            if longest is not None and len(prompts[longest]) + sampling.max_new_tokens > limits.context_length:
                raise RequestError(f"prompt_ids[{longest}]: {len(prompts[longest])} prompt tokens + sampling.max_new_tokens "
                                   f"{sampling.max_new_tokens} is over the model's context of {limits.context_length} tokens")
        return cls(prompts, n, sampling)


@dataclass(frozen=True)
class ScoreRequest:
    """``POST /score``: the log-prob of each completion token given its prompt (row by row)."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]

    @classmethod
    def parse(cls, body: dict[str, Any], limits: ServeLimits) -> ScoreRequest:
        _only(body, ("prompt_ids", "completion_ids"), "")
        prompts = _prompts(_required(body, "prompt_ids"), "prompt_ids", limits)
        completions = _id_rows(_required(body, "completion_ids"), "completion_ids", limits, allow_empty=True)
        if len(completions) != len(prompts):
            raise RequestError(f"completion_ids: {len(completions)} rows for {len(prompts)} prompts (one completion per prompt)")
        for i, (p, c) in enumerate(zip(prompts, completions)):
            if limits.context_length is not None and len(p) + len(c) > limits.context_length:
                raise RequestError(f"completion_ids[{i}]: {len(p)} prompt + {len(c)} completion tokens is over the model's "
                                   f"context of {limits.context_length} tokens")
        return cls(prompts, completions)


def parse_object(value: Any, field: str) -> dict[str, Any]:
    """A field that must be a JSON object (e.g. the NCCL routes' ``init_info``)."""
    if not isinstance(value, dict):
        raise RequestError(f"{field}: expected a JSON object, got {_kind(value)}")
    return value


def parse_flag(value: str, field: str) -> bool:
    """A query parameter that is ``0`` or ``1``."""
    if value not in ("0", "1"):
        raise RequestError(f"{field}: expected 0 or 1, got {value!r}")
    return value == "1"


# -- fields --------------------------------------------------------------------------------------

def _required(body: dict[str, Any], field: str) -> Any:
    if field not in body:
        raise RequestError(f"{field}: missing")
    return body[field]


def _only(body: dict[str, Any], known: tuple[str, ...], prefix: str) -> None:
    """An unknown key is refused (a typo would otherwise be a setting silently left at its default)."""
    for key in body:
        if key not in known:
            raise RequestError(f"{prefix}{key}: unknown field; known: {', '.join(known)}")


def _kind(value: Any) -> str:
    return "null" if value is None else "a bool" if isinstance(value, bool) else f"a {type(value).__name__}"


def _int(value: Any, field: str, *, low: int, high: int | None = None, cap: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{field}: expected an integer, got {_kind(value)}")
    if value < low:
        raise RequestError(f"{field}: must be >= {low}, got {value}")
    if high is not None and value > high:
        raise RequestError(f"{field}: {value} is over this server's limit of {high}" + (f" ({cap})" if cap else ""))
    return value


def _float(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{field}: expected a finite number, got {_kind(value) if not isinstance(value, float) else value}")
    return float(value)


def _id_rows(value: Any, field: str, limits: ServeLimits, *, allow_empty: bool) -> list[list[int]]:
    if not isinstance(value, list):
        raise RequestError(f"{field}: expected a list of token-id lists, got {_kind(value)}")
    rows = []
    for i, row in enumerate(value):
        if not isinstance(row, list):
            raise RequestError(f"{field}[{i}]: expected a list of token ids, got {_kind(row)}")
        if not row and not allow_empty:
            raise RequestError(f"{field}[{i}]: an empty prompt (a prompt needs at least one token)")
        for j, token in enumerate(row):
            if isinstance(token, bool) or not isinstance(token, int):
                raise RequestError(f"{field}[{i}][{j}]: expected a token id (integer), got {_kind(token)}")
            if not 0 <= token < limits.vocab_size:
                raise RequestError(f"{field}[{i}][{j}]: token id {token} is outside the model's vocabulary [0, {limits.vocab_size})")
        rows.append(row)
    return rows


def _prompts(value: Any, field: str, limits: ServeLimits) -> list[list[int]]:
    rows = _id_rows(value, field, limits, allow_empty=False)
    if not rows:
        raise RequestError(f"{field}: no prompts (give at least one)")
    return rows


SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams))


def _sampling(value: Any, limits: ServeLimits) -> SamplingParams:
    raw = parse_object(value, "sampling")
    _only(raw, SAMPLING_FIELDS, "sampling.")
    given: dict[str, Any] = {}
    if "temperature" in raw:
        given["temperature"] = _float(raw["temperature"], "sampling.temperature")
        if given["temperature"] < 0:
            raise RequestError(f"sampling.temperature: must be >= 0 (0 is greedy), got {raw['temperature']}")
    if "top_p" in raw:
        given["top_p"] = _float(raw["top_p"], "sampling.top_p")
        if not 0 < given["top_p"] <= 1:
            raise RequestError(f"sampling.top_p: must be in (0, 1], got {raw['top_p']}")
    if "top_k" in raw:
        given["top_k"] = _int(raw["top_k"], "sampling.top_k", low=0, high=limits.vocab_size, cap="the model's vocabulary; 0 is off")
    if "max_new_tokens" in raw:
        given["max_new_tokens"] = _int(raw["max_new_tokens"], "sampling.max_new_tokens", low=1, high=limits.max_new_tokens,
                                       cap="--max-new-tokens")
    else:
        given["max_new_tokens"] = min(SamplingParams.max_new_tokens, limits.max_new_tokens)
    if raw.get("seed") is not None:
        given["seed"] = _int(raw["seed"], "sampling.seed", low=0, high=MAX_SEED)
    if "stop" in raw:
        stop = raw["stop"]
        if not isinstance(stop, list):
            raise RequestError(f"sampling.stop: expected a list of strings, got {_kind(stop)}")
        for i, s in enumerate(stop):
            if not isinstance(s, str) or not s:
                raise RequestError(f"sampling.stop[{i}]: expected a non-empty string, got {_kind(s) if not isinstance(s, str) else 'an empty one'}")
        given["stop"] = tuple(stop)
    return SamplingParams(**given)
