"""The rollout-engine contract: prompts in, sampled completions with token log-probs out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from envs.types import Message

if TYPE_CHECKING:
    from envs.episode import Episode


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled.

    Attributes:
        temperature: Softmax temperature; 0 means greedy decoding.
        top_p: Nucleus sampling mass (1.0 = off).
        top_k: Keep the k most likely tokens (0 = off).
        max_new_tokens: Longest completion, in tokens.
        seed: Seed for this call's sampling (None: continue the engine's generator).
        stop: Stop strings: a completion ends as soon as its text contains one of them. The stop
            string stays in the completion (its tokens were sampled and are trained on); see
            `Completion.stop_string`. Multi-turn environments stop a model turn at a tool call's
            end marker this way.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    seed: int | None = None
    stop: tuple[str, ...] = ()

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
        stop_string: The entry of `SamplingParams.stop` that ended generation (None: it ended at
            the end-of-sequence token or at ``max_new_tokens``).
        loss_mask: For a multi-turn episode, one entry per ``token_ids``: 1 for a token the model
            sampled, 0 for an observation token (a tool result) that was appended to the context
            and must not be trained on; its ``logprobs`` entry is 0.0. None: every token is the
            model's (single-turn).
        episode: The episode's turns, tool calls and limits (`envs.episode.Episode`) for a
            multi-turn completion; the verifier judges it (see `verifier_input`). None for
            single-turn completions.
    """

    prompt_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    truncated: bool = False
    char_ends: list[int] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    stop_string: str | None = None
    loss_mask: list[int] | None = None
    episode: Episode | None = None


def verifier_input(completion: Completion) -> str | Episode:
    """What the verifier judges: the episode of a multi-turn completion (whose final answer is read
    from the model's own turns only), else the completion's text."""
    return completion.episode if completion.episode is not None else completion.text


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


class TokenRolloutEngine(RolloutEngine, Protocol):
    """An engine that also continues token sequences: what multi-turn episodes need. The context of
    an episode grows by appending token ids (the model's and the observations'), never by
    re-tokenizing the transcript, so the tokens the trainer scores are the ones that were sampled.

    Attributes:
        tokenizer: The Hugging Face tokenizer of the policy (encodes prompts and observations).
    """

    tokenizer: Any

    def generate_ids(self, prompt_ids: Sequence[list[int]], sampling: SamplingParams) -> list[Completion]:
        """One completion per token-id prompt, in order (``prompt_index`` is the position)."""
        ...
