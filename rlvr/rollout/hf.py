"""Rollouts with Hugging Face ``generate``: the embedded default, on CPU or GPU.

The engine shares the trainer's model object, so there is nothing to sync after an optimizer
step. Log-probs come from the logits ``generate`` returns, scaled by the temperature and truncated
by top-k/top-p as the sampler does, so they are the log-probs of the distribution the tokens were
actually drawn from (as vLLM's ``processed_logprobs``).
"""

from __future__ import annotations

import copy
import warnings
from typing import Sequence

import torch
import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteria, StoppingCriteriaList

from rlvr.algos.correction import truncated_logprobs
from rlvr.models.batch import trainer_logprobs
from rlvr.rollout.base import Completion, EngineCapabilities, RolloutEngine, SamplingParams
from rlvr.rollout.kv_decode import decode, probe_kv_decode, supports_kv_decode
from rlvr.rollout.text import end_ids, stop_window, token_char_ends


class HFGenerateEngine(RolloutEngine):
    """`RolloutEngine` over a Hugging Face model: rlvr's decoding loop or ``model.generate``.

    Args:
        model: The policy (shared with the trainer).
        tokenizer: Its tokenizer; prompts are left-padded for generation.
        max_batch_sequences: Sequences per ``generate`` call (bounds memory).
        synced: The model is sharded across processes (FSDP): every forward is a collective, so
            each process keeps stepping until all of them have finished (``synced_gpus``).
        private: Generate with a copy of the weights instead of the trainer's own model object, so
            that generation can run while the trainer updates (`load_weights` copies them in).
        decode: ``kv`` runs rlvr's loop (`rlvr.rollout.kv_decode`: each prompt prefilled once, a
            preallocated cache, finished sequences dropped) where the model supports it and the
            model is not sharded, and the installed transformers passes a one-time probe
            (`rlvr.rollout.kv_decode.probe_kv_decode`; otherwise one warning and ``generate``);
            ``generate`` always calls Hugging Face ``generate``.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_batch_sequences: int = 256, synced: bool = False,
                 private: bool = False, decode: str = "kv"):
        if decode not in ("kv", "generate"):
            raise ValueError(f"decode must be 'kv' or 'generate', got {decode!r}")
        self.decode = decode
        self.private = private
        self.capabilities = EngineCapabilities(own_weights=private, takes_adapters=True)
        self.model = copy.deepcopy(model).requires_grad_(False) if private else model
        self._kv_ok: bool | None = None  # the loop's probe on this model: not run yet
        self.tokenizer = tokenizer
        self.max_batch_sequences = max_batch_sequences
        self.synced = synced
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

    def load_weights(self, model: object) -> None:
        """A private copy takes ``model``'s weights (an ``nn.Module`` or a state dict); otherwise
        nothing to do: the engine generates with the trainer's own model object."""
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

    def _generate_chunk(self, jobs: list[tuple[int, list[int]]], sampling: SamplingParams) -> list[Completion]:
        if self.decode == "kv" and not self.synced and self._kv_usable():
            return self._decode_chunk(jobs, sampling)
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        width = max(len(ids) for _, ids in jobs)
        input_ids = torch.full((len(jobs), width), tok.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(jobs), width), dtype=torch.long)
        for row, (_, ids) in enumerate(jobs):  # left padding: generation appends on the right
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids):] = 1
        kwargs = dict(do_sample=False) if sampling.greedy else dict(
            do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,  # 0 = off
        )
        stops = StopStrings(tok, sampling.stop, width) if sampling.stop else None
        result = self.model.generate(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **kwargs,
            max_new_tokens=sampling.max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=self.end_ids,
            stopping_criteria=StoppingCriteriaList([stops]) if stops else None,
            output_logits=True, return_dict_in_generate=True, synced_gpus=self.synced,
        )
        new_tokens = result.sequences[:, width:]  # [B, steps]
        logits = torch.stack(result.logits, dim=1)  # [B, steps, V], before any processing
        # the distribution each token was drawn from: tempered, then top-k/top-p truncated and renormalised
        t, p, k = (1.0, 1.0, 0) if sampling.greedy else (sampling.temperature, sampling.top_p, sampling.top_k)
        logprobs = truncated_logprobs(logits, new_tokens, t, p, k)

        is_eos = torch.isin(new_tokens, torch.tensor(self.end_ids, device=new_tokens.device))
        has_eos = is_eos.any(dim=1)
        # length includes the first eos; sequences without one run to the last step
        lengths = torch.where(has_eos, is_eos.int().argmax(dim=1) + 1, torch.full_like(has_eos, new_tokens.shape[1], dtype=torch.long))
        ends = {}
        for row in range(len(jobs)):
            n_tok, stop_string = int(lengths[row]), None
            if stops is not None and row in stops.hits and stops.hits[row][0] <= n_tok:
                n_tok, stop_string = stops.hits[row]
            ends[row] = (n_tok, stop_string, bool(has_eos[row]) or stop_string is not None)
        return self._completions(jobs, new_tokens, logprobs, ends)

    def _kv_usable(self) -> bool:
        """Whether rlvr's loop runs this model: it supports the loop, and the first time, the
        installed transformers passes the loop's probe (else one warning naming the version)."""
        if not supports_kv_decode(self.model):
            return False
        if self._kv_ok is None:
            problem = probe_kv_decode(self.model)
            self._kv_ok = problem is None
            if problem is not None:
                warnings.warn(f"rollout.hf.decode=kv: rlvr's decoding loop does not work with transformers {transformers.__version__} "
                              f"on {type(self.model).__name__} ({problem}); generating with Hugging Face generate instead "
                              "(slower, same samples). Please report it.", RuntimeWarning, stacklevel=2)
        return self._kv_ok

    def _decode_chunk(self, jobs: list[tuple[int, list[int]]], sampling: SamplingParams) -> list[Completion]:
        """`_generate_chunk` through rlvr's own loop (`rlvr.rollout.kv_decode.decode`)."""
        tok = self.tokenizer
        stops = StopStrings(tok, sampling.stop, 0) if sampling.stop else None
        out = decode(self.model, [ids for _, ids in jobs], max_new_tokens=sampling.max_new_tokens, eos_id=self.end_ids,
                     pad_id=tok.pad_token_id, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                     greedy=sampling.greedy, stop_check=None if stops is None else lambda rows, generated: stops.scan(rows, generated, generated.shape[1]))
        ends = {row: (int(out.lengths[row]), out.stop_strings.get(row), bool(out.ended[row])) for row in range(len(jobs))}
        return self._completions(jobs, out.tokens, out.logprobs, ends)

    def _completions(self, jobs: list[tuple[int, list[int]]], tokens: torch.Tensor, logprobs: torch.Tensor,
                     ends: dict[int, tuple[int, str | None, bool]]) -> list[Completion]:
        """One `Completion` per job from ``tokens``/``logprobs`` ``[B, steps]`` and, per row, its
        (length, stop string or None, whether it ended before running out of tokens)."""
        tok = self.tokenizer
        rows = tokens.tolist()
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
                logprobs=logprobs[row, :n_tok].tolist(),
                text=text,
                truncated=not ended,
                char_ends=token_char_ends(tok, ids, len(text)),
                stop_string=stop_string,
            ))
        return completions


