"""rlvr's sampling loop for Hugging Face causal LMs (``rollout.hf.decode=kv``).

Profiled on the embedded model, ``generate`` spent about 40% of each step growing its key/value
cache (every step concatenates the whole cache of every layer) and kept computing sequences that had
already ended. This loop calls the same model forward, but:

- each distinct prompt is prefilled once and its cache copied to its samples;
- keys and values are written into preallocated buffers (doubling when full), and attention reads
  a view of them;
- finished sequences leave the batch once a quarter of it has finished;
- it runs in the weights' own precision, outside the mixed-precision autocast a training run puts
  around the model's forward (`full_precision`): decoding's small matrix products lose more to
  the casts than they gain (measured on the embedded model: 10% slower under bf16 on a CPU).

Tokens are drawn from the tempered, top-k/top-p truncated distribution of
`rlvr.algos.correction.truncation_keep`, and the log-prob returned for each is the log-prob under
that very distribution (what `token_logprobs` computes for the same settings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import inspect
from typing import Callable, Sequence

import torch
from torch import Tensor

from envs import faults
from rlvr.algos.correction import truncation_keep
from rlvr.models.attention import model_mask, takes_custom_mask

COMPACT_AT = 0.25  # share of the active rows finished before they are dropped: copying the cache is not free


class KVBuffers:
    """A key/value cache in preallocated buffers, duck-typed as a transformers ``Cache``: the model
    calls ``update`` once per layer per forward and attends over the view it returns.

    ``length`` columns are filled; the caller advances it after each forward. Buffers start with
    room for ``GROW_BY`` generated tokens beyond the prompt and double when full (up to
    ``capacity``), so a batch whose rows all stop early never holds a cache sized for the longest
    completion allowed.
    """

    GROW_BY = 64

    def __init__(self, layers: int, capacity: int):
        self.keys: list[Tensor | None] = [None] * layers
        self.values: list[Tensor | None] = [None] * layers
        self.capacity = capacity
        self.length = 0

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        # transformers passes extra arguments that differ by release (``cache_kwargs`` up to 5.23,
        # ``kwargs=`` from 5.24); the buffers need none of them
        end = self.length + key.shape[2]
        if self.keys[layer_idx] is None:  # [B, heads, columns, head_dim]
            columns = min(self.capacity, end + self.GROW_BY)
            self.keys[layer_idx] = key.new_empty((key.shape[0], key.shape[1], columns, key.shape[3]))
            self.values[layer_idx] = value.new_empty((value.shape[0], value.shape[1], columns, value.shape[3]))
        elif end > self.keys[layer_idx].shape[2]:
            columns = min(self.capacity, max(end, 2 * self.keys[layer_idx].shape[2]))
            self.keys[layer_idx] = self._copy(self.keys[layer_idx], None, columns)
            self.values[layer_idx] = self._copy(self.values[layer_idx], None, columns)
        self.keys[layer_idx][:, :, self.length: end] = key
        self.values[layer_idx][:, :, self.length: end] = value
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def select(self, rows: Tensor) -> None:
        """Keep (or repeat) the batch rows ``rows``, in that order (copying only the filled columns)."""
        self.keys = [None if k is None else self._copy(k, rows, k.shape[2]) for k in self.keys]
        self.values = [None if v is None else self._copy(v, rows, v.shape[2]) for v in self.values]

    def _copy(self, buffer: Tensor, rows: Tensor | None, columns: int) -> Tensor:
        filled = buffer[:, :, : self.length]
        if rows is not None:
            filled = filled.index_select(0, rows)
        out = buffer.new_empty((filled.shape[0], buffer.shape[1], columns, buffer.shape[3]))
        out[:, :, : self.length] = filled
        return out


@dataclass
class Decoded:
    """What `decode` produced, per job.

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


