"""Algorithms as data: each preset is a table of settings over the registered parts.

A config names a preset and may override any setting; an override always wins (a preset never
silently replaces what the user wrote). `resolve_algorithm` validates the result against the
registries and returns a fully specified `Algorithm`.

The table has three kinds of entries:

- the **objective's parts** (advantage estimator, importance ratio, policy loss, clipping, loss
  aggregation, KL estimator and where the KL goes, entropy bonus), flat under ``algo.*``;
- **sampling and shaping** (dynamic sampling, an accuracy band, DAPO's overlong shaping);
- **learned scorers**, each a nested section that is off unless a preset or the user turns it on:
  PRIME's implicit PRM (``algo.prm.*``) and PPO's critic (``algo.critic.*``);
- the **preference** settings (``algo.preference.*``: loss, beta, pairs per group...) of the presets
  that run the ``preference`` recipe (DPO, online DPO, KTO), which have no advantage, ratio or
  clipping: those parts are None for them, and setting one is an error.

A preset also names its **recipe** (the training procedure that runs it, see
`rlvr.train.recipes`) and its default number of passes over a rollout batch.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from rlvr.algos.advantages import ADVANTAGES, estimator_parameters
from rlvr.algos.correction import CORRECTIONS
from rlvr.algos.aggregation import AGGREGATIONS
from rlvr.algos.filters import GroupFilter
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.objective import POLICY_LOSSES
from rlvr.algos.preference import PREFERENCE_LOSSES
from rlvr.algos.ratio import RATIOS
from rlvr.config import ConfigError, help_field

KLMode = Literal["loss", "reward", "monitor", "off"]
PRMUpdate = Literal["before", "after", "off"]
PreferenceSource = Literal["pairs", "online"]
Pairing = Literal["random", "disjoint"]


@dataclass(frozen=True)
class PRMSettings:
    """PRIME's implicit process reward model (resolved). See `PRMConfig` for the meanings."""

    beta: float
    lr_scale: float
    update: PRMUpdate
    init: str | None


@dataclass(frozen=True)
class CriticSettings:
    """PPO's value model (resolved). See `CriticConfig` for the meanings."""

    init: str | None
    lr_scale: float
    value_clip: float | None
    warmup_steps: int


@dataclass(frozen=True)
class PreferenceSettings:
    """The preference recipe's settings (resolved). See `PreferenceConfig` for the meanings."""

    loss: str
    beta: float
    label_smoothing: float
    length_norm: bool
    source: PreferenceSource
    pairs_per_group: int
    pairing: Pairing
    desirable_weight: float
    undesirable_weight: float
    reference_cache: bool


@dataclass(frozen=True)
class Algorithm:
    """A fully resolved algorithm (every setting decided). See `AlgoConfig` for the meanings."""

    preset: str
    recipe: str
    advantage: str | None  # None (with ratio, policy_loss, loss_agg, kl_estimator) for the preference recipe
    advantage_kwargs: dict[str, Any]
    ratio: str | None
    policy_loss: str | None
    clip_low: float | None
    clip_high: float | None
    dual_clip: float | None
    loss_agg: str | None
    kl_mode: KLMode
    kl_estimator: str | None
    kl_coef: float
    ref_update_every: int
    entropy_coef: float
    dynamic_sampling: bool
    accuracy_band: tuple[float, float] | None
    sampling_budget: float
    overlong_buffer_frac: float
    overlong_penalty: float
    mask_truncated: bool
    epochs_per_batch: int
    minibatches: int
    prm: PRMSettings | None
    critic: CriticSettings | None
    preference: PreferenceSettings | None
    correction: CorrectionConfig

    @property
    def kl_active(self) -> bool:
        """Whether a KL term to the reference enters the loss or the reward."""
        return self.kl_mode in ("loss", "reward") and self.kl_coef > 0

    @property
    def needs_reference(self) -> bool:
        """Whether a frozen reference model must be loaded (for the KL, its monitoring, the implicit PRM,
        or a preference loss; offline pairs may read its log-probs from a cache instead)."""
        return self.kl_active or self.kl_mode == "monitor" or self.prm is not None or self.preference is not None

    @property
    def group_filter(self) -> GroupFilter:
        """Which generated groups the training batch keeps (see `rlvr.algos.filters`)."""
        return GroupFilter(self.dynamic_sampling, self.accuracy_band)


