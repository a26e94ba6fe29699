"""Per-token log-probs of a batch under a model that is not being trained at that moment (the
reference, the behaviour policy before an epoch, a PRM while it scores)."""

from __future__ import annotations

import torch

from rlvr.models.batch import TokenBatch, token_logprobs


@torch.no_grad()
def frozen_logprobs(model: torch.nn.Module, batch: TokenBatch, micro_batches: list[tuple[torch.Tensor, bool]],
                    device: torch.device, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                    pack: bool = False) -> torch.Tensor:
    """Log-probs ``[B, T]`` of the sampled tokens of the rows in ``micro_batches`` (0 elsewhere), in
    eval mode, under the sampler's settings (`token_logprobs`). ``micro_batches`` come from `rlvr.train.harness.Harness.micro_batches`: placeholder
    ones (``False``) only keep a sharded model's collectives in step and are discarded. ``pack``: see
    `token_logprobs`."""
    out = torch.zeros_like(batch.completion_mask)
    was_training = model.training
    model.eval()
    for micro, real in micro_batches:
        logp, _ = token_logprobs(model, batch.select(micro).to(device), temperature, top_p=top_p, top_k=top_k, pack=pack)
        if real:
            out[micro, : logp.shape[1]] = logp.float().cpu()
    model.train(was_training)
    return out