def sample_next(logits: Tensor, temperature: float, top_p: float, top_k: int, greedy: bool) -> tuple[Tensor, Tensor]:
    """One token per row from raw ``logits`` ``[B, V]`` and its log-prob under the distribution it
    was drawn from: greedy takes the argmax (log-prob at temperature 1), sampling tempers,
    truncates (`truncation_keep`) and draws. Returns ``([B], [B])``."""
    logits = logits.float()
    if greedy:
        token = logits.argmax(-1)
        return token, torch.log_softmax(logits, -1).gather(-1, token.unsqueeze(-1)).squeeze(-1)
    if temperature not in (0, 1):
        logits = logits / temperature
    keep = truncation_keep(logits, top_p, top_k)
    if keep is not None:
        logits = logits.masked_fill(~keep, -math.inf)
    logp = torch.log_softmax(logits, -1)
    # Gumbel-max: argmax(log p + G), G = -log(-log U), is an exact draw from p (3x cheaper here than
    # torch.multinomial); U is kept off 0 so that no token's noise is -inf
    uniform = torch.rand_like(logp).clamp_(min=torch.finfo(logp.dtype).tiny)
    token = (logp - uniform.log_().neg_().log_()).argmax(-1)
    return token, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)


@torch.inference_mode()
def decode(model: torch.nn.Module, prompts: Sequence[list[int]], *, max_new_tokens: int, eos_id: int | Sequence[int] | None, pad_id: int,
           temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, greedy: bool = False,
           stop_check: Callable[[list[int], Tensor], dict[int, str]] | None = None) -> Decoded:
    """Sample one completion for each of ``prompts`` (token ids; the same prompt may repeat).
    A row ends at ``eos_id`` (one id, or several: a chat model's end of turn as well as its eos).

    ``stop_check(rows, step_tokens)`` — optional, called after each step with the original row
    indices still running and their tokens so far ``[n, steps]`` — returns ``{row: stop string}``
    for rows that just completed a stop string.
    """
    device = next(model.parameters()).device
    forward = full_precision(model)
    ends = None if eos_id is None else torch.tensor([eos_id] if isinstance(eos_id, int) else list(eos_id), dtype=torch.long, device=device)
    B = len(prompts)
    distinct: dict[tuple[int, ...], int] = {}
    first_of = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts], device=device)
    unique = list(distinct)
    width = max(len(p) for p in unique)
    prompt_len = torch.tensor([len(p) for p in prompts], device=device)

    ids = torch.full((len(unique), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(unique), width), dtype=torch.bool)
    for u, p in enumerate(unique):  # left-padded: every prompt's last token in the same column
        ids[u, width - len(p):] = torch.tensor(p, dtype=torch.long)
        real[u, width - len(p):] = True
    ids, real = ids.to(device), real.to(device)

    cache = KVBuffers(model.config.num_hidden_layers, width + max_new_tokens)
    eye = torch.eye(width, dtype=torch.bool, device=device)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    prefill_mask = (causal & real.unsqueeze(1)) | eye  # left padding attends to itself only
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    cache_arg = cache_keyword(model)
    out = forward(input_ids=ids, attention_mask=model_mask(model, prefill_mask.unsqueeze(1)), position_ids=positions, **{cache_arg: cache},
                  use_cache=True, logits_to_keep=1)
    cache.length = width
    logits = out.logits[:, -1].index_select(0, first_of)  # [B, V]
    cache.select(first_of)
    key_ok = torch.zeros((B, width + max_new_tokens), dtype=torch.bool, device=device)
    key_ok[:, :width] = real.index_select(0, first_of)

    tokens = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((B, max_new_tokens), device=device)
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    ended = torch.zeros(B, dtype=torch.bool, device=device)
    stop_strings: dict[int, str] = {}
    active = torch.arange(B, device=device)  # original rows still in the batch
    done = torch.zeros(B, dtype=torch.bool, device=device)  # per active row

    steps = 0
    for t in range(max_new_tokens):
        faults.reached("generate")
        token, logp = sample_next(logits, temperature, top_p, top_k, greedy)
        tokens[active, t] = token
        logprobs[active, t] = logp
        steps = t + 1
        finished = ~done & torch.isin(token, ends) if ends is not None else torch.zeros_like(done)
        if stop_check is not None:
            running = active[~done & ~finished]
            for row, stop in stop_check(running.tolist(), tokens[running, :steps]).items():
                stop_strings[row] = stop
                finished |= active == row
        if finished.any():
            lengths[active[finished]] = steps
            ended[active[finished]] = True
            done |= finished
        if bool(done.all()) or steps == max_new_tokens:
            break
        if float(done.float().mean()) >= COMPACT_AT:  # drop the finished rows from the batch
            keep = torch.nonzero(~done).squeeze(1)
            active, key_ok, token = active[keep], key_ok[keep], token[keep]
            cache.select(keep)
            done = done[keep]
        column = width + t
        key_ok[:, column] = True
        out = forward(input_ids=token.unsqueeze(1), attention_mask=model_mask(model, key_ok[:, None, None, : column + 1]),
                      position_ids=(prompt_len[active] + t).unsqueeze(1), **{cache_arg: cache}, use_cache=True)
        cache.length = column + 1
        logits = out.logits[:, -1]
    return Decoded(tokens[:, :steps].cpu(), logprobs[:, :steps].cpu(), lengths.clamp(max=steps).cpu(), ended.cpu(), stop_strings)


