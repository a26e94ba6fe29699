"""Engines that work on token ids (vLLM in process, vLLM behind a server): prompts are rendered
and tokenized on the trainer's side exactly as Hugging Face generate does, completions decoded
there, so every engine sees the same prompt ids and produces the same `Completion`s."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from transformers import PreTrainedTokenizerBase

from envs.types import Message
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.hf import render_prompt, token_char_ends


@dataclass
class Sample:
    """One completion as token ids, before decoding.

    Attributes:
        token_ids: Completion ids, with the end-of-sequence token when one was emitted.
        logprobs: Log-prob of each token under the sampling distribution.
        truncated: Stopped by the length limit, not by an end-of-sequence token.
    """

    token_ids: list[int]
    logprobs: list[float]
    truncated: bool


class TokenEngine(ABC):
    """`RolloutEngine` on top of `generate_ids`; subclasses set ``self.tokenizer``."""

    tokenizer: PreTrainedTokenizerBase

    @abstractmethod
    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        """``n`` samples for each prompt, one list per prompt."""

    @abstractmethod
    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        """Log-prob (temperature 1, no truncation) of each completion token given its prompt and the
        tokens before it, with the engine's current weights; one list per completion."""

    def encode(self, prompts: Sequence[str | list[Message]]) -> list[list[int]]:
        return [self.tokenizer(render_prompt(self.tokenizer, p)).input_ids for p in prompts]

    def generate(self, prompts: Sequence[str | list[Message]], n: int, sampling: SamplingParams) -> list[Completion]:
        prompt_ids = self.encode(prompts)
        out = []
        for i, (ids, samples) in enumerate(zip(prompt_ids, self.generate_ids(prompt_ids, n, sampling))):
            for s in samples:
                text = self.tokenizer.decode(s.token_ids, skip_special_tokens=True)
                out.append(Completion(prompt_index=i, prompt_ids=list(ids), token_ids=s.token_ids, logprobs=s.logprobs,
                                      text=text, truncated=s.truncated, char_ends=token_char_ends(self.tokenizer, s.token_ids, len(text))))
        return out
