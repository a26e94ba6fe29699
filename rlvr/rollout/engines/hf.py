"""Rollouts with a Hugging Face model: the embedded default, on CPU or GPU.

The engine shares the trainer's model object, so there is nothing to sync after an optimizer
step. Its decoder (``rollout.hf.decode``, `rlvr.rollout.decoding`) is rlvr's own loop for the
device (chosen by measurement with ``auto``) or Hugging Face ``generate``; every decoder returns the
log-probs of the distribution the tokens were actually drawn from (tempered, top-k/top-p truncated,
as vLLM's ``processed_logprobs``).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Sequence

import torch
import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.models.batch import trainer_logprobs
from rlvr.rollout.base import Completion, EngineCapabilities, RolloutEngine, SamplingParams
from rlvr.rollout.decoding import AUTO, DECODERS, Decoded, DecodeRequest, Decoder, DecoderChoice, StopStrings, choose_decoder, probe_decoder
from rlvr.rollout.decoding.generate import GenerateDecoder
from rlvr.rollout.text import end_ids, token_char_ends

OWN_DECODERS_PROBED = ("kv", "static", "cuda_graph", "compiled", "continuous")
"""Decoders that drive the model through internals (or a newer API) and pass a probe before use;
``generate`` is the reference they fall back to."""


class HFGenerateEngine(RolloutEngine):
    """`RolloutEngine` over a Hugging Face model and one of the registered decoders.

    Args:
        model: The policy (shared with the trainer).
        tokenizer: Its tokenizer; prompts are left-padded for generation.
        max_batch_sequences: Sequences per decoder call (bounds memory).
        synced: The model is sharded across processes (FSDP): every forward is a collective, so
            each process keeps stepping until all of them have finished (``generate`` with
            ``synced_gpus``, whatever ``decode`` says).
        private: Generate with a copy of the weights instead of the trainer's own model object, so
            that generation can run while the trainer updates (`load_weights` copies them in).
        decode: A registered decoder (`rlvr.rollout.decoding`: kv, static, cuda_graph, compiled,
            generate, continuous) or ``auto``: the fastest of the device's candidates, measured at
            the first generation on its prompts (`rlvr.rollout.decoding.choice`; `choice` says what
            was measured). A decoder other than ``generate`` first passes a probe on the model
            (`rlvr.rollout.decoding.probe.probe_decoder`); one that fails it gives one warning and
            ``generate`` runs instead.
        sync_every: Tokens between the host's looks at a batch in the static decoders.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_batch_sequences: int = 256, synced: bool = False,
                 private: bool = False, decode: str = AUTO, sync_every: int = 8):
        if decode != AUTO and decode not in DECODERS:
            raise ValueError(f"decode must be {AUTO} or one of {', '.join(DECODERS.ids())}, got {decode!r}")
        self.decode = decode
        self.sync_every = sync_every
        self.private = private
        self.capabilities = EngineCapabilities(own_weights=private, takes_adapters=True)
        self.model = copy.deepcopy(model).requires_grad_(False) if private else model
        self.tokenizer = tokenizer
        self.max_batch_sequences = max_batch_sequences
        self.synced = synced
        self.choice: DecoderChoice | None = None  # what decode=auto measured and chose (at the first generation)
        self._chosen_on_greedy = False  # the choice was timed on a greedy call (an evaluation): made again at the first sampled one
        self._decoders: dict[str, Decoder] = {}
        self._probed: dict[str, str | None] = {}  # decoder -> None (passed) or why it failed its probe
        if tokenizer.pad_token_id is None:  # many causal LMs ship without one
            tokenizer.pad_token = tokenizer.eos_token
        self.end_ids = end_ids(tokenizer, getattr(model, "generation_config", None))  # eos and the chat template's end of turn

    @property
    def context_length(self) -> int | None:
        """Longest sequence (prompt + completion) the model was built for, from its config."""
        config = getattr(self.model, "config", None)
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, key, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    @property
    def setup_s(self) -> float:
        """Seconds spent inside generate calls on one-time set-up (measuring decoders for ``auto``),
        which a report of generation speed leaves out."""
        return self.choice.seconds if self.choice is not None else 0.0

    @property
    def decoder_name(self) -> str | None:
        """The decoder in use (None before the first generation under ``auto``)."""
        if self.synced:
            return "generate"
        name = self.choice.name if self.decode == AUTO and self.choice else None if self.decode == AUTO else self.decode
        return "generate" if name is not None and self._probed.get(name) else name

    def restore_choice(self, saved: dict) -> None:
        """Decode with the decoder a run measured and chose before it was checkpointed (``auto``), so
        that a resumed run samples as the uninterrupted one would (it is probed again before use). A
        choice made on another device type (a GPU run resumed on a CPU) says nothing about this one: the
        decoder is chosen afresh. ValueError, in one line, for a damaged one (`DecoderChoice.from_dict`)."""
        if self.decode == AUTO and self.choice is None:
            choice = DecoderChoice.from_dict(saved)
            if choice.device == next(self.model.parameters()).device.type:
                self.choice = dataclasses.replace(choice, restored=True)

    def describe(self) -> dict:
        """The device (`rlvr.models.device.describe_device`), the weights' dtype, the attention
        kernel and the decoder (with what ``auto`` measured)."""
        from rlvr.models.attention import attention_kernel
        from rlvr.models.device import describe_device

        first = next(self.model.parameters())
        return {"engine": "hf", **describe_device(first.device), "dtype": str(first.dtype).removeprefix("torch."),
                "attention": attention_kernel(self.model), "decoder": self.decoder_name,
                **({"decoder_choice": self.choice.as_dict()} if self.choice is not None else {})}

    def load_weights(self, model: object) -> None:
        """A private copy takes ``model``'s weights (an ``nn.Module`` or a state dict), in place (a
        captured decoding step keeps reading them where they are); otherwise nothing to do: the
        engine generates with the trainer's own model object."""
        if self.private:
            state = model.state_dict() if isinstance(model, torch.nn.Module) else model
            with torch.no_grad():
                self.model.load_state_dict(state)

    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        return trainer_logprobs(self.model, prompt_ids, completion_ids, self.tokenizer.pad_token_id)

    def generate_ids(self, prompt_ids: Sequence[list[int]], n: int, sampling: SamplingParams) -> list[Completion]:
        return self._generate([(i, list(ids)) for i, ids in enumerate(prompt_ids) for _ in range(n)], sampling)

    def _generate(self, jobs: list[tuple[int, list[int]]], sampling: SamplingParams) -> list[Completion]:
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        was_training = self.model.training
        self.model.eval()
        # a sharded model's gathered weights are reused by training, so they must not become inference tensors
        with torch.no_grad() if self.synced else torch.inference_mode():
            return self._generate_jobs(jobs, sampling, was_training)

    def _generate_jobs(self, jobs: list[tuple[int, list[int]]], sampling: SamplingParams, was_training: bool) -> list[Completion]:
        try:
            out: list[Completion] = []
            for start in range(0, len(jobs), self.max_batch_sequences):
                out += self._generate_chunk(jobs[start: start + self.max_batch_sequences], sampling)
            return out
        finally:
            self.model.train(was_training)

    def _request(self, jobs: list[tuple[int, list[int]]], sampling: SamplingParams) -> DecodeRequest:
        stops = StopStrings(self.tokenizer, sampling.stop) if sampling.stop else None
        return DecodeRequest([ids for _, ids in jobs], sampling.max_new_tokens, tuple(self.end_ids), self.tokenizer.pad_token_id,
                             sampling.temperature, sampling.top_p, sampling.top_k, sampling.greedy, stops)

    def _generate_chunk(self, jobs: list[tuple[int, list[int]]], sampling: SamplingParams) -> list[Completion]:
        request = self._request(jobs, sampling)
        out = self._decoder(request).decode(self.model, request)
        ends = {row: (int(out.lengths[row]), out.stop_strings.get(row), bool(out.ended[row])) for row in range(len(jobs))}
        return self._completions(jobs, out, ends)

    def decoder(self, name: str) -> Decoder:
        """This engine's instance of decoder ``name`` (decoders keep state between calls)."""
        if name not in self._decoders:
            if name == "generate":
                self._decoders[name] = GenerateDecoder(synced=self.synced)
            elif name in ("static", "cuda_graph", "compiled"):
                self._decoders[name] = DECODERS.get(name)(sync_every=self.sync_every)
            else:
                self._decoders[name] = DECODERS.get(name)()
        return self._decoders[name]

    def _decoder(self, request: DecodeRequest) -> Decoder:
        """The decoder for this call: ``generate`` for a sharded model; under ``auto`` the one chosen
        at the first call; a named one after its probe passed (else ``generate``, with one warning)."""
        if self.synced:
            return self.decoder("generate")
        name = self.decode
        if name == AUTO:
            # a choice timed on a greedy call (a run's evaluation before its first step) is timed again at the first sampled
            # call, on the shapes the run trains with: whether and how a run evaluates must not change what it samples with
            if self.choice is None or (self._chosen_on_greedy and not request.greedy):
                self.choice = choose_decoder(self.decoder, self.model, request)
                self._chosen_on_greedy = request.greedy and self.choice.timed
                self._probed.update({n: None for n in self.choice.usable} | dict(self.choice.rejected))
            name = self.choice.name
        if name in OWN_DECODERS_PROBED and name not in self._probed:
            problem = probe_decoder(self.decoder(name), self.model)
            self._probed[name] = problem
            if problem is not None and self.decoder(name).unsupported(self.model) is not None:  # where it runs, not a bug
                warnings.warn(f"rollout.hf.decode={name} cannot run here ({problem}); generating with Hugging Face generate instead "
                              "(slower, same distribution): name a decoder that runs here, or rollout.hf.decode=auto to have one "
                              "chosen", RuntimeWarning, stacklevel=4)
            elif problem is not None:
                warnings.warn(f"rollout.hf.decode={name}: this decoder does not work with transformers {transformers.__version__} "
                              f"on {type(self.model).__name__} here ({problem}); generating with Hugging Face generate instead "
                              "(slower, same distribution). Please report it.", RuntimeWarning, stacklevel=4)
        if self._probed.get(name):
            name = "generate"
        return self.decoder(name)

    def _completions(self, jobs: list[tuple[int, list[int]]], out: Decoded, ends: dict[int, tuple[int, str | None, bool]]) -> list[Completion]:
        """One `Completion` per job from the decoder's tokens/log-probs ``[B, steps]`` and, per row,
        its (length, stop string or None, whether it ended before running out of tokens)."""
        tok = self.tokenizer
        rows = out.tokens.tolist()
        token_ids = [rows[row][: ends[row][0]] for row in range(len(jobs))]
        texts = tok.batch_decode(token_ids, skip_special_tokens=True)
        completions = []
        for row, (prompt_index, prompt_ids) in enumerate(jobs):
            n_tok, stop_string, ended = ends[row]
            ids, text = token_ids[row], texts[row]
            completions.append(Completion(
                prompt_index=prompt_index,
                prompt_ids=list(prompt_ids),
                token_ids=ids,
                logprobs=out.logprobs[row, :n_tok].tolist(),
                text=text,
                truncated=not ended,
                char_ends=token_char_ends(tok, ids, len(text)),
                stop_string=stop_string,
            ))
        return completions


__all__ = ["HFGenerateEngine", "StopStrings"]
