"""Per-token log-probs of a batch under a model that is not being trained at that moment (the
reference, the behaviour policy before an epoch, a PRM while it scores)."""

from __future__ import annotations

import torch

from rlvr.train.batch import TokenBatch, token_logprobs


@torch.no_grad()
def frozen_logprobs(model: torch.nn.Module, batch: TokenBatch, rows: torch.Tensor, micro_batch_size: int,
                    device: torch.device, temperature: float = 1.0) -> torch.Tensor:
    """Log-probs ``[B, T]`` of the sampled tokens of ``rows`` (0 elsewhere), in eval mode, in
    micro-batches of rows of similar length (less padding)."""
    out = torch.zeros_like(batch.completion_mask)
    was_training = model.training
    model.eval()
    lengths = batch.attention_mask[rows].sum(-1)
    for micro in rows[torch.argsort(lengths, stable=True)].split(micro_batch_size):
        logp, _ = token_logprobs(model, batch.select(micro).to(device), temperature)
        out[micro, : logp.shape[1]] = logp.float().cpu()
    model.train(was_training)
    return out
