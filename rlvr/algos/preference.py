"""Preference losses: DPO and its variants on pairs, KTO on unpaired pass/fail labels.

Everything is a function of sequence-level log-ratios to a frozen reference,

    r(x, y) = log pi_theta(y | x) - log pi_ref(y | x)        (divided by |y| with length normalisation)

and ``beta * r`` is the *implicit reward* of a completion. Losses live in the `PREFERENCE_LOSSES`
registry. A **paired** loss maps the margin ``h = r(x, y_w) - r(x, y_l)`` of each pair (chosen
``y_w``, rejected ``y_l``) to a loss ``[P]``:

- ``sigmoid``: DPO (Rafailov et al. 2023), ``-log sigma(beta h)``; with label smoothing ``eps`` it
  is conservative DPO (cDPO, Mitchell 2023): ``-(1 - eps) log sigma(beta h) - eps log sigma(-beta h)``;
- ``robust``: robust DPO (rDPO, Chowdhury et al. 2024), unbiased when a fraction ``eps`` of the
  labels is flipped: ``[-(1 - eps) log sigma(beta h) + eps log sigma(-beta h)] / (1 - 2 eps)``;
- ``ipo``: IPO (Azar et al. 2023), ``(h - 1 / (2 beta))^2`` (``beta`` is the paper's tau);
- ``hinge``: SLiC-HF (Zhao et al. 2023), ``max(0, 1 - beta h)``.

An **unpaired** loss maps each labelled completion to a loss ``[N]``: ``kto`` (Ethayarajh et al.
2024) compares the implicit reward with a reference point ``z_ref``, the batch's KL estimate
between policy and reference on *mismatched* pairs (the completion of one prompt read after
another prompt; `kto_reference_point`), detached and clamped at 0:

    desirable:    lambda_D (1 - sigma(beta (r - z_ref)))
    undesirable:  lambda_U (1 - sigma(beta (z_ref - r)))

The objectives (`pair_objective`, `unpaired_objective`) average the loss over the examples of the
WHOLE optimizer batch (all micro-batches, all processes), whose counts they receive, so the
gradient does not depend on how the batch is split. Their statistics are ``_sum`` keys: each
micro-batch's share of a whole-batch mean, which add up over micro-batches (see
`rlvr.train.accumulation.StatsAccumulator`) and over processes (`PAIR_STATS` and `UNPAIRED_STATS` name
them, so every process can join one sum).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from envs.registry import Registry
from rlvr.algos.parts import ALGOS_GROUP
from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
    from torch import Tensor
else:
    torch = lazy_module("torch")
    F = lazy_module("torch.nn.functional")

PREFERENCE_LOSSES: Registry = Registry("preference loss", entry_point_group=ALGOS_GROUP, versioned=False)
# the statistics of `pair_objective` and `unpaired_objective` (each logged with a ``_sum`` suffix: a share of the batch mean)
PAIR_STATS = ("reward_accuracy", "reward_chosen", "reward_rejected", "margin", "logp_chosen", "logp_rejected")
UNPAIRED_STATS = ("reward_desirable", "reward_undesirable", "logp_desirable", "logp_undesirable")


@dataclass(frozen=True)
class LossParams:
    """Attributes:
        beta: Scale of the implicit reward (DPO's beta, IPO's tau, KTO's beta).
        label_smoothing: ``eps``, the assumed rate of flipped labels (sigmoid: cDPO; robust: rDPO).
        desirable_weight / undesirable_weight: KTO's ``lambda_D`` / ``lambda_U``.
    """

    beta: float
    label_smoothing: float = 0.0
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0


@dataclass(frozen=True)
class PreferenceLoss:
    """A registered loss: ``paired`` ones take margins ``[P]``; unpaired ones take log-ratios
    ``[N]``, desirable labels ``[N]`` and the reference point."""

    fn: Callable[..., Tensor]
    paired: bool

    def __call__(self, *args, **kwargs) -> Tensor:
        return self.fn(*args, **kwargs)


def _register(name: str, paired: bool = True):
    def add(fn):
        PREFERENCE_LOSSES.register(name, PreferenceLoss(fn, paired), description=(fn.__doc__ or "").strip().splitlines()[0])
        return fn
    return add


@_register("sigmoid")
def sigmoid_loss(margin: Tensor, p: LossParams) -> Tensor:
    """DPO: ``-log sigma(beta h)``, cDPO with label smoothing. ``margin`` ``[P]`` -> ``[P]``."""
    eps = p.label_smoothing
    return -(1 - eps) * F.logsigmoid(p.beta * margin) - eps * F.logsigmoid(-p.beta * margin)


@_register("robust")
def robust_loss(margin: Tensor, p: LossParams) -> Tensor:
    """rDPO: the sigmoid loss de-biased for a label-flip rate ``eps`` < 0.5. ``[P]`` -> ``[P]``."""
    eps = p.label_smoothing
    return (-(1 - eps) * F.logsigmoid(p.beta * margin) + eps * F.logsigmoid(-p.beta * margin)) / (1 - 2 * eps)


@_register("ipo")
def ipo_loss(margin: Tensor, p: LossParams) -> Tensor:
    """IPO: ``(h - 1 / (2 beta))^2``, a squared loss that keeps the margin finite. ``[P]`` -> ``[P]``."""
    return (margin - 1 / (2 * p.beta)) ** 2


@_register("hinge")
def hinge_loss(margin: Tensor, p: LossParams) -> Tensor:
    """SLiC-HF: ``max(0, 1 - beta h)``. ``[P]`` -> ``[P]``."""
    return torch.relu(1 - p.beta * margin)


@_register("kto", paired=False)
def kto_loss(logratio: Tensor, desirable: Tensor, z_ref: float, p: LossParams) -> Tensor:
    """KTO: value of each completion's implicit reward against the reference point ``z_ref``.
    ``logratio`` ``[N]``, ``desirable`` ``[N]`` bool -> ``[N]``."""
    good = p.desirable_weight * (1 - torch.sigmoid(p.beta * (logratio - z_ref)))
    bad = p.undesirable_weight * (1 - torch.sigmoid(p.beta * (z_ref - logratio)))
    return torch.where(desirable, good, bad)


@dataclass
class SequenceLogps:
    """Log-probabilities of whole completions. Shapes ``[N]``.

    Attributes:
        policy: ``sum_t log pi_theta(y_t | x, y_<t)`` over the completion's tokens (with grad).
        reference: The same under the frozen reference (no grad).
        tokens: Completion lengths in tokens.
    """

    policy: Tensor
    reference: Tensor
    tokens: Tensor

    def logratio(self, length_norm: bool) -> Tensor:
        """``r(x, y)`` ``[N]``, per token when ``length_norm``."""
        r = self.policy - self.reference
        return r / self.tokens.clamp(min=1) if length_norm else r


def pair_objective(chosen: SequenceLogps, rejected: SequenceLogps, loss: PreferenceLoss, p: LossParams, length_norm: bool,
                   total_pairs: float) -> tuple[Tensor, dict[str, float]]:
    """This micro-batch's share of the mean pair loss over ``total_pairs`` pairs, and statistics
    (shares of whole-batch means): ``reward_accuracy`` (chosen reward above rejected), implicit
    rewards ``reward_chosen`` / ``reward_rejected`` (``beta * r``) and their ``margin``, and the
    policy's summed log-probs ``logp_chosen`` / ``logp_rejected``. Inputs ``[P]``."""
    r_w, r_l = chosen.logratio(length_norm), rejected.logratio(length_norm)
    per_pair = loss(r_w - r_l, p)
    n = max(total_pairs, 1.0)
    rw, rl = p.beta * r_w.detach(), p.beta * r_l.detach()
    values = ((rw > rl).float(), rw, rl, rw - rl, chosen.policy.detach(), rejected.policy.detach())
    return per_pair.sum() / n, {f"{k}_sum": float(v.sum()) / n for k, v in zip(PAIR_STATS, values)}


def unpaired_objective(seqs: SequenceLogps, desirable: Tensor, z_ref: float, loss: PreferenceLoss, p: LossParams, length_norm: bool,
                       totals: Tensor) -> tuple[Tensor, dict[str, float]]:
    """This micro-batch's share of the mean loss over the whole batch's completions, and
    statistics (shares of whole-batch means): implicit rewards and summed log-probs of the
    desirable and undesirable completions. ``totals`` = ``[completions, desirable, undesirable]``
    of the whole batch; ``seqs`` and ``desirable`` ``[N]``."""
    r = seqs.logratio(length_norm)
    per_example = loss(r, desirable, z_ref, p)
    n, n_good, n_bad = (max(float(t), 1.0) for t in totals)
    good, bad = desirable.float(), (~desirable).float()
    reward, logp = p.beta * r.detach(), seqs.policy.detach()
    values = (float((reward * good).sum()) / n_good, float((reward * bad).sum()) / n_bad,
              float((logp * good).sum()) / n_good, float((logp * bad).sum()) / n_bad)
    return per_example.sum() / n, {f"{k}_sum": v for k, v in zip(UNPAIRED_STATS, values)}


def kto_reference_point(mismatched_logratio_sum: float, count: float) -> float:
    """KTO's ``z_ref``: the mean log-ratio of mismatched (prompt, completion) pairs over the whole
    batch, an estimate of KL(pi_theta || pi_ref), clamped at 0 (a constant: no gradient)."""
    return max(mismatched_logratio_sum / count, 0.0) if count > 0 else 0.0


def mismatched_partners(prompt_keys: list[object]) -> Tensor | None:
    """``[N]`` index of the completion each row is read with for the KL estimate: row ``i``'s
    partner is ``(i + s) mod N`` for the smallest shift ``s`` under which no row meets a
    completion of its own prompt. None when no shift does (every row has the same prompt)."""
    n = len(prompt_keys)
    ids = {k: i for i, k in enumerate(dict.fromkeys(prompt_keys))}
    key = torch.tensor([ids[k] for k in prompt_keys])
    for shift in range(1, n):
        partner = (torch.arange(n) + shift) % n
        if bool((key != key[partner]).all()):
            return partner
    return None


__all__ = ["LossParams", "PAIR_STATS", "PREFERENCE_LOSSES", "UNPAIRED_STATS", "PreferenceLoss", "SequenceLogps", "kto_loss", "kto_reference_point", "mismatched_partners",
           "pair_objective", "unpaired_objective"]
