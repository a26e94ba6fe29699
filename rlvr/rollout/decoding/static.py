"""rlvr's static decoder: fixed shapes, bookkeeping on the device, the host consulted every k tokens.

On a GPU a small model's one-token step is bound by kernel launches and host synchronisation, not
by arithmetic. This decoder keeps everything a step needs in preallocated tensors whose shapes do
not change while a batch decodes:

- the key/value cache is one buffer per layer of ``[rows, kv_heads, columns, head_dim]``, written in
  place at the step's column (a device tensor, `StaticCache`); attention reads the whole buffer
  under a mask of the columns filled so far;
- finished rows stay in the batch (their tokens are not kept) instead of being compacted away;
- which rows finished, their lengths, the step counter, positions and the mask are updated on the
  device, so a step reads nothing back to the host;
- the host looks every ``sync_every`` tokens (one transfer: whether all rows finished, and the
  newest tokens when stop strings are set, `rlvr.rollout.decoding.stops.StopStrings.scan_span`).

Because a step is then the same sequence of kernels on the same addresses every time, it can be
captured once as a CUDA graph and replayed (``rollout.hf.decode=cuda_graph``) or compiled by
``torch.compile`` (``compiled``; on CUDA with ``mode="reduce-overhead"``, which captures graphs too).
Batches are bucketed (rows up to a power of two or a multiple of 16, prompt and completion columns
up to a multiple of `COLUMN_BUCKET`) so that the shapes, and the captured graphs, repeat across a run's steps; padding
rows start finished. Each distinct prompt is prefilled once, eagerly, as in the ``kv`` decoder.

Tokens are drawn by `rlvr.rollout.decoding.sampler.sample_next`, the same sampler as the other rlvr
decoders: the same distribution and the same log-probs; greedy decoding gives the same tokens.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor

from envs import faults
from rlvr.models.attention import model_mask
from rlvr.rollout.decoding.base import DECODERS, Decoded, DecodeRequest, Decoder
from rlvr.rollout.decoding.forward import cache_keyword, end_ids_tensor, full_precision, model_device, prefill, supports_own_decoding
from rlvr.rollout.decoding.kv import KVBuffers
from rlvr.rollout.decoding.sampler import counter_uniforms, draw_key, sample_next

SYNC_EVERY = 8
"""Tokens between two looks of the host at a decoding batch (`StaticDecoder.sync_every`)."""

COLUMN_BUCKET = 32
"""Prompt and completion widths are rounded up to a multiple of this, so shapes repeat."""

KEEP_SHAPES = 4
"""Batch shapes (and their captured graphs) kept per decoder; the least recently used goes first."""


def bucket_rows(rows: int) -> int:
    """Rows rounded up to a power of two up to 16, then to a multiple of 16 (at most 15 padding rows,
    few distinct shapes: a run's chunks have one size, its last chunk maybe another)."""
    if rows <= 16:
        return 1 << max(rows - 1, 0).bit_length()
    return -(-rows // 16) * 16


def bucket_columns(columns: int) -> int:
    return -(-columns // COLUMN_BUCKET) * COLUMN_BUCKET


class StaticCache:
    """A key/value cache in fixed buffers, duck-typed as a transformers ``Cache``: the model calls
    ``update`` once per layer per forward; the new keys and values go to column ``write_at`` (a
    one-element device tensor) and attention reads the whole buffer (the mask hides what is not
    filled). No host synchronisation, no allocation: safe to capture in a CUDA graph.

    Buffers start at zero: a column the mask hides is multiplied by an attention weight of exactly
    0, which must not meet a NaN."""

    def __init__(self, keys: list[Tensor], values: list[Tensor], write_at: Tensor):
        self.keys, self.values, self.write_at = keys, values, write_at

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        self.keys[layer_idx].index_copy_(2, self.write_at, key)
        self.values[layer_idx].index_copy_(2, self.write_at, value)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[2]


@dataclass(frozen=True)
class Shape:
    """A bucketed batch shape, with what a captured step bakes in (sampling and end ids)."""

    rows: int
    prompt_columns: int
    new_columns: int
    temperature: float
    top_p: float
    top_k: int
    greedy: bool
    eos_ids: tuple[int, ...]

    @property
    def columns(self) -> int:
        return self.prompt_columns + self.new_columns


class StaticBatch:
    """The device state of one bucketed batch shape and its one-token step (`step`).

    Allocated once per shape and reused by every batch of that shape (a captured graph holds these
    addresses). Token ``g`` (1-based) is drawn by step ``g - 1``: the first from the prefill's
    logits (`start`), the others by `step`, which feeds token ``g`` at cache column
    ``prompt_columns + g - 1`` and position ``prompt_len + g - 1``.
    """

    def __init__(self, model: torch.nn.Module, shape: Shape, like: KVBuffers, pad_id: int):
        device = model_device(model)
        R, C, N = shape.rows, shape.columns, shape.new_columns
        self.model, self.shape, self.pad_id = model, shape, pad_id
        self.forward = full_precision(model)
        self.cache_arg = cache_keyword(model)
        self.keys = [k.new_zeros((R, k.shape[1], C, k.shape[3])) for k in like.keys]
        self.values = [v.new_zeros((R, v.shape[1], C, v.shape[3])) for v in like.values]
        self.write_at = torch.zeros(1, dtype=torch.long, device=device)
        self.cache = StaticCache(self.keys, self.values, self.write_at)
        self.key_ok = torch.zeros((R, C), dtype=torch.bool, device=device)
        self.key_ok[:, shape.prompt_columns - 1] = True  # every query sees a key (zeros) even before `start`: warm-up stays finite
        self.token = torch.zeros(R, dtype=torch.long, device=device)
        self.position = torch.zeros(R, dtype=torch.long, device=device)
        self.generated = torch.zeros(1, dtype=torch.long, device=device)  # tokens drawn so far
        self.key = torch.zeros(1, dtype=torch.long, device=device)  # the call's sampling key (`counter_uniforms`)
        self.rows = torch.arange(R, device=device)
        self.tokens = torch.zeros((R, N), dtype=torch.long, device=device)
        self.logprobs = torch.zeros((R, N), dtype=torch.float32, device=device)
        self.lengths = torch.zeros(R, dtype=torch.long, device=device)
        self.done = torch.zeros(R, dtype=torch.bool, device=device)
        self.ended = torch.zeros(R, dtype=torch.bool, device=device)
        self.ends = end_ids_tensor(shape.eos_ids, device)

    def state_tensors(self) -> list[Tensor]:
        """Every tensor a step reads or writes besides the model's weights."""
        return [*self.keys, *self.values, self.write_at, self.key_ok, self.token, self.position, self.generated, self.key, self.rows, self.tokens,
                self.logprobs, self.lengths, self.done, self.ended, *([self.ends] if self.ends is not None else [])]

    def start(self, cache: KVBuffers, pre: Any, rows: int, max_new_tokens: int) -> None:
        """Load a prefilled batch of ``rows`` real rows: copy each row's prompt cache to the right
        end of the prompt columns, reset the bookkeeping (padding rows start finished) and draw
        the first token from the prefill's logits."""
        s, P, W = self.shape, self.shape.prompt_columns, pre.width
        for buffers, filled in ((self.keys, cache.keys), (self.values, cache.values)):
            for buffer, prompt_cache in zip(buffers, filled):
                buffer[:rows, :, P - W: P] = prompt_cache[:, :, :W].index_select(0, pre.first_of)
        self.key_ok.zero_()
        self.key_ok[:rows, P - W: P] = pre.real.index_select(0, pre.first_of)
        self.key_ok[rows:, P - 1] = True  # padding rows attend to one column (a query must see a key)
        self.position.zero_()
        self.position[:rows] = pre.prompt_len
        self.lengths.fill_(max_new_tokens)
        self.done.zero_()
        self.done[rows:] = True
        self.ended.zero_()
        self.generated.zero_()
        if not s.greedy:  # a greedy call uses no randomness: it leaves torch's generator as it found it
            self.key.copy_(draw_key(self.key.device))
        self.token.fill_(self.pad_id)
        logits = torch.zeros((s.rows, pre.logits.shape[1]), dtype=pre.logits.dtype, device=pre.logits.device)
        logits[:rows] = pre.logits
        self._record(*self._sample(logits))

    def step(self) -> None:
        """Feed the newest token, draw the next: device work only (no host synchronisation)."""
        s = self.shape
        column = self.generated + (s.prompt_columns - 1)
        self.write_at.copy_(column)
        self.key_ok.index_fill_(1, column, True)
        out = self.forward(input_ids=self.token.unsqueeze(1), attention_mask=model_mask(self.model, self.key_ok[:, None, None, :]),
                           position_ids=self.position.unsqueeze(1), **{self.cache_arg: self.cache}, use_cache=True)
        self.position.add_(1)
        self._record(*self._sample(out.logits[:, -1]))

    def _sample(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        s = self.shape
        uniforms = None if s.greedy else counter_uniforms(self.key, self.rows, self.generated)
        return sample_next(logits, s.temperature, s.top_p, s.top_k, s.greedy, uniforms)

    def _record(self, token: Tensor, logp: Tensor) -> None:
        self.tokens.index_copy_(1, self.generated, token.unsqueeze(1))
        self.logprobs.index_copy_(1, self.generated, logp.unsqueeze(1))
        self.generated.add_(1)
        if self.ends is not None:
            finished = ~self.done & torch.isin(token, self.ends)
            self.lengths.copy_(torch.where(finished, self.generated, self.lengths))
            self.ended.logical_or_(finished)
            self.done.logical_or_(finished)
        self.token.copy_(token)


class StepRunner:
    """Runs `StaticBatch.step`: eagerly here; subclasses capture or compile it."""

    def __init__(self, batch: StaticBatch):
        self.batch = batch

    def __call__(self) -> None:
        self.batch.step()


class CudaGraphStep(StepRunner):
    """The step captured once as a CUDA graph and replayed (warmed up on a side stream first, as
    capture requires). Warm-up runs change the batch's state: `StaticBatch.start` resets it."""

    def __init__(self, batch: StaticBatch):
        super().__init__(batch)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                batch.step()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: a trainer updating weights in another thread (rollout.overlap) does not break the capture
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            batch.step()

    def __call__(self) -> None:
        self.graph.replay()


class CompiledStep(StepRunner):
    """The step through ``torch.compile`` (on CUDA ``mode="reduce-overhead"``: compiled and captured
    as CUDA graphs; on a CPU inductor's code, no graphs)."""

    def __init__(self, batch: StaticBatch):
        super().__init__(batch)
        cuda = batch.keys[0].is_cuda
        if cuda:  # the batch's buffers keep their addresses: captured graphs may update them in place
            for t in batch.state_tensors():
                torch._dynamo.mark_static_address(t)
        self.compiled = torch.compile(batch.step, mode="reduce-overhead" if cuda else None, dynamic=False, fullgraph=False)

    def __call__(self) -> None:
        self.compiled()


@dataclass
class _Cached:
    batch: StaticBatch
    runner: StepRunner
    weights: tuple[int, ...]


def _weights_key(model: torch.nn.Module) -> tuple[int, ...]:
    """Where the model's parameters live: a captured step reads them there, so new storage
    (a model loaded again, not updated in place) needs a new capture."""
    return tuple(p.data_ptr() for p in model.parameters())


class StaticDecoder(Decoder):
    """Static shapes, device-side bookkeeping, eager steps (module docstring). Subclasses set
    `runner` to capture or compile the step.

    Attributes:
        sync_every: Tokens between two looks of the host (whether every row finished; stop strings).
    """

    name = "static"
    rlvr_sampler = True
    runner: ClassVar[type[StepRunner]] = StepRunner
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")

    def __init__(self, sync_every: int = SYNC_EVERY):
        if sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.sync_every = sync_every
        self._shapes: OrderedDict[Shape, _Cached] = OrderedDict()

    def unsupported(self, model: torch.nn.Module) -> str | None:
        if not supports_own_decoding(model):
            return "the model is not a Hugging Face decoder on sdpa/eager attention"
        device = model_device(model).type
        if device not in self.devices:
            return f"it runs on {' or '.join(self.devices)}, the model is on {device}"
        return None

    def release(self) -> None:
        self._shapes.clear()

    def _prepared(self, model: torch.nn.Module, shape: Shape, cache: KVBuffers, pad_id: int) -> _Cached:
        weights = _weights_key(model)
        cached = self._shapes.get(shape)
        if cached is None or cached.weights != weights or cached.batch.model is not model:
            batch = StaticBatch(model, shape, cache, pad_id)
            try:
                runner = self.runner(batch)
            except Exception as e:  # noqa: BLE001 - a shape the probe's did not cover failed to capture: decode it eagerly
                warnings.warn(f"rollout.hf.decode={self.name}: capturing the step of a {shape.rows} x {shape.columns} batch failed "
                              f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}); this shape decodes "
                              "with eager steps (same samples, slower). Please report it.", RuntimeWarning, stacklevel=3)
                batch = StaticBatch(model, shape, cache, pad_id)  # fresh state: a failed capture may have left its own behind
                runner = StepRunner(batch)
            cached = _Cached(batch, runner, weights)
            self._shapes[shape] = cached
            while len(self._shapes) > KEEP_SHAPES:
                self._shapes.popitem(last=False)
        self._shapes.move_to_end(shape)
        return cached

    @torch.inference_mode()
    def decode(self, model: torch.nn.Module, request: DecodeRequest) -> Decoded:
        rows, T = len(request.prompts), request.max_new_tokens
        width = max(len(p) for p in request.prompts)
        cache = KVBuffers(model.config.num_hidden_layers, width)
        pre = prefill(model, request.prompts, request.pad_id, cache)
        shape = Shape(bucket_rows(rows), bucket_columns(width), bucket_columns(T), float(request.temperature), float(request.top_p),
                      int(request.top_k), bool(request.greedy), tuple(request.eos_ids))
        cached = self._prepared(model, shape, cache, request.pad_id)
        batch, run = cached.batch, cached.runner
        batch.start(cache, pre, rows, T)
        del cache, pre
        stops = request.stops.fresh() if request.stops is not None else None
        stop_strings: dict[int, str] = {}
        running = list(range(rows))  # rows not finished at the host's last look
        looked = 0  # tokens drawn at the host's last look
        generated = 1
        while True:
            if generated % self.sync_every == 0 or generated == T:
                looked, running = self._look(batch, rows, running, looked, generated, stops, stop_strings)
                if not running or generated == T:
                    break
            faults.reached("generate")
            run()
            generated += 1
        n = generated
        return Decoded(batch.tokens[:rows, :n].cpu(), batch.logprobs[:rows, :n].cpu(), batch.lengths[:rows].clamp(max=n).cpu(),
                       batch.ended[:rows].cpu(), stop_strings)

    def _look(self, batch: StaticBatch, rows: int, running: list[int], looked: int, generated: int, stops: Any,
              stop_strings: dict[int, str]) -> tuple[int, list[int]]:
        """The host's look after ``generated`` tokens: one transfer of the finished flags (and, with
        stop strings, the lengths and the newest tokens of the rows running at the last look).
        Rows a stop string ended are marked on the device. Returns (``generated``, rows still running)."""
        if stops is None:
            done = batch.done[:rows].cpu().tolist()
            return generated, [r for r in running if not done[r]]
        first = looked + 1
        lo = max(0, first - stops.window)  # tokens lo+1 .. generated cover every window ending after the last look
        index = torch.tensor(running, device=batch.done.device)
        seen = torch.cat([batch.done.index_select(0, index).long().unsqueeze(1), batch.lengths.index_select(0, index).unsqueeze(1),
                          batch.tokens.index_select(0, index)[:, lo:generated]], dim=1).cpu().tolist()
        limits = [length if done else generated for done, length, *_ in seen]
        hits = stops.scan_span(running, [row[2:] for row in seen], first, limits)
        if hits:
            hit_rows = torch.tensor(list(hits), device=batch.done.device)
            batch.lengths.index_copy_(0, hit_rows, torch.tensor([end for end, _ in hits.values()], device=batch.done.device))
            batch.done.index_fill_(0, hit_rows, True)
            batch.ended.index_fill_(0, hit_rows, True)
            stop_strings.update({row: stop for row, (_, stop) in hits.items()})
        still = [r for r, (done, *_) in zip(running, seen) if not done and r not in hits]
        return generated, still


DECODERS.register("static", StaticDecoder, description="static cache, bookkeeping on the device, the host every few tokens (eager steps)")


@DECODERS.register("cuda_graph", description="the static decoder's step captured as a CUDA graph and replayed (CUDA only)")
class CudaGraphDecoder(StaticDecoder):
    name = "cuda_graph"
    warms_up = True
    runner = CudaGraphStep
    devices = ("cuda",)


@DECODERS.register("compiled", description="the static decoder's step through torch.compile (reduce-overhead on CUDA)")
class CompiledDecoder(StaticDecoder):
    name = "compiled"
    warms_up = True
    runner = CompiledStep


__all__ = ["CompiledDecoder", "CudaGraphDecoder", "StaticCache", "StaticBatch", "StaticDecoder", "bucket_columns", "bucket_rows"]
