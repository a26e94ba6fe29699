"""The policy objective: one pure function over registered parts, returning ``(loss, stats)``.

    ratio -> policy loss (surrogate) x correction weights -> + KL to the reference -> - entropy bonus
      -> 0 on tokens a correction rejected -> aggregation (over the loss mask, rejected tokens included)

Policy losses live in the `POLICY_LOSSES` registry. Each maps a `PolicyLossInputs` (``[B, T]``
tensors) and its own keyword arguments to a ``[B, T]`` token loss and statistics. The arguments'
defaults are the loss's settings; ``algo.policy_loss: {name: NAME, ARG: VALUE}`` overrides them
(checked against the signature, `rlvr.algos.parts`):

- ``clipped``: PPO's surrogate ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``, with optional
  dual clipping of negative advantages (``max(., c A)``, Ye et al. 2020);
- ``pg``: the plain policy gradient ``-A log pi`` (GPG, Chu et al. 2025; no ratio, no clipping);
- ``cispo``: CISPO (MiniMax-M1, Chen et al. 2025): ``-sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi``,
  the importance weight is clipped and detached, so no token's gradient is ever dropped;
- ``decoupled``: decoupled PPO (Hilton et al. 2022; AReaL, Fu et al. 2025) for off-policy samples:
  ``-(pi_prox / pi_behav) min(u A, clip(u, 1 - eps_low, 1 + eps_high) A)`` with ``u = pi / pi_prox``.
  The behaviour policy (the engine that sampled the token, perhaps several updates ago) only
  weights the token; the trust region is taken around the proximal policy (the policy before this
  update), not around the stale behaviour policy. A loss that reads the behaviour policy declares it
  (``fn.takes_behaviour = True``): it then gets the proximal log-probs as ``old_logp`` and the
  engine's as ``behaviour_logp``.

A new loss is one registered function, here or in a package that registers it through the
``rlvr.algos`` entry-point group; its hyperparameters are its keyword arguments. `policy_objective` aggregates with a `Normalizer` of
whole-batch totals, so its gradient does not depend on how the batch is split into micro-batches
or processes (tested on the whole objective).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envs.registry import Registry
from rlvr.algos.aggregation import AGGREGATIONS, Normalizer
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.parts import ALGOS_GROUP, argument_bounds, check_output
from rlvr.algos.ratio import RATIOS
from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:
    torch = lazy_module("torch")

POLICY_LOSSES: Registry = Registry("policy loss", entry_point_group=ALGOS_GROUP, versioned=False)


@dataclass
class PolicyLossInputs:
    """Shapes ``[B, T]``.

    Attributes:
        logp: Log-probs of the sampled tokens under the current policy (with grad).
        old_logp: The same under the policy that generated them (no grad).
        ratio: The importance ratio ``pi / pi_old`` from the ratio registry (with grad).
        advantages: Token advantages.
        mask: 1.0 on completion tokens of valid sequences.
        behaviour_logp: For a loss that ``takes_behaviour``: the log-probs of the engine that sampled
            the tokens (no grad); ``old_logp`` is then the proximal policy's. None: the same as ``old_logp``.
    """

    logp: Tensor
    old_logp: Tensor
    ratio: Tensor
    advantages: Tensor
    mask: Tensor
    behaviour_logp: Tensor | None = None


def _bounds(clip_low: float | None, clip_high: float | None) -> tuple[float, float]:
    return (1.0 - clip_low if clip_low is not None else 0.0, 1.0 + clip_high if clip_high is not None else float("inf"))


def _ratio_stats(r: Tensor, adv: Tensor, mask: Tensor, lo: float, hi: float) -> dict[str, float]:
    """Clip fractions (tokens whose clipped branch is active: below ``lo`` with A < 0, above
    ``hi`` with A > 0) and ratio mean/min/max over the mask."""
    n = mask.sum().clamp(min=1)
    r = r.detach()
    return {
        "clip_frac_low": float(((r < lo) & (adv < 0)).float().mul(mask).sum() / n),
        "clip_frac_high": float(((r > hi) & (adv > 0)).float().mul(mask).sum() / n),
        "ratio_mean": float((r * mask).sum() / n),
        "ratio_min": float(r.masked_fill(mask == 0, float("inf")).min()) if mask.any() else 1.0,
        "ratio_max": float(r.masked_fill(mask == 0, float("-inf")).max()) if mask.any() else 1.0,
    }


@POLICY_LOSSES.register("clipped")
@argument_bounds(clip_low={"ge": 0, "le": 1}, clip_high={"ge": 0}, dual_clip={"gt": 1})
def clipped_surrogate(inp: PolicyLossInputs, clip_low: float | None = 0.2, clip_high: float | None = 0.2,
                      dual_clip: float | None = None) -> tuple[Tensor, dict[str, float]]:
    """PPO's clipped surrogate per token ``[B, T]`` and ``{clip_frac_low, clip_frac_high, ratio_mean,
    ratio_min, ratio_max}``. ``clip_low``/``clip_high`` are the epsilons (None = no clipping on that
    side); ``dual_clip`` is the constant c > 1 bounding the loss of negative advantages."""
    adv, ratio = inp.advantages, inp.ratio
    lo, hi = _bounds(clip_low, clip_high)
    loss = -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
    if dual_clip:
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    return loss, _ratio_stats(ratio, adv, inp.mask, lo, hi)


@POLICY_LOSSES.register("pg")
@argument_bounds(clip_low={"ge": 0, "le": 1}, clip_high={"ge": 0}, dual_clip={"gt": 1})
def plain_policy_gradient(inp: PolicyLossInputs, clip_low: float | None = None, clip_high: float | None = None,
                          dual_clip: float | None = None) -> tuple[Tensor, dict[str, float]]:
    """GPG: ``-A log pi`` per token ``[B, T]``, no ratio and no clipping (a single on-policy step)."""
    return -inp.advantages * inp.logp, {}


@POLICY_LOSSES.register("cispo")
@argument_bounds(clip_low={"ge": 0, "le": 1}, clip_high={"ge": 0}, dual_clip={"gt": 1})
def cispo(inp: PolicyLossInputs, clip_low: float | None = None, clip_high: float | None = 3.0,
          dual_clip: float | None = None) -> tuple[Tensor, dict[str, float]]:
    """CISPO: ``-sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi`` per token ``[B, T]``. The clipped
    weight is a constant, so the gradient of every token is ``A * w * grad log pi`` with ``w``
    bounded: large ratios are tempered, never dropped. ``clip_low=None`` leaves the weight
    unbounded below and ``clip_high=3`` caps the weight at 4: the MiniMax-M1 setting (the defaults)."""
    lo, hi = _bounds(clip_low, clip_high)
    weight = inp.ratio.detach().clamp(lo, hi)
    stats = _ratio_stats(inp.ratio, inp.advantages, inp.mask, lo, hi)
    # for CISPO a "clipped" token is one whose weight was capped, whatever the advantage's sign
    r, n = inp.ratio.detach(), inp.mask.sum().clamp(min=1)
    stats["clip_frac_low"] = float(((r < lo).float() * inp.mask).sum() / n)
    stats["clip_frac_high"] = float(((r > hi).float() * inp.mask).sum() / n)
    return -weight * inp.advantages * inp.logp, stats


@POLICY_LOSSES.register("decoupled")
@argument_bounds(clip_low={"ge": 0, "le": 1}, clip_high={"ge": 0}, dual_clip={"gt": 1}, behaviour_cap={"gt": 0})
def decoupled_clipped(inp: PolicyLossInputs, clip_low: float | None = 0.2, clip_high: float | None = 0.2,
                      dual_clip: float | None = None, behaviour_cap: float | None = None) -> tuple[Tensor, dict[str, float]]:
    """Decoupled PPO per token ``[B, T]``: the clipped surrogate of ``u = pi / pi_prox`` (``inp.ratio``,
    ``old_logp`` = the proximal policy) times the detached behaviour weight ``w = pi_prox / pi_behav``
    (``behaviour_logp``), truncated at ``behaviour_cap`` (None = not truncated). When behaviour =
    proximal, ``w = 1`` and this is ``clipped``. Statistics: the clipped surrogate's, and
    ``behaviour_weight_mean``/``_max`` and ``behaviour_capped_frac`` over the mask."""
    if behaviour_cap is not None and behaviour_cap <= 0:
        raise ValueError(f"decoupled behaviour_cap must be > 0 (or None), got {behaviour_cap}")
    loss, stats = clipped_surrogate(inp, clip_low, clip_high, dual_clip)
    behaviour = inp.old_logp if inp.behaviour_logp is None else inp.behaviour_logp
    on = inp.mask.bool()
    # where(), not a product: padding may hold -inf, and 0 * inf is nan
    log_w = torch.where(on, (inp.old_logp - behaviour).detach(), torch.zeros_like(inp.mask))
    capped = torch.zeros_like(on)
    if behaviour_cap is not None:
        capped = on & (log_w > math.log(behaviour_cap))
        log_w = log_w.clamp(max=math.log(behaviour_cap))
    weight = log_w.exp()
    n = inp.mask.sum().clamp(min=1)
    stats |= {"behaviour_weight_mean": float((weight * inp.mask).sum() / n),
              "behaviour_weight_max": float(weight.masked_fill(~on, float("-inf")).max()) if on.any() else 1.0,
              "behaviour_capped_frac": float(capped.float().sum() / n)}
    return weight * loss, stats


decoupled_clipped.takes_behaviour = True  # type: ignore[attr-defined]


def takes_behaviour(policy_loss: str) -> bool:
    """Whether the registered policy loss reads the behaviour policy apart from the proximal one."""
    return bool(getattr(POLICY_LOSSES.get(policy_loss), "takes_behaviour", False))


def ObjectiveParts(ratio: str = "token", policy_loss: str = "clipped", clip_low: float | None = 0.2, clip_high: float | None = 0.2,
                   dual_clip: float | None = None, aggregation: str = "token_mean", kl_estimator: str = "k3", kl_coef: float = 0.0,
                   entropy_coef: float = 0.0) -> Any:
    """Compatibility alias (the objective's parts as flat keywords, before ``algo.*`` sections): the
    `rlvr.algos.config.AlgoConfig` with these parts, the clip settings as the policy loss's
    arguments and ``kl_coef`` as the KL's weight in the loss. Prefer ``algo_config(...)``."""
    from rlvr.algos.config import algo_config

    return algo_config(ratio=ratio, policy_loss={"name": policy_loss, "clip_low": clip_low, "clip_high": clip_high, "dual_clip": dual_clip},
                       aggregation=aggregation, kl={"mode": "loss" if kl_coef else "monitor", "estimator": kl_estimator, "coef": kl_coef},
                       entropy_coef=entropy_coef, quiet=True)


@dataclass
class ObjectiveInputs:
    """One micro-batch. Shapes ``[B, T]``; ``norm`` holds totals of the whole optimizer batch.

    Attributes:
        logp: Current log-probs of the sampled tokens (with grad).
        old_logp: Log-probs under the behaviour policy (no grad).
        advantages: Token advantages.
        mask: 1.0 where a token counts (completion tokens of valid sequences; 0 for observation
            tokens of multi-turn episodes and for sequences left out of the loss).
        norm: Whole-batch totals for the aggregation.
        ref_logp: Reference log-probs (no grad), or None when no reference is loaded.
        entropy: Entropy of each next-token distribution (with grad when ``entropy_coef != 0``).
        weights: Per-token weights of the policy loss (no grad), e.g. a rollout/trainer mismatch
            correction (`rlvr.algos.correction`); None = 1.
        keep: 1.0 on the tokens of ``mask`` a mismatch correction kept, 0 on those it rejected
            (MIS, `rlvr.algos.correction.masked_is`); None = all kept. A rejected token is a
            zero-loss token: its whole loss (surrogate, KL and entropy terms) is 0, it is left out
            of the statistics and of a sequence-level ratio, and it stays in ``mask``, so in every
            aggregation mode it keeps its place in the normalisers (token_mean's token count, its
            sequence's token count, and a fully rejected sequence in the sequence count).
        behaviour_logp: The sampling engine's log-probs (no grad), given to a policy loss that
            ``takes_behaviour`` (``old_logp`` is then the proximal policy's); None otherwise.
    """

    logp: Tensor
    old_logp: Tensor
    advantages: Tensor
    mask: Tensor
    norm: Normalizer
    ref_logp: Tensor | None = None
    entropy: Tensor | None = None
    weights: Tensor | None = None
    keep: Tensor | None = None
    behaviour_logp: Tensor | None = None


def policy_objective(inp: ObjectiveInputs, parts: Any) -> tuple[Tensor, dict[str, float]]:
    """The scalar loss of one micro-batch (its share of the whole-batch loss) and statistics:
    ``policy_loss_sum`` (this micro-batch's share of the aggregated surrogate alone; the shares add
    up to the batch's), ``kl`` and ``entropy`` (token means over this micro-batch) and the policy
    loss's own (clip fractions, ratio statistics, over the kept tokens).

    ``parts`` is the resolved algorithm (`rlvr.algos.config.AlgoConfig`): its ``ratio``,
    ``policy_loss`` and ``aggregation`` sections, ``kl`` (the estimator; the weight in the loss is
    ``kl_loss_coef``) and ``entropy_coef``."""
    mask = inp.mask
    kept = mask if inp.keep is None else mask * inp.keep
    ratio = RATIOS.get(parts.ratio.name)(inp.logp, inp.old_logp, kept, **parts.ratio.params)
    loss_inputs = PolicyLossInputs(inp.logp, inp.old_logp, ratio, inp.advantages, kept, behaviour_logp=inp.behaviour_logp)
    out = POLICY_LOSSES.get(parts.policy_loss.name)(loss_inputs, **parts.policy_loss.params)
    check_output("policy loss", parts.policy_loss.name, out, tuple(mask.shape), with_stats=True)
    surrogate, stats = out
    if inp.weights is not None:
        surrogate = surrogate * inp.weights
    aggregate = functools.partial(AGGREGATIONS.get(parts.aggregation.name), **parts.aggregation.params)
    total = surrogate
    n = kept.sum().clamp(min=1)
    if inp.ref_logp is not None:
        kl = KL_ESTIMATORS.get(parts.kl.estimator)(inp.logp, inp.ref_logp)
        stats["kl"] = float((kl.detach() * kept).sum() / n)
        if parts.kl_loss_coef:
            total = total + parts.kl_loss_coef * kl
    if inp.entropy is not None:
        stats["entropy"] = float((inp.entropy.detach() * kept).sum() / n)
        if parts.entropy_coef:
            total = total - parts.entropy_coef * inp.entropy
    if inp.keep is not None:  # rejected tokens: zero loss, same normalisers (where(): a rejected token's loss may be inf)
        surrogate = torch.where(kept.bool(), surrogate, torch.zeros_like(surrogate))
        total = torch.where(kept.bool(), total, torch.zeros_like(total))
    stats["policy_loss_sum"] = float(aggregate(surrogate.detach(), mask, inp.norm))
    return aggregate(total, mask, inp.norm), stats