# Defaults of the learned scorers when a config turns one on for a preset that has none.
PRM_DEFAULTS: dict[str, Any] = dict(beta=0.05, lr_scale=1.0, update="before", init=None)
CRITIC_DEFAULTS: dict[str, Any] = dict(init=None, lr_scale=5.0, value_clip=0.2, warmup_steps=0)
# DPO's beta 0.1 (Rafailov et al. 2023); one pair per group, each completion in at most one pair
PREFERENCE_DEFAULTS: dict[str, Any] = dict(loss="sigmoid", beta=0.1, label_smoothing=0.0, length_norm=False, source="pairs",
                                           pairs_per_group=1, pairing="disjoint", desirable_weight=1.0, undesirable_weight=1.0,
                                           reference_cache=True)

# Settings every preset starts from (plain GRPO-style sampling: every group, no shaping, no scorer).
_COMMON: dict[str, Any] = dict(
    recipe="policy_gradient", advantage_kwargs={}, policy_loss="clipped", dual_clip=None, entropy_coef=0.0, ref_update_every=0,
    dynamic_sampling=False, accuracy_band=None, sampling_budget=1.0,
    overlong_buffer_frac=0.0, overlong_penalty=1.0, mask_truncated=False,
    epochs_per_batch=1, minibatches=1, prm=None, critic=None, preference=None,
)
# The preference recipe has no advantage, ratio, clipping or explicit KL: beta sets the implicit one.
_PREFERENCE: dict[str, Any] = {**_COMMON, **dict(
    recipe="preference", advantage=None, ratio=None, policy_loss=None, clip_low=None, clip_high=None, loss_agg=None,
    kl_mode="off", kl_estimator=None, kl_coef=0.0,
)}

