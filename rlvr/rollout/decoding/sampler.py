"""Drawing the next token: the one sampler every rlvr decoder uses.

A token is drawn by inverting the cumulative distribution at a uniform number ``u`` that depends
only on (the call's key, the row, the token's position): `counter_uniforms`, a counter-based hash
(murmur3's 32-bit finaliser, in 64-bit integer tensors on any device). A row's draws therefore do
not depend on which other rows share its batch, on finished rows leaving it (``kv``) or staying
(``static``), on padding rows, or on the device: rlvr's decoders sample the same tokens from the
same logits, so ``rollout.hf.decode=auto`` choosing one or another changes the speed, not the run.
The key is drawn once per sampled call from torch's generator, so a seeded call repeats; a greedy call
draws none, so a held-out evaluation inside a run does not change what the run samples after it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlvr.algos.correction import truncation_keep

_MASK32 = 0xFFFFFFFF


def _mul32(x: Tensor, constant: int) -> Tensor:
    """``x * constant mod 2**32`` for ``x`` in [0, 2**32), without an int64 overflow: the constant is
    split into 16-bit halves, so no product reaches 2**49."""
    high, low = constant >> 16, constant & 0xFFFF
    return ((x * low) + (((x * high) & 0xFFFF) << 16)) & _MASK32


def _fmix32(x: Tensor) -> Tensor:
    """murmur3's finaliser: a bijection of [0, 2**32) whose output bits each depend on every input bit."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def draw_key(device: torch.device | str = "cpu") -> Tensor:
    """A call's key ``[1]`` int64, drawn from torch's (seeded) CPU generator."""
    return torch.randint(0, 2**31 - 1, (1,), dtype=torch.long).to(device)


def counter_uniforms(key: Tensor, rows: Tensor, position: Tensor | int) -> Tensor:
    """Uniform numbers in [0, 1), ``[B]`` float64, one for each row of ``rows`` ``[B]`` (int64) at
    token ``position`` (an int or a one-element tensor) under ``key`` ``[1]``: a pure function of
    the three, the same on every device; no host synchronisation. Elementwise, so ``rows`` ``[B, 1]``
    and ``position`` ``[1, T]`` give the ``[B, T]`` grid of every row at every position."""
    rows = rows.to(torch.long) & _MASK32
    position = torch.as_tensor(position, dtype=torch.long, device=rows.device) & _MASK32
    h = _fmix32((key.to(rows.device) & _MASK32) ^ _mul32(rows, 0x9E3779B1))
    h = _fmix32(h ^ _mul32(position + 1, 0x85EBCA77))
    low = _fmix32(h ^ 0x27D4EB2F)
    return (h.to(torch.float64) * 2.0**-32 + low.to(torch.float64) * 2.0**-64).clamp_(max=1.0 - 2.0**-53)


def sample_next(logits: Tensor, temperature: float, top_p: float, top_k: int, greedy: bool,
                uniforms: Tensor | None = None, ranked: bool = False) -> tuple[Tensor, Tensor]:
    """One token per row from raw ``logits`` ``[B, V]`` and its log-prob under the distribution it
    was drawn from: greedy takes the argmax (log-prob at temperature 1); sampling tempers, truncates
    (`rlvr.algos.correction.truncation_keep`) and inverts the cumulative distribution at
    ``uniforms`` ``[B]`` (default: drawn from torch's generator). Returns ``([B], [B])``.

    No host synchronisation: safe inside a captured CUDA graph or a compiled step; ``ranked`` (an
    eager loop's choice: much faster on a real vocabulary) finds the same top-p set by ranking a few
    tokens, with host synchronisation (`rlvr.algos.correction.truncation_keep`)."""
    logits = logits.float()
    if greedy:
        token = logits.argmax(-1)
        return token, torch.log_softmax(logits, -1).gather(-1, token.unsqueeze(-1)).squeeze(-1)
    if temperature not in (0, 1):
        logits = logits / temperature
    keep = truncation_keep(logits, top_p, top_k, ranked)
    if keep is not None:
        logits = logits.masked_fill(~keep, -math.inf)
    logp = torch.log_softmax(logits, -1)
    if uniforms is None:
        uniforms = torch.rand(logits.shape[0], dtype=torch.float64, device=logits.device)
    cdf = logp.exp().cumsum(-1)  # [B, V]; flat across tokens outside the kept set
    target = (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)  # scaled by the total: rounding never leaves it past the end
    token = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=logits.shape[-1] - 1)
    chosen = logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    # a target at the very end of the cdf can land on a trailing token outside the kept set: take the most likely instead
    fallback = chosen == -math.inf
    token = torch.where(fallback, logp.argmax(-1), token)
    return token, torch.where(fallback, logp.max(-1).values, chosen)
