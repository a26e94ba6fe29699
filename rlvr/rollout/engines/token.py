"""Engines that sample token ids elsewhere (vLLM in process, vLLM behind a server): prompts are
rendered and tokenized on the trainer's side exactly as for the Hugging Face engine, and samples
become `Completion`s here (decoded, cut at the first stop string as the Hugging Face engine cuts
them), so every engine sees the same prompt ids and produces the same `Completion`s."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Sequence

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.text import first_stop, token_char_ends


@dataclass
class Sample:
    """One completion as token ids, before decoding.

    Attributes:
        token_ids: Completion ids, with the end-of-sequence token when one was emitted.
        logprobs: Log-prob of each token under the sampling distribution.
        truncated: Stopped by the length limit, not by an end-of-sequence token or a stop string.
    """

    token_ids: list[int]
    logprobs: list[float]
    truncated: bool


class TokenEngine(RolloutEngine):
    """`RolloutEngine` whose subclasses implement `sample_ids`; they set ``self.tokenizer`` and
    ``self.capabilities``."""

    @abstractmethod
    def sample_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        """``n`` samples for each prompt, one list per prompt; generation ends at a stop string of
        ``sampling.stop`` (its tokens kept) when the engine can tell."""

    def generate_ids(self, prompt_ids: Sequence[list[int]], n: int, sampling: SamplingParams) -> list[Completion]:
        prompt_ids = [list(p) for p in prompt_ids]
        out = []
        for i, (ids, samples) in enumerate(zip(prompt_ids, self.sample_ids(prompt_ids, n, sampling))):
            for s in samples:
                out.append(self._completion(i, ids, s, sampling.stop))
        return out

    def _completion(self, index: int, prompt_ids: list[int], sample: Sample, stops: Sequence[str]) -> Completion:
        tokens, logprobs, truncated, stop_string = sample.token_ids, sample.logprobs, sample.truncated, None
        hit = first_stop(self.tokenizer, tokens, stops)
        if hit is not None:  # the engine's own stop check may end a token later, or not at all
            end, stop_string = hit
            tokens, logprobs, truncated = tokens[:end], logprobs[:end], False
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Completion(prompt_index=index, prompt_ids=list(prompt_ids), token_ids=list(tokens), logprobs=list(logprobs), text=text,
                          truncated=truncated, char_ends=token_char_ends(self.tokenizer, tokens, len(text)), stop_string=stop_string)
