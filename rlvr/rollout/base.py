"""The rollout-engine contract: prompts in, sampled completions with token log-probs out."""

from __future__ import annotations

from dataclasses import dataclass, field
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Sequence

from envs.types import CutText, Message

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
        prompt_text: The prompt as the model saw it (after the chat template), when the engine
            rendered it from text or messages ("" for a call with token ids only).
        versions: Asynchronous runs (``rollout.async``): for each entry of ``token_ids`` the policy
            version (training steps) whose weights sampled it; a partial rollout continued after a
            weight push mixes versions. None: the whole batch came from one version (synchronous).
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
    prompt_text: str = ""
    versions: list[int] | None = None


def verifier_input(completion: Completion) -> str | Episode:
    """What the verifier judges: the episode of a multi-turn completion (whose final answer is read
    from the model's own turns only), else the completion's text, as `envs.types.CutText` when
    generation cut it at its token budget (so a verifier can tell an unfinished response)."""
    if completion.episode is not None:
        return completion.episode
    return CutText(completion.text) if completion.truncated else completion.text


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine can do, declared by the engine (callers read these, never probe for methods).

    Attributes:
        own_weights: Generates from its own copy of the weights: the trainer pushes them with
            `RolloutEngine.load_weights` after each update and `rlvr.rollout.sync.SyncProbe` proves
            they arrived. False: it generates with the trainer's model object itself.
        can_sleep: `RolloutEngine.sleep` frees the engine's memory between generations (else a no-op).
        multi_turn: Continues token sequences (`RolloutEngine.generate_ids` on a transcript's ids),
            which multi-turn episodes need.
        stop_strings: Honours `SamplingParams.stop`.
        takes_adapters: `RolloutEngine.load_weights` takes a LoRA policy as it is (the engine's copy
            carries the same adapters); else the trainer sends the adapters merged into plain
            weights (`rlvr.models.lora.MergedWeights`).
        seeds_every_call: The engine keeps no generator a run can rely on (its requests may go to
            any of several servers), so the trainer seeds every generate call from (seed, batch,
            the call's problems) and the samples do not depend on which server drew them.
        shared: One copy of the weights serves every training process (rollout servers): with
            several processes rank 0 alone pushes each update (`RolloutEngine.load_weights`) and
            runs the sync probe, and the other ranks take its account of the push
            (`RolloutEngine.pushed` / `RolloutEngine.follow`) before they generate.
    """

    own_weights: bool
    can_sleep: bool = False
    multi_turn: bool = True
    stop_strings: bool = True
    takes_adapters: bool = False
    seeds_every_call: bool = False
    shared: bool = False


class EngineError(RuntimeError):
    """The rollout engine failed (e.g. its server died); the message names the engine. The run
    stops with this message and keeps its checkpoints."""


class EngineCapabilityError(EngineError):
    """An engine was asked for something its `EngineCapabilities` say it cannot do."""


class RolloutEngine(ABC):
    """Generates completions from the current policy: the one contract every engine implements.

    A subclass sets ``tokenizer`` (prompts are rendered and tokenized on the trainer's side, so every
    engine sees the same prompt ids) and ``capabilities``, and implements `generate_ids` and `score`;
    an engine with its own weights also implements `load_weights`, one that can sleep `sleep`/`wake`.
    Engines are registered by name in `rlvr.rollout.engines.ENGINES` (``rollout.engine``).

    Attributes:
        tokenizer: The policy's Hugging Face tokenizer.
        capabilities: `EngineCapabilities`.
    """

    tokenizer: Any
    capabilities: EngineCapabilities

    @abstractmethod
    def generate_ids(self, prompt_ids: Sequence[list[int]], n: int, sampling: SamplingParams) -> list[Completion]:
        """``n`` completions per token-id prompt, grouped (prompt 0's n first, then prompt 1's...);
        ``prompt_index`` is the prompt's position. Multi-turn episodes call this with the ids of the
        transcript so far, so the context grows by appending ids, never by re-tokenizing."""

    @abstractmethod
    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        """Log-probs (temperature 1, no truncation) of given completion tokens after their prompts,
        with the engine's current weights: what `rlvr.rollout.sync.SyncProbe` compares with the trainer's."""

    def generate(self, prompts: Sequence[str | list[Message]], n: int, sampling: SamplingParams) -> list[Completion]:
        """``n`` completions per prompt (text, or chat messages rendered by the chat template), grouped as `generate_ids`."""
        from rlvr.rollout.text import render_prompt

        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        completions = self.generate_ids([self.tokenizer(t)["input_ids"] for t in texts], n, sampling)
        for c in completions:
            c.prompt_text = texts[c.prompt_index]
        return completions

    def load_weights(self, model: Any) -> None:
        """Take the trainer's current weights (a module, a state dict or ``(name, tensor)`` pairs).
        Nothing to do for an engine that generates with the trainer's own model object."""
        if self.capabilities.own_weights:
            raise NotImplementedError(f"{type(self).__name__} declares its own weights but does not implement load_weights")

    def pushed(self) -> Any:
        """A ``capabilities.shared`` engine's account of the weights it last pushed (picklable; what
        `follow` takes on the processes that did not push)."""
        raise NotImplementedError(f"{type(self).__name__} does not share its weights between processes")

    def follow(self, account: Any) -> None:
        """Take another process's push (`pushed`) as this engine's own, without sending anything."""
        raise NotImplementedError(f"{type(self).__name__} does not share its weights between processes")

    def score_each(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> dict[str, list[list[float]]]:
        """`score` on every copy of the weights the engine generates with, by where it lives (one
        entry, ``""``, for an engine with one copy; one per server for several servers): the sync
        probe proves each."""
        return {"": self.score(prompt_ids, completion_ids)}

    def metrics(self) -> dict[str, float]:
        """The engine's own numbers for the step's log (e.g. ``rollout/servers_alive``); none by default."""
        return {}

    def sleep(self) -> None:
        """Free the engine's memory until `wake` (a no-op unless ``capabilities.can_sleep``)."""

    def wake(self) -> None:
        """Take the memory back (and the weights last pushed); a no-op for an engine that never sleeps."""

    @property
    def asleep(self) -> bool:
        return False

    def close(self) -> None:
        """Release what the engine holds (threads, connections); the engine is not used afterwards."""

    @property
    def context_length(self) -> int | None:
        """Longest prompt + completion the engine accepts, when it knows (None: unknown)."""
        return None

    def describe(self) -> dict[str, Any]:
        """Where and how the engine generates, for reports (device, precision, decoder...)."""
        return {"engine": type(self).__name__}

    def require(self, capability: str, purpose: str) -> None:
        """Raise `EngineCapabilityError` unless ``capabilities.<capability>`` holds."""
        if not getattr(self.capabilities, capability):
            raise EngineCapabilityError(f"rollout engine {type(self).__name__} cannot {purpose}: it declares {capability}=False")