# Defaults from the papers. Keys are AlgoConfig fields.
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {**_COMMON, **dict(  # DeepSeekMath (Shao et al. 2024)
        advantage="grpo", ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="seq_mean_token_mean",
        kl_mode="loss", kl_estimator="k3", kl_coef=0.04,
    )},
    "dapo": {**_COMMON, **dict(  # DAPO (Yu et al. 2025): clip-higher, token-mean, no KL, dynamic sampling, soft overlong penalty
        advantage="grpo", ratio="token", clip_low=0.2, clip_high=0.28, loss_agg="token_mean",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0,
        dynamic_sampling=True, sampling_budget=3.0,  # the paper samples batches of 3x the prompts until the batch is full
        overlong_buffer_frac=0.2, overlong_penalty=1.0,  # L_cache = 4096 of L_max = 20480 tokens
    )},
    "dr_grpo": {**_COMMON, **dict(  # Understanding R1-Zero-like training (Liu et al. 2025)
        advantage="mean_centered", ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="seq_mean_token_sum_norm",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0,
    )},
    "gspo": {**_COMMON, **dict(  # Group Sequence Policy Optimization (Zheng et al. 2025)
        advantage="grpo", ratio="sequence", clip_low=3e-4, clip_high=4e-4, loss_agg="seq_mean",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0,
    )},
    "prime": {**_COMMON, **dict(  # PRIME (Cui et al. 2025), settings of its reference implementation
        advantage="prime", advantage_kwargs=dict(outcome_coef=5.0, implicit_coef=5.0, verifier_coef=0.0, gamma=1.0, whiten=True),
        ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="token_mean",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0, entropy_coef=0.001,
        accuracy_band=(0.2, 0.8), sampling_budget=4.0,  # keep prompts with accuracy in [0.2, 0.8]; oversample up to 4x
        prm=dict(beta=0.05, lr_scale=2.0, update="before", init=None),  # PRM lr 1e-6 beside policy lr 5e-7
    )},
    "rloo": {**_COMMON, **dict(  # Ahmadian et al. 2024, with PPO-style clipping
        advantage="rloo", ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="token_mean",
        kl_mode="off", kl_estimator="k1", kl_coef=0.0,
    )},
    "reinforce_pp": {**_COMMON, **dict(  # REINFORCE++ (Hu 2025): batch-normalised returns, k1 KL in the reward
        advantage="reinforce_pp", advantage_kwargs=dict(gamma=1.0), ratio="token", clip_low=0.2, clip_high=0.2,
        loss_agg="token_mean", kl_mode="reward", kl_estimator="k1", kl_coef=0.01,  # OpenRLHF's init_kl_coef
    )},
    "reinforce_pp_baseline": {**_COMMON, **dict(  # REINFORCE++-baseline (Hu 2025): group-mean baseline, then batch whitening
        advantage="reinforce_pp_baseline", ratio="token", clip_low=0.2, clip_high=0.2,
        loss_agg="token_mean", kl_mode="loss", kl_estimator="k3", kl_coef=0.01,  # the baseline variant keeps KL in the loss (k3)
    )},
    "gpg": {**_COMMON, **dict(  # Group Policy Gradient (Chu et al. 2025): plain policy gradient, no reference
        advantage="mean_centered", ratio="token", policy_loss="pg", clip_low=None, clip_high=None, loss_agg="token_mean",
        kl_mode="off", kl_estimator="k3", kl_coef=0.0,
    )},
    "cispo": {**_COMMON, **dict(  # CISPO (MiniMax-M1, Chen et al. 2025): clipped, detached IS weight times A log pi
        advantage="grpo", ratio="token", policy_loss="cispo", clip_low=None, clip_high=3.0,  # no lower bound, weight capped at 4
        loss_agg="token_mean", kl_mode="off", kl_estimator="k3", kl_coef=0.0,
    )},
    "grpo_process": {**_COMMON, **dict(  # GRPO with process supervision (DeepSeekMath 4.1.3) on the verifier's step rewards
        advantage="grpo_process", advantage_kwargs=dict(outcome_step=True), ratio="token", clip_low=0.2, clip_high=0.2,
        loss_agg="seq_mean_token_mean", kl_mode="loss", kl_estimator="k3", kl_coef=0.04,
    )},
    "ppo": {**_COMMON, **dict(  # PPO with a learned critic (Schulman et al. 2017; Ouyang et al. 2022 for LMs)
        # gamma 1: the only reward is the verdict at the end, and an answer's worth does not decay with its length;
        # lambda 0.95: the usual bias/variance point of the GAE paper and of RLHF implementations
        advantage="gae", advantage_kwargs=dict(gamma=1.0, lam=0.95, whiten=True),
        ratio="token", clip_low=0.2, clip_high=0.2, loss_agg="token_mean",
        kl_mode="reward", kl_estimator="k1", kl_coef=0.05,  # per-token k1 penalty in the reward, as in InstructGPT
        epochs_per_batch=2, minibatches=2,  # several optimizer steps per rollout batch: ratios and value clipping act
        critic=dict(CRITIC_DEFAULTS),
    )},
    "dpo": {**_PREFERENCE, **dict(  # DPO (Rafailov et al. 2023) on offline pairs: verified-correct over verified-wrong (pairs.path)
        preference=dict(PREFERENCE_DEFAULTS),
    )},
    "online_dpo": {**_PREFERENCE, **dict(  # online (iterative) DPO: pairs from the current policy's groups each step
        dynamic_sampling=True, sampling_budget=3.0,  # DAPO's group filter keeps groups with a pass and a fail, refilling as DAPO does
        preference={**PREFERENCE_DEFAULTS, "source": "online", "pairs_per_group": 2},
    )},
    "kto": {**_PREFERENCE, **dict(  # KTO (Ethayarajh et al. 2024) on the verifier's pass/fail labels of the current policy's completions
        preference={**PREFERENCE_DEFAULTS, "loss": "kto", "source": "online"},  # beta 0.1, lambda_D = lambda_U = 1 (the paper's defaults)
    )},
}


