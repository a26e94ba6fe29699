"""The decoder contract: token ids in, sampled tokens with their log-probs out.

A decoder turns a `DecodeRequest` (prompts as token ids, how to sample, where rows end) into a
`Decoded` on the model's own device. Decoders differ only in how fast they are where they run; every
one draws each token from the same tempered, top-k/top-p truncated distribution
(`rlvr.rollout.decoding.sampler.sample_next`, or what ``generate`` computes) and reports the log-prob of
the token under that distribution, so the trainer's importance ratios mean the same whichever ran.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
from torch import Tensor

from envs.registry import Registry
from rlvr.rollout.decoding.stops import StopStrings


@dataclass(frozen=True)
class DecodeRequest:
    """One batch of sequences to sample.

    Attributes:
        prompts: Token ids of each row's prompt (the same prompt may repeat: its samples).
        max_new_tokens: Longest completion.
        eos_ids: Token ids that end a row (eos, a chat template's end of turn); may be empty.
        pad_id: Filler id for padding.
        temperature / top_p / top_k / greedy: How tokens are drawn (greedy: argmax).
        stops: Stop strings to end rows on (None: none); a decoder scans with its own
            `StopStrings.fresh` copy, so one request can be decoded again (as ``auto`` does).
    """

    prompts: Sequence[list[int]]
    max_new_tokens: int
    eos_ids: tuple[int, ...]
    pad_id: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    stops: StopStrings | None = None


@dataclass
class Decoded:
    """What a decoder produced, per row, on the CPU.

    Attributes:
        tokens: ``[B, S]`` sampled tokens (``S`` the steps run; after a row ended: filler).
        logprobs: ``[B, S]`` their log-probs under the distribution they were drawn from.
        lengths: ``[B]`` tokens that belong to the completion (through the first eos, or the stop
            string's token).
        ended: ``[B]`` bool, the row ended on eos or a stop string (False: it ran out of tokens).
        stop_strings: ``{row: stop string}`` for rows a stop string ended.
    """

    tokens: Tensor
    logprobs: Tensor
    lengths: Tensor
    ended: Tensor
    stop_strings: dict[int, str]


class Decoder(ABC):
    """One way of sampling from a Hugging Face causal LM. An engine holds one instance per decoder
    (a decoder may keep state between calls, e.g. captured CUDA graphs)."""

    name: ClassVar[str]
    warms_up: ClassVar[bool] = False
    """Its first call of a shape pays a one-time cost (graph capture, compilation) that timing must skip."""
    rlvr_sampler: ClassVar[bool] = False
    """It draws with `rlvr.rollout.decoding.sampler` (counter-based uniforms): every such decoder
    samples the same tokens from the same logits, so choosing among them changes only the speed."""

    def unsupported(self, model: torch.nn.Module) -> str | None:
        """Why this decoder cannot run ``model`` where it is (its device, attention kernel, class),
        or None when it can."""
        return None

    @abstractmethod
    def decode(self, model: torch.nn.Module, request: DecodeRequest) -> Decoded:
        """Sample one completion per row of ``request`` with ``model`` (in eval mode, under
        ``torch.inference_mode`` or ``no_grad``)."""

    def release(self) -> None:
        """Free what the decoder keeps between calls (graphs, buffers)."""


DECODERS: Registry = Registry("decoder", entry_point_group=None, versioned=False)
"""Decoder classes by name (``rollout.hf.decode``)."""


def make_decoder(name: str) -> Decoder:
    """A new instance of the decoder registered as ``name``."""
    return DECODERS.get(name)()


def decoder_names() -> list[str]:
    return DECODERS.ids()