class StopStrings(StoppingCriteria):
    """Ends each sequence once its generated text contains a stop string, and records where.

    Only the newest tokens are decoded each step (a window long enough to hold any stop string),
    so the cost per step does not grow with the length of the completion. A stop string found in
    the window is new at this step: had it been complete a step earlier, the sequence would have
    stopped then.

    Attributes:
        hits: ``{row: (tokens generated up to and including the stop string, the stop string)}``.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stops: Sequence[str], prompt_width: int):
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.prompt_width = prompt_width
        self.window = stop_window(stops)
        self.hits: dict[int, tuple[int, str]] = {}

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        steps = input_ids.shape[1] - self.prompt_width
        self.scan(range(input_ids.shape[0]), input_ids[:, max(self.prompt_width, input_ids.shape[1] - self.window):], steps)
        return torch.tensor([row in self.hits for row in range(input_ids.shape[0])], dtype=torch.bool, device=input_ids.device)

    def scan(self, rows: Sequence[int], generated: torch.Tensor, steps: int) -> dict[int, str]:
        """Record the ``rows`` whose generated tokens ``generated`` ``[len(rows), steps]`` (or their
        last ``window`` or more) end in a stop string after ``steps`` steps; returns the new hits."""
        tails = self.tokenizer.batch_decode(generated[:, -self.window:].tolist(), skip_special_tokens=True)
        new = {}
        for row, tail in zip(rows, tails):
            if row not in self.hits:
                found = next((s for s in self.stops if s in tail), None)
                if found is not None:
                    self.hits[row] = (steps, found)
                    new[row] = found
        return new