@dataclass
class PRMConfig:
    """PRIME's implicit process reward model: a causal LM read against a frozen copy of its
    initial weights, trained online on the verifier's outcome labels (None = the preset's value)."""

    enabled: bool | None = help_field(None, "Train the implicit PRM and give its token rewards to the advantage estimator (on for prime)")
    beta: float | None = help_field(None, "Token reward = beta * (log pi_phi - log pi_ref) (PRIME: 0.05)", gt=0)
    lr_scale: float | None = help_field(None, "PRM learning rate as a multiple of optim.lr (PRIME: 2, i.e. 1e-6 beside 5e-7)", gt=0)
    update: PRMUpdate | None = help_field(None, "Update the PRM on each batch's outcome labels before scoring it (PRIME), after, or never (frozen PRM)")
    init: str | None = help_field(None, "Model to initialise the PRM and its reference from (default: model.name_or_path, the policy's starting point)")


@dataclass
class CriticConfig:
    """PPO's critic: a value head on a language-model backbone with its own optimizer, trained by
    (clipped) regression on the GAE returns (None = the preset's value)."""

    enabled: bool | None = help_field(None, "Train a critic and give its values to the advantage estimator (on for ppo; needs advantage=gae)")
    init: str | None = help_field(None, "Backbone to start from: a causal LM or a saved critic (default: model.name_or_path, the policy's starting weights; separate weights)")
    lr_scale: float | None = help_field(None, "Critic learning rate as a multiple of optim.lr (default 5: its value head starts from scratch)", gt=0)
    value_clip: float | None = help_field(None, "Clip new values to old +- this in the value loss (PPO2; 0 = off)", ge=0)
    warmup_steps: int | None = help_field(None, "Training steps at the start that update only the critic (the policy waits for useful values)", ge=0)


@dataclass
class PreferenceConfig:
    """The preference recipe (presets dpo, online_dpo, kto): which loss, and where its examples
    come from (None = the preset's value). Only valid with a preset that runs that recipe."""

    loss: str | None = help_field(None, "Preference loss (registry rlvr.algos.preference): " + ", ".join(PREFERENCE_LOSSES.ids())
                                  + " (sigmoid = DPO, cDPO with label_smoothing; robust = rDPO; ipo; hinge = SLiC; kto = KTO, unpaired)")
    beta: float | None = help_field(None, "Implicit reward scale beta (DPO 0.1; IPO's tau; KTO 0.1)", gt=0)
    label_smoothing: float | None = help_field(None, "Assumed rate of flipped labels eps for sigmoid (cDPO) and robust (rDPO); must be < 0.5", ge=0, lt=0.5)
    length_norm: bool | None = help_field(None, "Divide each completion's log-ratio by its length in tokens (per-token implicit rewards)")
    source: PreferenceSource | None = help_field(None, "pairs: a pairs file (pairs.path; dpo); online: sample groups from the current policy each step and verify them (online_dpo, kto)")
    pairs_per_group: int | None = help_field(None, "Online pairs: most pairs formed from one group's passing and failing completions", gt=0)
    pairing: Pairing | None = help_field(None, "Which pairs: disjoint (each completion in at most one pair) or random (any pass x fail combination, without repeats)")
    desirable_weight: float | None = help_field(None, "KTO lambda_D: weight of desirable (passing) completions", gt=0)
    undesirable_weight: float | None = help_field(None, "KTO lambda_U: weight of undesirable (failing) completions", gt=0)
    reference_cache: bool | None = help_field(None, "Offline pairs: compute the reference's log-probs once before training (with the policy's starting weights), cache them in the run directory and hold no reference model")


@dataclass
class CorrectionConfig:
    """Correcting the mismatch between the engine that sampled and the trainer (`rlvr.algos.correction`):
    a reweighting of the policy loss by the trainer/engine probability ratio of the sampled tokens."""

    kind: str = help_field("none", "none (measure the mismatch only) | tis (truncated importance sampling: weight min(rho, cap)) | "
                                   "mis (masked importance sampling: drop what leaves [low, high], weight the rest by rho)")
    level: Literal["token", "sequence", "geometric"] = help_field("token", "Ratio per token, per sequence (product), or geometric (mean log ratio per sequence)")
    cap: float = help_field(2.0, "tis: largest weight", gt=0)
    low: float = help_field(0.5, "mis: lowest kept ratio", ge=0)
    high: float = help_field(2.0, "mis: highest kept ratio", gt=0)

    def kwargs(self) -> dict[str, Any]:
        """The registered function's keyword arguments for this kind."""
        return {"level": self.level, **({"cap": self.cap} if self.kind == "tis" else {}),
                **({"low": self.low, "high": self.high} if self.kind == "mis" else {})}


