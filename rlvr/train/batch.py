"""Token tensors for training: prompt + completion sequences, masks, per-token log-probs.

Positions are in "target space": index t of a ``[B, L-1]`` tensor refers to predicting token t+1
of the ``[B, L]`` input from tokens 0..t. The completion mask is 1 where that target is a
completion token (including the end-of-sequence token).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence


@dataclass
class TokenBatch:
    """Right-padded sequences.

    Attributes:
        input_ids: ``[B, L]`` prompt then completion tokens, padded on the right.
        attention_mask: ``[B, L]`` 1 on real tokens.
        completion_mask: ``[B, L-1]`` float, 1 on completion targets.
    """

    input_ids: Tensor
    attention_mask: Tensor
    completion_mask: Tensor

    def select(self, idx: Tensor) -> TokenBatch:
        """Rows ``idx``, trimmed to their longest sequence."""
        am = self.attention_mask[idx]
        width = int(am.sum(-1).max()) if len(idx) else 1
        return TokenBatch(self.input_ids[idx, :width], am[:, :width], self.completion_mask[idx, : max(width - 1, 1)])

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.completion_mask.to(device))


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
    return TokenBatch(input_ids, attention_mask, completion_mask)


def scatter_completion_values(values: list[list[float]], batch: TokenBatch) -> Tensor:
    """Place per-completion-token values (e.g. the rollout engine's log-probs) into target space ``[B, L-1]``."""
    out = torch.zeros_like(batch.completion_mask)
    flat = torch.tensor([v for row in values for v in row], dtype=out.dtype)
    out[batch.completion_mask.bool()] = flat
    return out


def token_logprobs(model: torch.nn.Module, batch: TokenBatch, temperature: float = 1.0, entropy: bool = False,
                   entropy_grad: bool = False, top_p: float = 1.0, top_k: int = 0) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[B, L-1]`` of each next token under the distribution a sampler with these
    settings draws from (logits divided by ``temperature``; with ``top_p < 1`` or ``top_k > 0``
    renormalised over the kept tokens, `rlvr.algos.correction.truncated_logprobs`, so importance
    ratios against a truncated sampler are unbiased), and optionally the entropy ``[B, L-1]`` of
    each untruncated next-token distribution (differentiable only with ``entropy_grad``)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    if temperature not in (0, 1):
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    targets = batch.input_ids[:, 1:]
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
