"""The rollout-engine contract: prompts in, sampled completions with token log-probs out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from envs.types import Message


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled.

    Attributes:
        temperature: Softmax temperature; 0 means greedy decoding.
        top_p: Nucleus sampling mass (1.0 = off).
        top_k: Keep the k most likely tokens (0 = off).
        max_new_tokens: Longest completion, in tokens.
        seed: Seed for this call's sampling (None: continue the engine's generator).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Completion:
    """One sampled completion.

    Attributes:
        prompt_index: Which prompt of the call it answers.
        prompt_ids: The prompt's token ids (no padding).
        token_ids: The completion's token ids, including the end-of-sequence token if one was emitted.
        logprobs: Per-token log-probabilities under the sampling distribution (temperature-scaled
            logits), one per entry of ``token_ids``; the trainer compares them with its own.
        text: The decoded completion (special tokens removed).
        truncated: True when generation hit ``max_new_tokens`` without an end-of-sequence token.
        char_ends: For each token, the length of ``text`` once that token is decoded (maps the
            character spans of process rewards onto tokens); empty if the engine cannot tell.
    """

    prompt_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    truncated: bool = False
    char_ends: list[int] = field(default_factory=list)
    info: dict = field(default_factory=dict)


class RolloutEngine(Protocol):
    """Generates completions from the current policy.

    An engine that keeps its own copy of the weights (vLLM) receives the trainer's weights with
    `load_weights` after each optimizer step; one that shares the trainer's model object (Hugging
    Face generate) does nothing there.
    """

    def generate(self, prompts: Sequence[str | list[Message]], n: int, sampling: SamplingParams) -> list[Completion]:
        """``n`` completions per prompt, grouped: prompt 0's n completions first, then prompt 1's..."""
        ...

    def load_weights(self, model: object) -> None:
        ...

    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        """Log-probs (temperature 1) of given completion tokens after their prompts, with the engine's
        current weights: what `rlvr.rollout.sync.SyncProbe` compares with the trainer's."""
        ...
