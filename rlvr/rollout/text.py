"""Text on the trainer's side of every engine: prompts rendered and tokenized, completions'
character offsets, and where a stop string ends a completion. Every engine goes through these, so
they all see the same prompt ids and cut completions at the same token."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Sequence

from transformers import PreTrainedTokenizerBase

from envs.types import Message


def render_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str | list[Message]) -> str:
    """Plain text as is; chat messages through the tokenizer's chat template."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str | list[Message]) -> list[int]:
    """The token ids a prompt is generated from (chat messages through the chat template)."""
    return tokenizer(render_prompt(tokenizer, prompt))["input_ids"]


@dataclass(frozen=True)
class ObservationWrap:
    """How an observation enters a chat transcript after a model turn that stopped at a tool call:
    ``before`` (the template's end of the model's turn and the header of a ``role`` message), the
    observation, ``after`` (the end of that message and the header of the model's next turn)."""

    role: str
    before: str
    after: str

    def text(self, observation: str) -> str:
        return f"{self.before}{observation}{self.after}"


_SPLIT = ("RLVRMODELTURNEND", "RLVROBSERVATION")  # plain words: every template copies message content as is


def observation_wrap(tokenizer: PreTrainedTokenizerBase, role: str) -> ObservationWrap:
    """The chat template's rendering of an observation as a ``role`` message between two model
    turns, read off the template by rendering markers in the content. A template that refuses the
    role (some allow only user and assistant) gets a ``user`` message instead."""
    errors = []
    for r in dict.fromkeys((role, "user")):
        messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _SPLIT[0]}, {"role": r, "content": _SPLIT[1]}]
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as e:  # jinja raises on a role the template does not know
            errors.append(f"{r}: {e}")
            continue
        head, _, tail = text.partition(_SPLIT[0])
        before, found, after = tail.partition(_SPLIT[1])
        if head and found:
            return ObservationWrap(r, before, after)
        errors.append(f"{r}: the template does not show message contents as they are")
    raise ValueError(f"the chat template cannot show an observation between model turns ({'; '.join(errors)})")


_PIECE_LENGTHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {token id: length decoded alone}


def token_char_ends(tokenizer: PreTrainedTokenizerBase, ids: list[int], text_len: int) -> list[int]:
    """Character offset in the decoded text at which each token ends.

    Adds up the length of each token decoded on its own (linear time; each id is decoded once per
    tokenizer and cached); exact for tokenizers whose tokens decode independently (ASCII text with
    byte-level or SentencePiece vocabularies), clamped to the text otherwise.
    """
    lengths = _PIECE_LENGTHS.setdefault(tokenizer, {})
    missing = list({i for i in ids if i not in lengths})
    if missing:
        lengths.update(zip(missing, map(len, tokenizer.batch_decode([[i] for i in missing], skip_special_tokens=True))))
    ends, pos = [], 0
    for i in ids:
        pos = min(pos + lengths[i], text_len)
        ends.append(pos)
    return ends


END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
"""Special tokens that end an assistant turn in the chat templates of common model families
(ChatML: Qwen, SmolLM; Llama 3; Phi-3; Gemma)."""


def end_ids(tokenizer: PreTrainedTokenizerBase, generation_config: object = None) -> list[int]:
    """The token ids that end a completion: the tokenizer's eos, the model's generation config's
    ``eos_token_id`` (one id or a list), and the end-of-turn token its chat template writes after
    each turn. A chat model whose eos differs from its end of turn (Qwen: ``<|endoftext|>`` and
    ``<|im_end|>``) then stops at the end of its turn, as its own ``generate`` would."""
    ids: list[int] = []
    configured = getattr(generation_config, "eos_token_id", None)
    for value in (tokenizer.eos_token_id, *(configured if isinstance(configured, (list, tuple)) else [configured])):
        if isinstance(value, int) and value not in ids:
            ids.append(value)
    template = getattr(tokenizer, "chat_template", None) or ""
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in template and token in vocab and vocab[token] not in ids:
            ids.append(vocab[token])
    return ids


def stop_window(stops: Sequence[str]) -> int:
    """Tokens decoded to look for a stop string ending at the newest token (a token decodes to at
    least one character, and a few more cover tokens that decode to nothing alone)."""
    return max(len(s) for s in stops) + 4


def first_stop(tokenizer: PreTrainedTokenizerBase, token_ids: Sequence[int], stops: Sequence[str]) -> tuple[int, str] | None:
    """``(tokens up to and including the one that completes it, stop string)`` for the first stop
    string in a completion, found as `rlvr.rollout.decoding.stops.StopStrings` finds it while generating (the
    newest ``stop_window`` tokens decoded after each token); None when there is none."""
    if not stops:
        return None
    window = stop_window(stops)
    tails = tokenizer.batch_decode([list(token_ids[max(0, end - window): end]) for end in range(1, len(token_ids) + 1)],
                                   skip_special_tokens=True)
    for end, tail in enumerate(tails, start=1):
        found = next((s for s in stops if s in tail), None)
        if found is not None:
            return end, found
    return None
