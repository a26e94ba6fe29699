"""Rollout/trainer mismatch correction: the engine that samples (vLLM, other kernels, other
precision, maybe older weights) is not exactly the policy the trainer scores. Each part compares
the trainer's log-probs of the sampled tokens with the engine's and returns per-token weights
and a mask to apply to the token loss, plus statistics of the mismatch.

All parts take, shapes ``[B, T]``:

- ``trainer_logp``: log pi_old(y_t) under the trainer's weights that generated the batch (no grad),
- ``rollout_logp``: the engine's log-probs of the same tokens (``Completion.logprobs``),
- ``mask``: 1.0 on completion tokens,

and return a `Correction`. The ratio is rho = pi_trainer / pi_rollout, at one of three levels:
``token`` (rho_t), ``sequence`` (prod_t rho_t, on every token of the sequence) or ``geometric``
(exp of the mean log-ratio: a length-normalised sequence ratio).

- ``tis``: truncated importance sampling (Yao et al. 2025), weight ``min(rho, cap)``.
- ``mis``: masked importance sampling, weight ``rho`` inside ``[low, high]`` and the token (or
  whole sequence) dropped outside (Liu et al. 2025, "When speed kills stability").

`truncated_logprobs` gives the trainer's log-probs under the same top-k/top-p truncated
distribution the engine sampled from, so rho compares like with like.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from envs.registry import Registry
from rlvr.algos.parts import ALGOS_GROUP
from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:
    torch = lazy_module("torch")

CORRECTIONS: Registry = Registry("mismatch correction", entry_point_group=ALGOS_GROUP, versioned=False)

Level = Literal["token", "sequence", "geometric"]
LEVELS = ("token", "sequence", "geometric")


@dataclass
class Correction:
    """What a correction part returns.

    Attributes:
        weights: ``[B, T]`` importance weights (detached) to multiply the token loss by.
        mask: ``[B, T]`` float, the input mask with dropped tokens set to 0 (the objective's
            ``keep``; the aggregation still counts dropped tokens, as zero-loss tokens).
        stats: ``kl_k1``, ``kl_k3`` (KL(rollout || trainer) estimated on the sampled tokens),
            ``ratio_mean``/``ratio_min``/``ratio_max`` (of rho at the chosen level),
            ``corrected_frac`` (tokens whose weight was truncated) and ``masked_frac`` (tokens
            dropped), both as a share of the input's tokens.
    """

    weights: Tensor
    mask: Tensor
    stats: dict[str, float]


def _masked_log_ratio(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> Tensor:
    # where(), not a product: padding may hold -inf or nan, and 0 * inf is nan
    return torch.where(mask.bool(), (trainer_logp - rollout_logp).detach(), torch.zeros_like(mask))


def log_ratio(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor, level: Level = "token") -> Tensor:
    """``[B, T]`` log rho at ``level``, zero off the mask; sequence levels repeat on every token."""
    if level not in LEVELS:
        raise ValueError(f"correction level must be one of {', '.join(LEVELS)}, got {level!r}")
    lr = _masked_log_ratio(trainer_logp, rollout_logp, mask)
    if level == "token":
        return lr
    total = lr.sum(-1, keepdim=True)  # [B, 1]
    if level == "geometric":
        total = total / mask.sum(-1, keepdim=True).clamp(min=1)
    return total.expand_as(lr) * mask


def mismatch_stats(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> dict[str, float]:
    """KL(rollout || trainer) per token, estimated on tokens the engine sampled: k1 = mean(log q - log p)
    and k3 = mean(rho - 1 - log rho) with rho = p / q (non-negative, lower variance)."""
    n = mask.sum().clamp(min=1)
    lr = _masked_log_ratio(trainer_logp, rollout_logp, mask)
    return {
        "kl_k1": float((-lr).sum() / n),
        "kl_k3": float(((lr.exp() - 1 - lr) * mask).sum() / n),
    }


def _ratio_stats(lr: Tensor, mask: Tensor) -> dict[str, float]:
    on = mask.bool()
    if not on.any():
        return {"ratio_mean": 1.0, "ratio_min": 1.0, "ratio_max": 1.0}
    rho = lr[on].exp()
    return {"ratio_mean": float(rho.mean()), "ratio_min": float(rho.min()), "ratio_max": float(rho.max())}


@CORRECTIONS.register("none")
def no_correction(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor, level: Level = "token") -> Correction:
    """Weights 1, nothing dropped; the mismatch is still measured."""
    lr = log_ratio(trainer_logp, rollout_logp, mask, level)
    stats = {**mismatch_stats(trainer_logp, rollout_logp, mask), **_ratio_stats(lr, mask), "corrected_frac": 0.0, "masked_frac": 0.0}
    return Correction(torch.ones_like(mask), mask, stats)


@CORRECTIONS.register("tis")
def truncated_is(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor, level: Level = "token", cap: float = 2.0) -> Correction:
    """Truncated importance sampling: weight ``min(rho, cap)`` at ``level``; nothing dropped."""
    if cap <= 0:
        raise ValueError(f"tis cap must be > 0, got {cap}")
    lr = log_ratio(trainer_logp, rollout_logp, mask, level)
    log_cap = math.log(cap)
    weights = lr.clamp(max=log_cap).exp() * mask  # clamped in log space: a long product of ratios cannot overflow
    n = mask.sum().clamp(min=1)
    stats = {**mismatch_stats(trainer_logp, rollout_logp, mask), **_ratio_stats(lr, mask),
             "corrected_frac": float(((lr > log_cap).float() * mask).sum() / n), "masked_frac": 0.0}
    return Correction(weights, mask, stats)


@CORRECTIONS.register("mis")
def masked_is(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor, level: Level = "token",
              low: float = 0.5, high: float = 2.0, reweight: bool = True) -> Correction:
    """Masked importance sampling: tokens (``token``) or whole sequences (``sequence``,
    ``geometric``) whose rho leaves ``[low, high]`` are dropped; the rest are weighted by rho
    (``reweight``) or by 1 (pure rejection). ``Correction.mask`` marks the kept tokens; the
    objective gives a rejected token a loss of 0 and keeps it in every aggregation's normalisers
    (`rlvr.algos.objective.ObjectiveInputs.keep`): rejection is a weight of 0, not a shorter batch."""
    if not 0 <= low < high:
        raise ValueError(f"mis band must satisfy 0 <= low < high, got [{low}, {high}]")
    lr = log_ratio(trainer_logp, rollout_logp, mask, level)
    log_low = math.log(low) if low > 0 else -math.inf
    keep = ((lr >= log_low) & (lr <= math.log(high))).float()
    new_mask = mask * keep
    weights = torch.where(new_mask.bool(), lr.exp() if reweight else torch.ones_like(lr), torch.zeros_like(lr))
    n = mask.sum().clamp(min=1)
    stats = {**mismatch_stats(trainer_logp, rollout_logp, mask), **_ratio_stats(lr, mask),
             "corrected_frac": 0.0, "masked_frac": float((mask - new_mask).sum() / n)}
    return Correction(weights, new_mask, stats)


def truncation_keep(logits: Tensor, top_p: float = 1.0, top_k: int = 0, ranked: bool = False) -> Tensor | None:
    """Bool ``[..., V]``: the tokens a top-k/top-p sampler may draw from tempered ``logits``
    ``[..., V]``, or None when neither truncates. Keeps the ``top_k`` largest logits (ties kept;
    0 = off), then the smallest set of most likely tokens whose mass reaches ``top_p`` (a token is
    kept when the mass ranked strictly above it is < top_p; 1.0 = off), as vLLM and Hugging Face do.

    ``ranked`` finds the top-p set by ranking a few tokens (`nucleus_keep`: much faster on a real
    vocabulary, but its work depends on the values, with host synchronisation), for eager callers;
    the default sorts the whole vocabulary (`sorted_nucleus`), the same set with fixed work, as a
    captured CUDA graph or a compiled step needs."""
    if top_k < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need top_k >= 0 and 0 < top_p <= 1, got top_k={top_k}, top_p={top_p}")
    vocab = logits.shape[-1]
    if not (0 < top_k < vocab or top_p < 1):
        return None
    with torch.no_grad():
        keep = torch.ones_like(logits, dtype=torch.bool)
        if 0 < top_k < vocab:
            top = logits.topk(top_k, dim=-1).values  # a NaN ranks first
            keep = (logits >= top[..., -1:]) | top[..., :1].isnan()  # a row with a NaN is left whole (below)
        if top_p < 1:
            probs = torch.softmax(logits.float().masked_fill(~keep, -math.inf), dim=-1).reshape(-1, vocab)
            nucleus = (nucleus_keep if ranked else sorted_nucleus)(probs, top_p)
            # a row with a NaN logit (a diverged model: all its probs are NaN) is not truncated, so the NaN reaches
            # the log-probs as it does without truncation, instead of an empty set whose forced target scores 0
            nucleus |= probs[:, :1].isnan()
            keep &= nucleus.view_as(keep)
    return keep


NUCLEUS_RANKS = (64, 256)
"""How many of each row's most likely tokens `nucleus_keep` ranks, in turn, before it sorts the rows
they leave uncovered. On SmolLM2's vocabulary, 64 rows, one thread: ~36x faster than the sort where
the nucleus is a few dozen tokens, 1.5x where it is ~300, 6% slower where it is thousands (flat rows,
a high temperature: the ranking is wasted before the sort); (64, 1024) was 7x at ~300 but 13% slower there."""
NUCLEUS_MARGIN = 1e-4
"""Mass by which the ranked tokens must exceed ``top_p`` before the rest are left unranked: far above
float32 rounding of the cumulative sum, so the kept set is the one a full sort gives."""


def check_top_p(top_p: float) -> None:
    if not 0 < top_p <= 1:  # NaN too
        raise ValueError(f"need 0 < top_p <= 1, got top_p={top_p}")


def sorted_nucleus(probs: Tensor, top_p: float) -> Tensor:
    """Bool ``[N, V]``: the top-p set of each row of ``probs`` ``[N, V]`` by a full descending sort (the
    definition; fixed work, no host synchronisation)."""
    check_top_p(top_p)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    above = sorted_p.cumsum(-1) - sorted_p  # mass ranked strictly above each token
    return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, above < top_p)


def nucleus_keep(probs: Tensor, top_p: float) -> Tensor:
    """Bool ``[N, V]``: for each row of ``probs`` ``[N, V]``, the tokens whose mass ranked strictly
    above them is < ``top_p``, as a full descending sort gives them (ties at the boundary are
    ranked arbitrarily, as by the sort). Ranks only the most likely ``NUCLEUS_RANKS[0]`` tokens of a
    row, then more for the rows those do not cover, then sorts what is left: a real vocabulary's full sort at every
    decoding step was a fifth of a sampled rollout on the CPU (SmolLM2's 49,152 tokens: 190 ms vs
    3 ms for 64 rows). How much it ranks depends on the values, with host synchronisation: eager
    callers only (`truncation_keep`'s ``ranked``)."""
    check_top_p(top_p)
    n, vocab = probs.shape
    keep = torch.zeros_like(probs, dtype=torch.bool)
    rows = torch.arange(n, device=probs.device)
    if top_p + NUCLEUS_MARGIN < 1:  # else no ranked prefix can be known to cover it
        for k in (k for k in NUCLEUS_RANKS if 4 * k < vocab):
            if not rows.numel():
                return keep
            part = probs if len(rows) == n else probs.index_select(0, rows)
            ranked_p, order = part.topk(k, dim=-1)
            mass = ranked_p.cumsum(-1)  # its prefixes are the full sort's
            covered = mass[:, -1] >= top_p + NUCLEUS_MARGIN
            keep[rows[covered]] = torch.zeros_like(part[covered], dtype=torch.bool).scatter_(
                -1, order[covered], (mass - ranked_p)[covered] < top_p)  # mass ranked strictly above each token
            rows = rows[~covered]
    if len(rows) == n:
        return sorted_nucleus(probs, top_p)
    if rows.numel():
        keep[rows] = sorted_nucleus(probs.index_select(0, rows), top_p)
    return keep


def truncated_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0) -> Tensor:
    """Log-probs ``[B, T]`` of ``targets`` ``[B, T]`` under the distribution a sampler with these
    settings draws from, given raw ``logits`` ``[B, T, V]``.

    As in vLLM and Hugging Face: divide by ``temperature`` (0 or 1: unchanged), truncate to the
    `truncation_keep` set, and renormalise over it. The target is always kept (it was sampled, so
    it was in the set; forcing it guards against ties and rounding at the boundary). Differentiable
    in ``logits``; with neither truncation it equals ``log_softmax(logits / temperature)``.
    """
    logits = logits.float()
    if temperature not in (0, 1):
        logits = logits / temperature
    keep = truncation_keep(logits, top_p, top_k, ranked=True)  # the trainer's forward is eager
    if keep is not None:
        keep.scatter_(-1, targets.unsqueeze(-1), True)
        logits = logits.masked_fill(~keep, -math.inf)
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


MISMATCH_ALARM_KL = 0.01
"""Mismatch KL (k1, per token) above which an uncorrected run is warned: float32 on both sides
measures 0 here, bf16 on SmolLM2-135M 0.028 (its per-token ratios 0.43-1.85)."""


def mismatch_warning(kl_k1: float, correction: str, precision: str = "") -> str | None:
    """What to tell a run whose sampler and trainer disagree by more than `MISMATCH_ALARM_KL`
    while nothing corrects for it, or None."""
    if correction != "none" or not kl_k1 > MISMATCH_ALARM_KL:
        return None
    why = " (bf16 rounds the two forwards differently)" if precision == "bf16" else ""
    return (f"the sampler's and the trainer's log-probs of the sampled tokens differ: mismatch KL {kl_k1:.3g} per token{why}; "
            "the importance ratio is biased: set algo.correction=tis (or mis), or model.precision=fp32")