@dataclass
class AlgoConfig:
    """Which algorithm, and any settings that override its preset (None = the preset's value)."""

    preset: str = help_field("grpo", "Named algorithm whose settings are the defaults: " + ", ".join(PRESETS) + " (`rlvr algos list` shows them)")
    advantage: str | None = help_field(None, "Advantage estimator (registry rlvr.algos.advantages): " + ", ".join(ADVANTAGES.ids()))
    advantage_kwargs: dict[str, Any] | None = help_field(None, "Arguments of the estimator, merged over the preset's when the estimator is the preset's, e.g. {eps: 1e-6} for grpo, {verifier_coef: 1.0} for prime, {lam: 0.9} for gae")
    ratio: str | None = help_field(None, "Importance ratio: token | sequence (GSPO) | sequence_token (GSPO-token)")
    policy_loss: str | None = help_field(None, "Policy loss (registry rlvr.algos.objective): clipped (PPO surrogate) | pg (plain -A log pi, GPG) | cispo (clipped detached IS weight)")
    clip_low: float | None = help_field(None, "Lower clip epsilon: ratios below 1 - clip_low are clipped", ge=0)
    clip_high: float | None = help_field(None, "Upper clip epsilon: ratios above 1 + clip_high are clipped (DAPO's clip-higher: 0.28)", ge=0)
    dual_clip: float | None = help_field(None, "Dual-clip constant c > 1 for negative advantages (0 = off)", ge=0)
    loss_agg: str | None = help_field(None, "Loss aggregation: seq_mean_token_mean (GRPO) | token_mean (DAPO) | seq_mean_token_sum_norm (Dr. GRPO) | seq_mean (GSPO)")
    kl_mode: KLMode | None = help_field(None, "KL to the reference: in the loss, subtracted from the reward per token, monitor (reference loaded, KL logged, no effect), or off (no reference loaded unless the PRM needs it)")
    kl_estimator: str | None = help_field(None, "KL estimator: k1 | k2 | k3 (k3 in the loss for GRPO, k1 in the reward for REINFORCE++/PPO)")
    kl_coef: float | None = help_field(None, "KL coefficient beta", ge=0)
    ref_update_every: int | None = help_field(None, "Replace the reference with the current policy every this many steps (0 = never)", ge=0)
    entropy_coef: float | None = help_field(None, "Entropy bonus coefficient (0 = off; entropy is logged either way)")
    dynamic_sampling: bool | None = help_field(None, "Drop groups whose rewards are all equal and refill the batch with new prompts (DAPO)")
    accuracy_band: list[float] | None = help_field(None, "[lo, hi]: keep only groups whose pass rate is in the band, refilling like dynamic sampling (PRIME: [0.2, 0.8]); [0, 1] keeps all")
    sampling_budget: float | None = help_field(None, "With dynamic sampling or a band: most prompts generated per step, as a multiple of rollout.prompts_per_step; when spent the step trains on what it kept")
    overlong_buffer_frac: float | None = help_field(None, "DAPO soft overlong penalty: the last this fraction of rollout.max_new_tokens ramps the reward down to -overlong_penalty (DAPO: 0.2); 0 = off")
    overlong_penalty: float | None = help_field(None, "Largest soft overlong penalty (DAPO: 1.0)", ge=0)
    mask_truncated: bool | None = help_field(None, "Leave completions that hit rollout.max_new_tokens out of the loss (DAPO's overlong filtering); they still count in group baselines")
    prm: PRMConfig = field(default_factory=PRMConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    preference: PreferenceConfig = field(default_factory=PreferenceConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)


_SCORERS = {"prm": (PRMSettings, PRM_DEFAULTS), "critic": (CriticSettings, CRITIC_DEFAULTS)}


def resolve_algorithm(cfg: AlgoConfig) -> Algorithm:
    """Fill unset fields from the preset, check every part exists, warn on combinations the papers advise against."""
    if cfg.preset not in PRESETS:
        raise ConfigError(f"unknown algo.preset {cfg.preset!r}; presets: {', '.join(PRESETS)}")
    preset = PRESETS[cfg.preset]
    settings = dict(preset)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name not in ("preset", "preference", *_SCORERS) and value is not None:
            settings[f.name] = value
    settings["preference"] = _resolve_preference(cfg, preset)
    if cfg.kl_mode in ("off", "monitor") and cfg.kl_coef is None:
        settings["kl_coef"] = 0.0  # turning KL off also drops the preset's coefficient
    # the preset's estimator arguments stay under the user's, unless the user chose another estimator
    same_estimator = settings["advantage"] == preset["advantage"]
    settings["advantage_kwargs"] = {**(preset["advantage_kwargs"] if same_estimator else {}), **(cfg.advantage_kwargs or {})}
    if settings["dual_clip"] is not None and settings["dual_clip"] <= 0:
        settings["dual_clip"] = None
    for name, (settings_cls, defaults) in _SCORERS.items():
        settings[name] = _resolve_scorer(name, getattr(cfg, name), preset[name], settings_cls, defaults)
    policy_gradient = settings["preference"] is None  # a preference preset has no objective parts to check
    for key, registry in (("advantage", ADVANTAGES), ("ratio", RATIOS), ("policy_loss", POLICY_LOSSES), ("loss_agg", AGGREGATIONS),
                          ("kl_estimator", KL_ESTIMATORS)):
        if policy_gradient and settings[key] not in registry:
            raise ConfigError(f"algo.{key} {settings[key]!r} is not registered; choose one of {', '.join(registry.ids())}")
    accepted = estimator_parameters(settings["advantage"]) if policy_gradient else {}
    unknown = sorted(set(settings["advantage_kwargs"]) - set(accepted))
    if unknown:
        raise ConfigError(f"algo.advantage_kwargs: {', '.join(unknown)} not accepted by the {settings['advantage']} estimator (it takes: {', '.join(accepted) or 'nothing'})")
    _validate(settings)
    if settings["correction"].kind not in CORRECTIONS:
        raise ConfigError(f"algo.correction.kind {settings['correction'].kind!r} is not registered; choose one of {', '.join(CORRECTIONS.ids())}")
    band = settings["accuracy_band"]
    settings["accuracy_band"] = None if band is None or tuple(band) == (0.0, 1.0) else (float(band[0]), float(band[1]))
    algo = Algorithm(preset=cfg.preset, **settings)
    if algo.advantage == "prime" and algo.advantage_kwargs.get("implicit_coef", accepted["implicit_coef"].default) and algo.prm is None:
        raise ConfigError("algo.advantage=prime weights implicit process rewards (implicit_coef != 0) but the implicit PRM is off (algo.prm.enabled=false): "
                          "turn the PRM on, or set algo.advantage_kwargs={implicit_coef: 0} to use the verifier's process rewards instead")
    if (algo.advantage == "gae") != (algo.critic is not None):
        raise ConfigError("algo.advantage=gae needs a critic and a critic is only used by gae: "
                          + ("set algo.critic.enabled=true" if algo.advantage == "gae" else "set algo.advantage=gae (or algo.critic.enabled=false)"))
    for message in combination_warnings(algo):
        warnings.warn(message, UserWarning, stacklevel=2)
    return algo


# What a preference preset reads besides algo.preference.*: the group filter of its online source
# and the reference refresh (iterative DPO). Every other algo.* key belongs to the policy objective.
_PREFERENCE_KEYS = ("preset", "preference", "dynamic_sampling", "accuracy_band", "sampling_budget", "ref_update_every")


def _resolve_preference(cfg: AlgoConfig, preset: dict[str, Any]) -> PreferenceSettings | None:
    """The preference settings of a preset that runs the preference recipe (the user's values
    over the preset's); None for the others. Keys that only the other family reads are errors."""
    user = {f.name: getattr(cfg.preference, f.name) for f in dataclasses.fields(cfg.preference) if getattr(cfg.preference, f.name) is not None}
    if preset["preference"] is None:
        if user:
            raise ConfigError(f"algo.preference.{next(iter(user))} is set but algo.preset={cfg.preset} runs the {preset['recipe']} recipe; "
                              f"preference settings belong to the presets {', '.join(n for n, p in PRESETS.items() if p['preference'])}")
        return None
    foreign = [f.name for f in dataclasses.fields(cfg) if f.name not in (*_PREFERENCE_KEYS, *_SCORERS, "correction") and getattr(cfg, f.name) is not None]
    foreign += [f"correction.kind" for _ in [0] if cfg.correction.kind != "none"]
    foreign += [f"{name}.{f.name}" for name in _SCORERS for f in dataclasses.fields(getattr(cfg, name)) if getattr(getattr(cfg, name), f.name) is not None]
    if foreign:
        raise ConfigError(f"algo.{foreign[0]} has no effect with algo.preset={cfg.preset} (the preference recipe has no advantage, ratio, "
                          f"clipping or explicit KL; beta sets its implicit KL): drop it, or set algo.preference.* instead")
    s = PreferenceSettings(**{**PREFERENCE_DEFAULTS, **preset["preference"], **user})
    if s.loss not in PREFERENCE_LOSSES:
        raise ConfigError(f"algo.preference.loss {s.loss!r} is not registered; choose one of {', '.join(PREFERENCE_LOSSES.ids())}")
    if not 0 <= s.label_smoothing < 0.5:
        raise ConfigError(f"algo.preference.label_smoothing must be in [0, 0.5), got {s.label_smoothing}")
    if s.source == "pairs" and not PREFERENCE_LOSSES.get(s.loss).paired:
        raise ConfigError(f"algo.preference.loss={s.loss} learns from single labelled completions, not pairs: "
                          "use algo.preference.source=online (the kto preset samples and verifies them each step)")
    return s


def _resolve_scorer(name: str, user: Any, preset: dict[str, Any] | None, settings_cls: type, defaults: dict[str, Any]) -> Any:
    """A learned scorer's settings: on when the preset has it (unless ``enabled=false``) or the user
    turns it on; the user's values over the preset's over the defaults."""
    enabled = user.enabled if user.enabled is not None else preset is not None
    if not enabled:
        return None
    values = {**defaults, **(preset or {}), **{f.name: getattr(user, f.name) for f in dataclasses.fields(user)
                                               if f.name != "enabled" and getattr(user, f.name) is not None}}
    if name == "critic" and values["value_clip"] == 0:
        values["value_clip"] = None
    return settings_cls(**values)


def _validate(s: dict[str, Any]) -> None:
    if s["dual_clip"] is not None and s["dual_clip"] <= 1:
        raise ConfigError(f"algo.dual_clip must be > 1 (or 0 to turn it off), got {s['dual_clip']}")
    band = s["accuracy_band"]
    if band is not None and (len(band) != 2 or not 0.0 <= band[0] <= band[1] <= 1.0):
        raise ConfigError(f"algo.accuracy_band must be [lo, hi] with 0 <= lo <= hi <= 1, got {band}")
    if s["sampling_budget"] < 1:
        raise ConfigError(f"algo.sampling_budget is a multiple of rollout.prompts_per_step and must be >= 1, got {s['sampling_budget']}")
    if not 0.0 <= s["overlong_buffer_frac"] < 1.0:
        raise ConfigError(f"algo.overlong_buffer_frac must be in [0, 1), got {s['overlong_buffer_frac']}")
    if s["policy_loss"] == "clipped" and s["clip_low"] is not None and s["clip_low"] >= 1:
        raise ConfigError(f"algo.clip_low must be < 1 for the clipped surrogate (the ratio's lower bound is 1 - clip_low), got {s['clip_low']}")


def combination_warnings(algo: Algorithm) -> list[str]:
    """Settings that run but that the papers warn against."""
    out = []
    if algo.ratio in ("sequence", "sequence_token") and algo.loss_agg != "seq_mean":
        out.append(f"ratio={algo.ratio} with loss_agg={algo.loss_agg}: GSPO's sequence ratio is meant for per-sequence aggregation (seq_mean); token-level aggregation re-weights sequences by length")
    if algo.ratio in ("sequence", "sequence_token") and (algo.clip_high or 0) > 0.01:
        out.append(f"sequence-level ratio with clip_high={algo.clip_high}: GSPO clips sequence ratios at ~3e-4/4e-4; token-scale epsilons (0.2) barely clip")
    if algo.ratio == "token" and algo.policy_loss == "clipped" and algo.clip_high is not None and algo.clip_high < 0.01:
        out.append(f"per-token ratio with clip_high={algo.clip_high}: such tiny epsilons are GSPO's sequence-level values and clip almost every token")
    if algo.kl_mode in ("off", "monitor") and algo.kl_coef > 0:
        out.append(f"kl_coef={algo.kl_coef} has no effect with kl_mode={algo.kl_mode}")
    if algo.kl_active and algo.kl_mode == "loss" and algo.kl_estimator == "k1":
        out.append("kl_estimator=k1 in the loss: its gradient is zero in expectation (the samples are fixed), so it does not pull towards the reference; use k3 in the loss (GRPO) or k1 in the reward (REINFORCE++, PPO)")
    if algo.kl_active and algo.kl_mode == "reward" and algo.kl_estimator != "k1":
        out.append(f"kl_estimator={algo.kl_estimator} in the reward: REINFORCE++ and PPO penalise the reward with k1, the unbiased per-token estimate; {algo.kl_estimator} biases the penalty")
    if algo.policy_loss == "pg" and algo.dual_clip is not None:
        out.append("dual_clip has no effect with policy_loss=pg (no importance ratio)")
    if (algo.dynamic_sampling or algo.accuracy_band is not None) and algo.sampling_budget <= 1.0:
        out.append("dynamic sampling with sampling_budget=1: no prompt can be generated to refill the batch, so every dropped group shrinks it")
    if algo.prm is not None and algo.advantage != "prime":
        out.append(f"algo.prm.enabled=true with advantage={algo.advantage}: the PRM is trained every step but only the prime estimator uses its rewards")
    if algo.ref_update_every and not algo.needs_reference:
        out.append(f"ref_update_every={algo.ref_update_every} has no effect: no reference model is loaded (kl_mode={algo.kl_mode})")
    return out + _preference_warnings(algo)


def _preference_warnings(algo: Algorithm) -> list[str]:
    pref, out = algo.preference, []
    if pref is None:
        return out
    paired = PREFERENCE_LOSSES.get(pref.loss).paired
    if pref.label_smoothing and pref.loss not in ("sigmoid", "robust"):
        out.append(f"algo.preference.label_smoothing={pref.label_smoothing} has no effect with loss={pref.loss} (only sigmoid/cDPO and robust/rDPO use it)")
    if paired and (pref.desirable_weight != 1.0 or pref.undesirable_weight != 1.0):
        out.append(f"algo.preference.desirable_weight/undesirable_weight are KTO's lambdas and have no effect with loss={pref.loss}")
    if pref.source == "pairs":
        if algo.dynamic_sampling or algo.accuracy_band is not None or algo.ref_update_every:
            out.append("dynamic_sampling, accuracy_band and ref_update_every act on online sampling; with algo.preference.source=pairs they have no effect")
    elif paired and not (algo.dynamic_sampling or algo.accuracy_band is not None):
        out.append("online pairs without dynamic sampling: groups that are all right or all wrong give no pair, so steps train on fewer pairs "
                   "(algo.dynamic_sampling=true refills the batch)")
    return out


def group_relative(algo: Algorithm) -> bool:
    """Whether the advantage compares completions of the same prompt (useless with one per prompt)."""
    return algo.advantage in ("grpo", "mean_centered", "rloo", "grpo_process", "prime", "reinforce_pp_baseline")


def preset_rows() -> list[tuple[str, dict[str, Any]]]:
    """Every preset with its resolved settings (for `rlvr algos list`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = []
        for name in PRESETS:
            algo = resolve_algorithm(AlgoConfig(preset=name))
            settings = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
                        for k, v in algo.__dict__.items() if k not in ("preset", "preference", *_SCORERS)}
            for scorer in _SCORERS:  # a learned scorer: whether it is on, then its settings
                value = getattr(algo, scorer)
                settings[scorer] = {"enabled": value is not None, **(dataclasses.asdict(value) if value is not None else {})}
            settings["preference"] = dataclasses.asdict(algo.preference) if algo.preference else {}
            rows.append((name, settings))
        return rows
