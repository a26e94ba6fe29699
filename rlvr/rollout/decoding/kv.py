"""rlvr's compacting decoder for Hugging Face causal LMs (``rollout.hf.decode=kv``): fast on a CPU.

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

Its bookkeeping reads the device every token (which rows finished, whether to compact, stop
strings) and compaction copies every layer's cache: cheap on a CPU, a stall on a GPU, where
`rlvr.rollout.decoding.static` is the decoder to use.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from envs import faults
from rlvr.models.attention import model_mask
from rlvr.rollout.decoding.base import DECODERS, Decoded, DecodeRequest, Decoder
from rlvr.rollout.decoding.forward import cache_keyword, end_ids_tensor, full_precision, model_device, prefill, supports_own_decoding
from rlvr.rollout.decoding.sampler import counter_uniforms, draw_key, sample_next

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


UNIFORM_BLOCK = 64
"""Positions whose sampling uniforms are computed together (``[B, 64]`` float64 at a time)."""


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
    device = model_device(model)
    forward = full_precision(model)
    ends = end_ids_tensor([] if eos_id is None else [eos_id] if isinstance(eos_id, int) else list(eos_id), device)
    B = len(prompts)
    width = max(len(p) for p in prompts)
    cache = KVBuffers(model.config.num_hidden_layers, width + max_new_tokens)
    pre = prefill(model, prompts, pad_id, cache)
    cache.length = width
    logits = pre.logits
    cache.select(pre.first_of)
    key_ok = torch.zeros((B, width + max_new_tokens), dtype=torch.bool, device=device)
    key_ok[:, :width] = pre.real.index_select(0, pre.first_of)
    prompt_len = pre.prompt_len
    cache_arg = cache_keyword(model)

    tokens = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((B, max_new_tokens), device=device)
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    ended = torch.zeros(B, dtype=torch.bool, device=device)
    stop_strings: dict[int, str] = {}
    active = torch.arange(B, device=device)  # original rows still in the batch
    done = torch.zeros(B, dtype=torch.bool, device=device)  # per active row

    # the call's key: a row's draws depend on it, the row and the position only. A greedy call draws none, so an
    # evaluation between training steps leaves torch's generator, and what training samples next, as it was
    key = torch.zeros(1, dtype=torch.long, device=device) if greedy else draw_key(device)
    all_rows = torch.arange(B, device=device).unsqueeze(1)
    uniforms = None
    steps = 0
    for t in range(max_new_tokens):
        faults.reached("generate")
        if not greedy and t % UNIFORM_BLOCK == 0:  # a block of positions at once: one op per token, not ~25
            uniforms = counter_uniforms(key, all_rows, torch.arange(t, min(t + UNIFORM_BLOCK, max_new_tokens), device=device).unsqueeze(0))
        token, logp = sample_next(logits, temperature, top_p, top_k, greedy, None if greedy else uniforms[active, t % UNIFORM_BLOCK],
                                  ranked=True)  # an eager loop: the nucleus ranked, not sorted
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


@DECODERS.register("kv", description="rlvr's compacting loop: finished rows leave the batch; fastest on a CPU")
class KVDecoder(Decoder):
    """`decode` as a `Decoder`: stop strings checked after every token."""

    name = "kv"
    rlvr_sampler = True

    def unsupported(self, model: torch.nn.Module) -> str | None:
        return None if supports_own_decoding(model) else "the model is not a Hugging Face decoder on sdpa/eager attention"

    def decode(self, model: torch.nn.Module, request: DecodeRequest) -> Decoded:
        stops = request.stops.fresh() if request.stops is not None else None
        return decode(model, request.prompts, max_new_tokens=request.max_new_tokens, eos_id=request.eos_ids or None,
                      pad_id=request.pad_id, temperature=request.temperature, top_p=request.top_p, top_k=request.top_k,
                      greedy=request.greedy,
                      stop_check=None if stops is None else lambda rows, generated: stops.scan(rows, generated, generated.shape[1]))
