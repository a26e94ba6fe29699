"""Algorithms as data: each preset is a table of settings over the registered parts.

A config names a preset and may override any setting; an override always wins (a preset never
silently replaces what the user wrote). `resolve_algorithm` validates the result against the
registries and returns a fully specified `Algorithm`.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Literal

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.aggregation import AGGREGATIONS
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.ratio import RATIOS
from rlvr.config import ConfigError, help_field

KLMode = Literal["loss", "reward", "off"]


@dataclass(frozen=True)
class Algorithm:
    """A fully resolved algorithm (every setting decided). See `AlgoConfig` for the meanings."""

    preset: str
    advantage: str
    advantage_kwargs: dict[str, Any]
    ratio: str
    clip_low: float | None
    clip_high: float | None
    dual_clip: float | None
    loss_agg: str
    kl_mode: KLMode
    kl_estimator: str
    kl_coef: float
    entropy_coef: float

    @property
    def needs_reference(self) -> bool:
        """Whether a frozen reference model must be loaded."""
        return self.kl_mode != "off" and self.kl_coef > 0


# Defaults from the papers. Keys are AlgoConfig fields.
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": dict(  # DeepSeekMath (Shao et al. 2024)
        advantage="grpo", ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="seq_mean_token_mean",
        kl_mode="loss", kl_estimator="k3", kl_coef=0.04, entropy_coef=0.0,
    ),
    "dr_grpo": dict(  # Understanding R1-Zero-like training (Liu et al. 2025)
        advantage="mean_centered", ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="seq_mean_token_sum_norm",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0, entropy_coef=0.0,
    ),
    "rloo": dict(  # Ahmadian et al. 2024, with PPO-style clipping
        advantage="rloo", ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="token_mean",
        kl_mode="off", kl_estimator="k1", kl_coef=0.0, entropy_coef=0.0,
    ),
    "gspo": dict(  # Group Sequence Policy Optimization (Zheng et al. 2025)
        advantage="grpo", ratio="sequence", clip_low=3e-4, clip_high=4e-4, loss_agg="seq_mean",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0, entropy_coef=0.0,
    ),
    "gpg": dict(  # Group Policy Gradient (Chu et al. 2025): plain policy gradient, no reference
        advantage="mean_centered", ratio="none", clip_low=None, clip_high=None, loss_agg="token_mean",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0, entropy_coef=0.0,
    ),
}


@dataclass
class AlgoConfig:
    """Which algorithm, and any settings that override its preset (None = the preset's value)."""

    preset: str = help_field("grpo", "Named algorithm whose settings are the defaults: " + ", ".join(PRESETS))
    advantage: str | None = help_field(None, "Advantage estimator (registry rlvr.algos.advantages)")
    advantage_kwargs: dict[str, Any] | None = help_field(None, "Extra arguments of the estimator, e.g. {eps: 1e-6} for grpo")
    ratio: str | None = help_field(None, "Importance ratio: token | sequence | sequence_token | none")
    clip_low: float | None = help_field(None, "Lower clip epsilon: ratios below 1 - clip_low are clipped")
    clip_high: float | None = help_field(None, "Upper clip epsilon: ratios above 1 + clip_high are clipped (DAPO's clip-higher: 0.28)")
    dual_clip: float | None = help_field(None, "Dual-clip constant c > 1 for negative advantages (0 = off)")
    loss_agg: str | None = help_field(None, "Loss aggregation: seq_mean_token_mean | token_mean | seq_mean_token_sum_norm | seq_mean")
    kl_mode: KLMode | None = help_field(None, "KL to the reference: in the loss, subtracted from the reward, or off (no reference model loaded)")
    kl_estimator: str | None = help_field(None, "KL estimator: k1 | k2 | k3")
    kl_coef: float | None = help_field(None, "KL coefficient beta")
    entropy_coef: float | None = help_field(None, "Entropy bonus coefficient (0 = off; entropy is logged either way)")


def resolve_algorithm(cfg: AlgoConfig) -> Algorithm:
    """Fill unset fields from the preset, check every part exists, warn on combinations the papers advise against."""
    if cfg.preset not in PRESETS:
        raise ConfigError(f"unknown algo.preset {cfg.preset!r}; presets: {', '.join(PRESETS)}")
    settings = dict(PRESETS[cfg.preset])
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name != "preset" and value is not None:
            settings[f.name] = value
    if cfg.kl_mode == "off" and cfg.kl_coef is None:
        settings["kl_coef"] = 0.0  # turning KL off also drops the preset's coefficient
    settings.setdefault("advantage_kwargs", {})
    settings.setdefault("dual_clip", None)
    if settings["dual_clip"] is not None and settings["dual_clip"] <= 0:
        settings["dual_clip"] = None
    for key, registry in (("advantage", ADVANTAGES), ("ratio", RATIOS), ("loss_agg", AGGREGATIONS), ("kl_estimator", KL_ESTIMATORS)):
        if settings[key] not in registry:
            raise ConfigError(f"algo.{key} {settings[key]!r} is not registered; choose one of {', '.join(registry.ids())}")
    if settings["dual_clip"] is not None and settings["dual_clip"] <= 1:
        raise ConfigError(f"algo.dual_clip must be > 1 (or 0 to turn it off), got {settings['dual_clip']}")
    algo = Algorithm(preset=cfg.preset, **settings)
    for message in combination_warnings(algo):
        warnings.warn(message, UserWarning, stacklevel=2)
    return algo


def combination_warnings(algo: Algorithm) -> list[str]:
    """Settings that run but that the papers warn against."""
    out = []
    if algo.ratio in ("sequence", "sequence_token") and algo.loss_agg != "seq_mean":
        out.append(f"ratio={algo.ratio} with loss_agg={algo.loss_agg}: GSPO's sequence ratio is meant for per-sequence aggregation (seq_mean); token-level aggregation re-weights sequences by length")
    if algo.ratio in ("sequence", "sequence_token") and (algo.clip_high or 0) > 0.01:
        out.append(f"sequence-level ratio with clip_high={algo.clip_high}: GSPO clips sequence ratios at ~3e-4/4e-4; token-scale epsilons (0.2) barely clip")
    if algo.ratio == "token" and algo.clip_high is not None and algo.clip_high < 0.01:
        out.append(f"per-token ratio with clip_high={algo.clip_high}: such tiny epsilons are GSPO's sequence-level values and clip almost every token")
    if algo.kl_mode == "off" and algo.kl_coef > 0:
        out.append(f"kl_coef={algo.kl_coef} has no effect with kl_mode=off")
    return out