def full_precision(model: torch.nn.Module) -> Callable:
    """``model``'s forward without the autocast that mixed precision wraps around it (accelerate's
    ``prepare`` and `rlvr.train.harness.Harness.autocast_forward` keep the original as
    ``_original_forward``)."""
    return getattr(model, "_original_forward", model)


def cache_keyword(model: torch.nn.Module) -> str:
    """The name under which ``model``'s forward takes a cache: ``cache`` from transformers 5.24
    (``past_key_values`` still accepted there, with a deprecation warning), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def supports_kv_decode(model: torch.nn.Module) -> bool:
    """Hugging Face decoder models on the sdpa or eager attention whose forward takes explicit
    positions and ``logits_to_keep`` accept the 4-D mask and duck-typed cache this loop relies on."""
    if not takes_custom_mask(model) or not hasattr(getattr(model, "config", None), "num_hidden_layers"):
        return False
    params = inspect.signature(model.forward).parameters
    return "position_ids" in params and "logits_to_keep" in params


PROBE_TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6}  # largest log-prob gap; half precisions: HALF_TOLERANCE
HALF_TOLERANCE = 0.1


def probe_kv_decode(model: torch.nn.Module) -> str | None:
    """Check, on ``model`` itself, that the installed transformers drives the loop's cache as the
    loop expects: greedy-decode three tokens after two left-padded prompts of different lengths and
    compare each token's log-prob with a plain forward over the whole sequence (no cache, no custom
    mask). Returns None when they agree, else what went wrong (an exception, or the gap).

    A release of transformers that changes how a model calls its cache (5.24 renamed the argument
    and passed ``kwargs=`` to ``update``) then degrades to ``generate`` instead of crashing mid-run
    or, worse, sampling from wrong log-probs."""
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    if vocab < 8:
        return f"vocab_size {vocab} is too small to probe"
    prompts = [[(3 + 5 * i) % vocab for i in range(6)], [(7 + 11 * i) % vocab for i in range(3)]]
    was_training = model.training
    model.eval()
    try:
        out = decode(model, prompts, max_new_tokens=3, eos_id=None, pad_id=0, greedy=True)
        with torch.inference_mode():
            device = next(model.parameters()).device
            gaps = []
            for row, prompt in enumerate(prompts):
                seq = torch.tensor([prompt + out.tokens[row].tolist()], device=device)
                logits = full_precision(model)(input_ids=seq).logits[0, len(prompt) - 1: -1].float()
                expected = torch.log_softmax(logits, -1).gather(-1, seq[0, len(prompt):].unsqueeze(-1)).squeeze(-1)
                gaps.append(float((expected.cpu() - out.logprobs[row]).abs().max()))
    except Exception as e:  # noqa: BLE001 - any failure means: do not use the loop
        return f"{type(e).__name__}: {e}"
    finally:
        model.train(was_training)
    dtype = next(model.parameters()).dtype
    tolerance = PROBE_TOLERANCE.get(dtype, HALF_TOLERANCE)
    gap = max(gaps)
    return None if gap <= tolerance else f"its log-probs differ from a plain forward's by {gap:.3g} (tolerance {tolerance:g})"
