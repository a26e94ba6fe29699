"""Drawing the next token: the one sampler every rlvr decoder uses."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlvr.algos.correction import truncation_keep


def sample_next(logits: Tensor, temperature: float, top_p: float, top_k: int, greedy: bool) -> tuple[Tensor, Tensor]:
    """One token per row from raw ``logits`` ``[B, V]`` and its log-prob under the distribution it
    was drawn from: greedy takes the argmax (log-prob at temperature 1), sampling tempers,
    truncates (`rlvr.algos.correction.truncation_keep`) and draws. Returns ``([B], [B])``.

    No host synchronisation: safe inside a captured CUDA graph or a compiled step."""
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
