"""Token tensors for training: prompt + completion sequences, masks, per-token log-probs.

Positions are in "target space": index t of a ``[B, L-1]`` tensor refers to predicting token t+1
of the ``[B, L]`` input from tokens 0..t. The completion mask is 1 where that target is a
completion token (including the end-of-sequence token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from rlvr.models.attention import model_mask
from rlvr.models.head import head_logprobs, head_path, hidden_states
from rlvr.models.packing import shared_prefix_layout, supports_packing


@dataclass
class TokenBatch:
    """Right-padded sequences.

    Attributes:
        input_ids: ``[B, L]`` prompt then completion tokens, padded on the right.
        attention_mask: ``[B, L]`` 1 on real tokens.
        completion_mask: ``[B, L-1]`` float, 1 on completion targets.
        prompt_lens: ``[B]`` prompt tokens of each sequence (None when unknown), which lets
            `token_logprobs` run each distinct prompt once (`rlvr.models.packing`).
    """

    input_ids: Tensor
    attention_mask: Tensor
    completion_mask: Tensor
    prompt_lens: Tensor | None = None

    def select(self, idx: Tensor) -> TokenBatch:
        """Rows ``idx``, trimmed to their longest sequence."""
        am = self.attention_mask[idx]
        width = int(am.sum(-1).max()) if len(idx) else 1
        return TokenBatch(self.input_ids[idx, :width], am[:, :width], self.completion_mask[idx, : max(width - 1, 1)],
                          None if self.prompt_lens is None else self.prompt_lens[idx])

    def to(self, device: torch.device) -> TokenBatch:
        # prompt_lens stays on the CPU: only the packing layout (built on the CPU) reads it
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.completion_mask.to(device), self.prompt_lens)


def build_token_batch(prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                      loss_masks: list[list[int] | None] | None = None) -> TokenBatch:
    """Concatenate each prompt with its completion and pad to a batch. ``loss_masks`` (per
    completion, one entry per token, or None for all 1) leave the 0 entries out of
    ``completion_mask``: the observation tokens of a multi-turn episode stay in the context and are
    never scored. (`scatter_completion_values` places values by ``completion_mask``; build the batch
    without masks when values are to be scattered into it.)"""
    seqs = [torch.tensor(p + c, dtype=torch.long) for p, c in zip(prompts, completions)]
    input_ids = pad_sequence(seqs, batch_first=True, padding_value=pad_id)
    lengths = torch.tensor([len(s) for s in seqs])
    positions = torch.arange(input_ids.shape[1])
    attention_mask = (positions.unsqueeze(0) < lengths.unsqueeze(1)).long()
    starts = torch.tensor([len(p) for p in prompts])
    target_pos = positions[1:].unsqueeze(0)  # target t predicts token t+1
    completion_mask = ((target_pos >= starts.unsqueeze(1)) & (target_pos < lengths.unsqueeze(1))).float()
    if loss_masks is not None and any(m is not None for m in loss_masks):
        flat = [v for m, c in zip(loss_masks, completions) for v in (m if m is not None else [1] * len(c))]
        completion_mask[completion_mask.bool()] = torch.tensor(flat, dtype=completion_mask.dtype)
    return TokenBatch(input_ids, attention_mask, completion_mask, starts)


def scatter_completion_values(values: list[list[float]], batch: TokenBatch) -> Tensor:
    """Place per-completion-token values (e.g. the rollout engine's log-probs) into target space ``[B, L-1]``."""
    out = torch.zeros_like(batch.completion_mask)
    flat = torch.tensor([v for row in values for v in row], dtype=out.dtype, device=out.device)  # the batch may be on a GPU already
    out[batch.completion_mask.bool()] = flat
    return out


def token_logprobs(model: torch.nn.Module, batch: TokenBatch, temperature: float = 1.0, entropy: bool = False,
                   entropy_grad: bool = False, top_p: float = 1.0, top_k: int = 0, pack: bool = False) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[B, L-1]`` of each next token under the distribution a sampler with these
    settings draws from (logits divided by ``temperature``; with ``top_p < 1`` or ``top_k > 0``
    renormalised over the kept tokens, `rlvr.algos.correction.truncated_logprobs`, so importance
    ratios against a truncated sampler are unbiased), and optionally the entropy ``[B, L-1]`` of
    each untruncated next-token distribution (differentiable only with ``entropy_grad``).

    With ``pack`` (and the batch's ``prompt_lens`` known, and a model that takes a 4-D mask) the
    forward runs on the shared-prefix packing of the batch (`rlvr.models.packing`): each distinct
    prompt once, no padding; the same numbers up to float rounding on the completion mask, and 0
    off it (only those targets are scored).

    On a model whose logits are its head applied to its backbone's output (most causal LMs; checked
    once per model against the plain forward), the head runs in chunks of positions
    (`rlvr.models.head`, truncation included): no ``[B, L, V]`` logits are held, so memory stops
    growing with the micro-batch on a real vocabulary; the values are the same (0 on padding)."""
    targets = batch.input_ids[:, 1:]
    packed = pack and batch.prompt_lens is not None and supports_packing(model)
    chunked = head_path(model, *_probe(model, batch, temperature))
    device = batch.input_ids.device
    if packed:
        layout = shared_prefix_layout(batch.input_ids.cpu(), batch.attention_mask.sum(-1).cpu(), batch.prompt_lens)
        inputs = dict(input_ids=layout.input_ids.to(device), attention_mask=model_mask(model, layout.attention_mask.to(device)),
                      position_ids=layout.position_ids.to(device))
        scored = batch.completion_mask.bool()
        source = layout.source.to(device)[scored]
    elif chunked:
        inputs = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        scored = batch.attention_mask[:, 1:].bool()  # every real target (padding stays 0)
    else:
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
        return _score(logits, targets, temperature, entropy, entropy_grad, top_p, top_k)
    if chunked:
        hidden = hidden_states(model, **inputs)
        flat = hidden.reshape(-1, hidden.shape[-1])[source] if packed else hidden[:, :-1][scored]
        logp, ent = head_logprobs(model, flat, targets[scored], temperature, entropy, entropy_grad, top_p=top_p, top_k=top_k)
    else:
        logits = model(**inputs).logits
        logp, ent = _score(logits.reshape(-1, logits.shape[-1])[source], targets[scored], temperature, entropy, entropy_grad, top_p, top_k)
    place = lambda values: torch.zeros(scored.shape, dtype=values.dtype, device=device).masked_scatter(scored, values)  # noqa: E731
    return place(logp), None if ent is None else place(ent)


def _probe(model: torch.nn.Module, batch: TokenBatch, temperature: float) -> tuple:
    """Two ways to score the first two sequences of ``batch`` (plain forward, chunked head), for
    `rlvr.models.head.head_path`'s one-time check of a model."""
    small = batch.select(torch.arange(min(2, batch.input_ids.shape[0])))
    real = small.attention_mask[:, 1:].bool()
    targets = small.input_ids[:, 1:][real]

    def plain() -> Tensor:
        logits = model(input_ids=small.input_ids, attention_mask=small.attention_mask).logits[:, :-1]
        return _score(logits, small.input_ids[:, 1:], temperature, False, False, 1.0, 0)[0][real]

    def chunked() -> Tensor:
        hidden = hidden_states(model, input_ids=small.input_ids, attention_mask=small.attention_mask)
        return head_logprobs(model, hidden[:, :-1][real], targets, temperature)[0]

    return plain, chunked


def _score(logits: Tensor, targets: Tensor, temperature: float, entropy: bool, entropy_grad: bool, top_p: float,
           top_k: int) -> tuple[Tensor, Tensor | None]:
    """`token_logprobs` given the logits ``[..., V]`` that predict ``targets`` ``[...]``."""
    logits = logits.float()
    if temperature not in (0, 1):
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    if top_p < 1 or top_k > 0:
        from rlvr.algos.correction import truncated_logprobs

        logp = truncated_logprobs(logits, targets, 1.0, top_p, top_k)
    else:
        logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    ent = None
    if entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            probs = torch.softmax(logits, dim=-1)
            ent = logz - (probs * logits).sum(-1)
    return logp, ent


def trainer_logprobs(model: torch.nn.Module, prompt_ids: Sequence[list[int]], completion_ids: Sequence[list[int]], pad_id: int = 0) -> list[list[float]]:
    """The trainer model's log-probs (temperature 1) of each completion token, one list per completion."""
    batch = build_token_batch(list(prompt_ids), list(completion_ids), pad_id)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logp, _ = token_logprobs(model, batch.to(device))
    finally:
        model.train(was_training)
    mask = batch.completion_mask.bool()
    return [row[m].tolist() for row, m in zip(logp.cpu(), mask)]
