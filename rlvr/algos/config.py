"""Algorithms as config: one `AlgoConfig` whose sections name registered parts, and presets as YAML.

The algorithm config (this module) and its data, the presets (``rlvr/algos/presets/NAME.yaml``):

    algo:
      preset: dapo                                   # rlvr/algos/presets/dapo.yaml
      policy_loss: {name: clipped, clip_high: 0.3}   # the loss's own arguments, checked against its signature
      kl: {mode: loss, coef: 0.01}

Each setting has one place:

- an **algorithm part** (advantage estimator, importance ratio, policy loss, loss aggregation) is a
  section ``{name, **arguments}`` (`rlvr.algos.parts.Part`); its arguments and their defaults are
  the registered function's keyword arguments, so a new part with a new hyperparameter is one
  function and nothing else;
- every other setting is a field of `AlgoConfig` or of one of its sections (``kl``, ``prm``,
  ``critic``, ``preference``), with its default and help beside it; the mismatch correction
  (``algo.correction``) is a part too. The defaults
  are GRPO's;
- a **preset** is a small YAML file of the settings where it differs from those defaults
  (``extends: NAME`` starts from another preset). ``rlvr algos show NAME`` prints it resolved.

Resolution (`AlgoConfig.from_config`, run when a config is read): the preset's settings, then the
user's over them (an override always wins: a preset never replaces what the user wrote; a part
section naming the preset's function is merged into the preset's, one naming another function
replaces it), then every part's arguments completed from its signature, then checks. Old flat
spellings (``algo.clip_high``, ``algo.loss_agg``, ``algo.kl_coef``, ``algo.advantage_kwargs``...)
keep working: they are read as the sections they moved to (`LEGACY`).

A third-party package adds parts (and presets, `register_preset`) through the ``rlvr.algos``
entry-point group: each entry point names a module whose import registers them.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.aggregation import AGGREGATIONS
from rlvr.algos.correction import CORRECTIONS
from rlvr.algos.filters import GroupFilter
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.objective import POLICY_LOSSES
from rlvr.algos.parts import Part, complete, part_parameters
from rlvr.algos.preference import PREFERENCE_LOSSES
from rlvr.algos.ratio import RATIOS
from rlvr.config import ConfigError, from_dict, help_field, in_file, to_dict

KLMode = Literal["loss", "reward", "monitor", "off"]
PRMUpdate = Literal["before", "after", "off"]
PreferenceSource = Literal["pairs", "online"]
Pairing = Literal["random", "disjoint"]

# part key -> (registry, what the function is called in messages, the data arguments every function of the kind takes first)
PARTS: dict[str, tuple[Any, str, int]] = {
    "advantage": (ADVANTAGES, "advantage estimator", 1),   # (AdvantageInputs, **arguments)
    "ratio": (RATIOS, "importance ratio", 3),                # (logp, old_logp, mask, **arguments)
    "policy_loss": (POLICY_LOSSES, "policy loss", 1),      # (PolicyLossInputs, **arguments)
    "aggregation": (AGGREGATIONS, "loss aggregation", 3),  # (loss, mask, Normalizer, **arguments)
    "correction": (CORRECTIONS, "mismatch correction", 3),  # (trainer_logp, rollout_logp, mask, **arguments)
}
_MISSING = object()
SECTIONS = ("kl", "prm", "critic", "preference")  # nested settings merged key by key over the preset's


@dataclass
class KLConfig:
    """The KL to the reference policy."""

    mode: KLMode = help_field("loss", "Where the KL goes: in the loss, subtracted from the reward per token, monitor (reference loaded, KL logged, "
                                      "no effect), or off (no reference loaded unless the PRM needs it)")
    estimator: str | None = help_field("k3", "KL estimator (registry rlvr.algos.kl): k1 | k2 | k3 (k3 in the loss for GRPO, k1 in the reward for REINFORCE++/PPO)")
    coef: float = help_field(0.04, "KL coefficient beta (GRPO: 0.04)", ge=0)


@dataclass
class PRMConfig:
    """PRIME's implicit process reward model: a causal LM read against a frozen copy of its
    initial weights, trained online on the verifier's outcome labels."""

    enabled: bool = help_field(False, "Train the implicit PRM and give its token rewards to the advantage estimator (on for prime)")
    beta: float = help_field(0.05, "Token reward = beta * (log pi_phi - log pi_ref) (PRIME: 0.05)", gt=0)
    lr_scale: float = help_field(1.0, "PRM learning rate as a multiple of optim.lr (prime: 2, i.e. 1e-6 beside 5e-7)", gt=0)
    update: PRMUpdate = help_field("before", "Update the PRM on each batch's outcome labels before scoring it (PRIME), after, or never (frozen PRM)")
    init: str | None = help_field(None, "Model to initialise the PRM and its reference from (default: model.name_or_path, the policy's starting point)")


@dataclass
class CriticConfig:
    """PPO's critic: a value head on a language-model backbone with its own optimizer, trained by
    (clipped) regression on the GAE returns."""

    enabled: bool = help_field(False, "Train a critic and give its values to the advantage estimator (on for ppo; needs advantage gae)")
    init: str | None = help_field(None, "Backbone to start from: a causal LM or a saved critic (default: model.name_or_path, the policy's starting weights; separate weights)")
    lr_scale: float = help_field(5.0, "Critic learning rate as a multiple of optim.lr (default 5: its value head starts from scratch)", gt=0)
    value_clip: float | None = help_field(0.2, "Clip new values to old +- this in the value loss (PPO2; 0 = off)", ge=0)
    warmup_steps: int = help_field(0, "Training steps at the start that update only the critic (the policy waits for useful values)", ge=0)


@dataclass
class PreferenceConfig:
    """The preference recipe (presets dpo, online_dpo, kto): which loss, and where its examples
    come from. Only read by a preset that runs that recipe."""

    loss: str = help_field("sigmoid", "Preference loss (registry rlvr.algos.preference): " + ", ".join(PREFERENCE_LOSSES.registered_ids())
                           + " (sigmoid = DPO, cDPO with label_smoothing; robust = rDPO; ipo; hinge = SLiC; kto = KTO, unpaired)")
    beta: float = help_field(0.1, "Implicit reward scale beta (DPO 0.1, Rafailov et al. 2023; IPO's tau; KTO 0.1)", gt=0)
    label_smoothing: float = help_field(0.0, "Assumed rate of flipped labels eps for sigmoid (cDPO) and robust (rDPO); must be < 0.5", ge=0)
    length_norm: bool = help_field(False, "Divide each completion's log-ratio by its length in tokens (per-token implicit rewards)")
    source: PreferenceSource = help_field("pairs", "pairs: a pairs file (pairs.path; dpo); online: sample groups from the current policy each step and verify them (online_dpo, kto)")
    pairs_per_group: int = help_field(1, "Online pairs: most pairs formed from one group's passing and failing completions", gt=0)
    pairing: Pairing = help_field("disjoint", "Which pairs: disjoint (each completion in at most one pair) or random (any pass x fail combination, without repeats)")
    desirable_weight: float = help_field(1.0, "KTO lambda_D: weight of desirable (passing) completions", gt=0)
    undesirable_weight: float = help_field(1.0, "KTO lambda_U: weight of undesirable (failing) completions", gt=0)
    reference_cache: bool = help_field(True, "Offline pairs: compute the reference's log-probs once before training (with the policy's starting weights), cache them in the run directory and hold no reference model")


def CorrectionConfig(kind: str = "none", **arguments: Any) -> Part:
    """Compatibility alias (the correction as ``kind`` and the settings of every kind): the
    ``algo.correction`` section ``{name: kind, **arguments}``, completed from the registered
    function's signature; as before, settings of the other kinds are ignored."""
    registry, what, leading = PARTS["correction"]
    return complete("correction", what, Part(name=kind, **arguments), registry.get(kind), leading, set())


def _part(name: str) -> Any:
    return field(default_factory=lambda: Part(name=name), metadata={"help": _part_help(name)})


def _part_help(default: str) -> str:
    registry, kind, _ = next(part for part in PARTS.values() if default in part[0].registered_ids())
    return (f"{kind[0].upper()}{kind[1:]}: {{name: NAME, ARGUMENT: VALUE...}} or just NAME; the arguments are the function's keyword "
            f"arguments (`rlvr algos show PRESET` lists them). Built in: {', '.join(registry.registered_ids())}")


@dataclass
class AlgoConfig:
    """Which algorithm: a preset, and the settings that differ from it. The defaults are GRPO's."""

    preset: str = help_field("grpo", "Named algorithm whose settings are the defaults (rlvr/algos/presets/NAME.yaml; `rlvr algos list` shows them)")
    recipe: str = help_field("policy_gradient", "The training procedure that runs it (rlvr.train.recipes): the preset's own (policy_gradient, or preference for dpo, online_dpo, kto); another value is refused")
    advantage: Part | None = _part("grpo")
    ratio: Part | None = _part("token")
    policy_loss: Part | None = _part("clipped")
    aggregation: Part | None = _part("seq_mean_token_mean")
    kl: KLConfig = field(default_factory=KLConfig)
    ref_update_every: int = help_field(0, "Replace the reference with the current policy every this many steps (0 = never)", ge=0)
    entropy_coef: float = help_field(0.0, "Entropy bonus coefficient (0 = off; a negative one penalizes entropy; entropy is logged either way)")
    dynamic_sampling: bool = help_field(False, "Drop groups whose rewards are all equal and refill the batch with new prompts (DAPO)")
    accuracy_band: list[float] | None = help_field(None, "[lo, hi]: keep only groups whose pass rate is in the band, refilling like dynamic sampling (PRIME: [0.2, 0.8]); [0, 1] keeps all")
    sampling_budget: float = help_field(1.0, "With dynamic sampling or a band: most prompts generated per step, as a multiple of rollout.prompts_per_step; when spent the step trains on what it kept", ge=1)
    overlong_buffer_frac: float = help_field(0.0, "DAPO soft overlong penalty: the last this fraction of rollout.max_new_tokens ramps the reward down to -overlong_penalty (DAPO: 0.2); 0 = off", ge=0, lt=1)
    overlong_penalty: float = help_field(1.0, "Largest soft overlong penalty (DAPO: 1.0)", ge=0)
    mask_truncated: bool = help_field(False, "Leave completions that hit rollout.max_new_tokens out of the loss (DAPO's overlong filtering); they still count in group baselines")
    epochs_per_batch: int = help_field(1, "Passes over each rollout batch (update.epochs_per_batch overrides)", gt=0)
    minibatches: int = help_field(1, "Optimizer steps per pass (update.minibatches overrides)", gt=0)
    prm: PRMConfig = field(default_factory=PRMConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    preference: PreferenceConfig = field(default_factory=PreferenceConfig)
    correction: Part = _part("none")

    @classmethod
    def from_config(cls, value: Any = None, where: str = "config", key: str = "algo") -> AlgoConfig:
        """The resolved algorithm of an ``algo`` mapping: the preset's settings with the user's over
        them, parts completed from their signatures, checked (see the module docstring)."""
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: '{key}' must be a mapping, got {type(value).__name__} {value!r}")
        _check_keys(value, where, key)
        user, spelled, inherit = _translate_legacy(value)
        try:
            return cls._resolve(user, spelled, inherit, where, key)
        except ConfigError as e:  # name an old spelling as the user typed it, and where it moved; and the file
            message = str(e)
            for new, typed in spelled.items():
                message = message.replace(f"'{key}.{new}'", f"'{typed}' (now {key}.{new})")
            raise in_file(ConfigError(message), where) from None

    @classmethod
    def rebase_overridden(cls, file_value: Any, value: Any, overridden: set[str]) -> Any:
        """The ``algo`` section to read when command-line overrides change the preset of a run's ``config.yaml``, which
        records its algorithm resolved, every setting spelled out (without this, ``rlvr train RUN/config.yaml
        algo.preset=ppo`` would run GRPO's settings under PPO's name): the file's settings that restate its old preset's
        values, or a part function's own defaults, are dropped, and so are those the new preset's recipe does not read
        (a policy-gradient run's advantage for dpo, a preference run's beta for grpo), so the new preset's own apply;
        what the run set apart from them, and every override, is kept (over the new preset, as always). A section a
        person wrote, which spells out only some settings, is read as written: every setting in it is theirs.
        ``overridden``: the overridden keys within the section, dotted (``kl.coef``; ``""``: the whole section)."""
        if "" in overridden or "preset" not in overridden or not isinstance(file_value, dict) or not isinstance(value, dict):
            return value
        if not set(cls.__dataclass_fields__) <= set(file_value):  # not a run's resolved section
            return value
        old_preset = file_value.get("preset") or "grpo"
        if value.get("preset") == old_preset:
            return value
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                old = to_dict(cls.from_config({"preset": old_preset}))
                new_recipe = preset_settings(value.get("preset") or "grpo").get("recipe", _default(None, "recipe"))
        except ConfigError:
            return value  # a preset that does not resolve: nothing to tell apart (resolution names it)
        family_change = new_recipe != old.get("recipe")
        kept: dict[str, Any] = {}
        for key, setting in value.items():
            theirs = old.get(key, _MISSING)
            if key == "preset" or key in overridden:
                kept[key] = setting
                continue
            if family_change and not any(k.startswith(key + ".") for k in overridden) and (
                    key not in _PREFERENCE_KEYS if new_recipe == "preference" else key == "preference"):
                continue  # the old recipe's setting, which the new one does not read
            if isinstance(setting, dict) and isinstance(theirs, dict):
                another = key in PARTS and setting.get("name") != theirs.get("name")
                if another:  # another function than the old preset's: the file's choice, its own defaults restatements
                    theirs = {**_completed(key, {"name": setting["name"]}), "name": _MISSING}
                inner = {k: v for k, v in setting.items() if f"{key}.{k}" in overridden or v != theirs.get(k, _MISSING)}
                if inner:
                    kept[key] = inner
            elif setting != theirs:
                kept[key] = setting
        return kept

    @classmethod
    def _resolve(cls, user: dict[str, Any], spelled: dict[str, str], inherit: set[str], where: str, key: str) -> AlgoConfig:
        if "recipe" in user and user["recipe"] is None:  # null: the preset's, as when the key is left out
            user = {k: v for k, v in user.items() if k != "recipe"}
        if "preset" in user and user["preset"] is None:  # null: the default, as when the key is left out
            user = {k: v for k, v in user.items() if k != "preset"}
        name = user.get("preset", "grpo")
        preset = preset_settings(name)
        merged, supplied = _merge(preset, user, inherit)
        _check_family(name, preset, user, spelled)
        for part_key, (registry, kind, leading) in PARTS.items():
            if part_key not in merged:
                merged[part_key] = AlgoConfig.__dataclass_fields__[part_key].default_factory()
            section = merged[part_key]
            if section is None:
                continue
            section = Part.from_config(section, where, f"{key}.{part_key}")
            if section.name not in registry:
                raise ConfigError(f"algo.{part_key} {section.name!r} is not registered; choose one of {', '.join(registry.ids())}")
            merged[part_key] = complete(part_key, kind, section, registry.get(section.name), leading, supplied.get(part_key, set()))
        algo = from_dict(cls, merged, where=where, prefix=f"{key}.")
        if algo.kl.mode in ("off", "monitor") and "coef" not in (user.get("kl") or {}):
            algo.kl.coef = 0.0  # turning KL off also drops the preset's coefficient (read typed: YAML reads off as false)
        algo._normalise()
        algo.check()
        return algo

    # -- derived settings ---------------------------------------------------------------------

    @property
    def is_preference(self) -> bool:
        """Whether this runs the preference recipe (DPO, online DPO, KTO): no objective parts."""
        return self.recipe == "preference"

    @property
    def kl_active(self) -> bool:
        """Whether a KL term to the reference enters the loss or the reward."""
        return self.kl.mode in ("loss", "reward") and self.kl.coef > 0

    @property
    def kl_loss_coef(self) -> float:
        """The KL's weight in the policy loss (0 when it goes to the reward or is off)."""
        return self.kl.coef if self.kl_active and self.kl.mode == "loss" else 0.0

    @property
    def needs_reference(self) -> bool:
        """Whether a frozen reference model must be loaded (for the KL, its monitoring, the implicit PRM,
        or a preference loss; offline pairs may read its log-probs from a cache instead)."""
        return self.kl_active or self.kl.mode == "monitor" or self.prm.enabled or self.is_preference

    @property
    def group_filter(self) -> GroupFilter:
        """Which generated groups the training batch keeps (see `rlvr.algos.filters`)."""
        return GroupFilter(self.dynamic_sampling, tuple(self.accuracy_band) if self.accuracy_band is not None else None)

    @property
    def group_relative(self) -> bool:
        """Whether the advantage compares completions of the same prompt (useless with one per prompt)."""
        return self.advantage is not None and self.advantage.name in GROUP_RELATIVE

    # -- the flat names of earlier versions, read-only (compatibility) --------------------------

    @property
    def advantage_kwargs(self) -> dict[str, Any]:
        return self.advantage.params if self.advantage is not None else {}

    @property
    def clip_low(self) -> float | None:
        return self.policy_loss.get("clip_low") if self.policy_loss is not None else None

    @property
    def clip_high(self) -> float | None:
        return self.policy_loss.get("clip_high") if self.policy_loss is not None else None

    @property
    def dual_clip(self) -> float | None:
        return self.policy_loss.get("dual_clip") if self.policy_loss is not None else None

    @property
    def loss_agg(self) -> str | None:
        return self.aggregation.name if self.aggregation is not None else None

    @property
    def kl_mode(self) -> str:
        return self.kl.mode

    @property
    def kl_estimator(self) -> str | None:
        return self.kl.estimator

    @property
    def kl_coef(self) -> float:
        return self.kl.coef

    # -- checks -------------------------------------------------------------------------------

    def _normalise(self) -> None:
        band = self.accuracy_band
        if band is not None and len(band) == 2 and tuple(band) == (0.0, 1.0):
            self.accuracy_band = None
        elif band is not None and len(band) == 2:
            self.accuracy_band = [float(band[0]), float(band[1])]
        if self.critic.value_clip == 0:
            self.critic.value_clip = None
        if self.policy_loss is not None and "dual_clip" in self.policy_loss and not self.policy_loss["dual_clip"]:
            self.policy_loss["dual_clip"] = None  # 0 = off

    def check(self) -> None:
        """Raise `ConfigError` on settings that cannot run; warn on those the papers advise against."""
        band, loss = self.accuracy_band, self.policy_loss
        if band is not None and (len(band) != 2 or not 0.0 <= band[0] <= band[1] <= 1.0):
            raise ConfigError(f"algo.accuracy_band must be [lo, hi] with 0 <= lo <= hi <= 1, got {band}")
        if self.sampling_budget < 1:
            raise ConfigError(f"algo.sampling_budget is a multiple of rollout.prompts_per_step and must be >= 1, got {self.sampling_budget}")
        if not 0.0 <= self.overlong_buffer_frac < 1.0:
            raise ConfigError(f"algo.overlong_buffer_frac must be in [0, 1), got {self.overlong_buffer_frac}")
        if loss is not None and loss.name == "decoupled" and self.correction.name != "none":
            raise ConfigError(f"algo.policy_loss=decoupled already weights each token by proximal/behaviour, which "
                              f"algo.correction={self.correction.name} would apply a second time: drop the correction "
                              "(algo.policy_loss.behaviour_cap truncates the decoupled weight as tis would)")
        if loss is not None and (loss.get("dual_clip") or 0) and loss["dual_clip"] <= 1:
            raise ConfigError(f"algo.policy_loss.dual_clip must be > 1 (or 0 to turn it off), got {loss['dual_clip']}")
        if loss is not None and loss.name in ("clipped", "decoupled") and loss.get("clip_low") is not None and loss["clip_low"] >= 1:
            raise ConfigError(f"algo.policy_loss.clip_low must be < 1 for the clipped surrogate (the ratio's lower bound is 1 - clip_low), got {loss['clip_low']}")
        self._check_correction()
        if self.is_preference:
            self._check_preference()
        else:
            self._check_policy_gradient()
        for message in combination_warnings(self):
            warnings.warn(message, UserWarning, stacklevel=3)

    def _check_correction(self) -> None:
        """The built-in corrections' and the decoupled loss's argument ranges, said when the config is read (their functions
        check them too, but only at the first update, after a model loaded and a batch was generated)."""
        from rlvr.algos.correction import LEVELS

        c, loss = self.correction, self.policy_loss
        if c is None:
            return
        if c.name in ("none", "tis", "mis") and c.get("level", "token") not in LEVELS:  # (a plugin's correction may have levels of its own)
            raise ConfigError(f"algo.correction.level must be one of {', '.join(LEVELS)}, got {c['level']!r}")
        if c.name == "tis" and c.get("cap") is not None and c["cap"] <= 0:
            raise ConfigError(f"algo.correction.cap must be > 0 (tis truncates the ratio at it), got {c['cap']}")
        if c.name == "mis" and not 0 <= c.get("low", 0.5) < c.get("high", 2.0):
            raise ConfigError(f"algo.correction: mis keeps ratios in [low, high] and needs 0 <= low < high, got [{c.get('low')}, {c.get('high')}]")
        if loss is not None and loss.name == "decoupled" and loss.get("behaviour_cap") is not None and loss["behaviour_cap"] <= 0:
            raise ConfigError(f"algo.policy_loss.behaviour_cap must be > 0 (or null), got {loss['behaviour_cap']}")

    def _check_policy_gradient(self) -> None:
        missing = [k for k in PARTS if getattr(self, k) is None]
        if missing:
            raise ConfigError(f"algo.{missing[0]} is not set: the {self.recipe} recipe needs one (e.g. algo.{missing[0]}="
                              f"{getattr(AlgoConfig(), missing[0]).name})")
        if self.kl.estimator not in KL_ESTIMATORS:
            raise ConfigError(f"algo.kl.estimator {self.kl.estimator!r} is not registered; choose one of {', '.join(KL_ESTIMATORS.ids())}")
        adv = self.advantage
        if adv.name == "prime" and adv.get("implicit_coef") and not self.prm.enabled:
            raise ConfigError("algo.advantage=prime weights implicit process rewards (implicit_coef != 0) but the implicit PRM is off (algo.prm.enabled=false): "
                              "turn the PRM on, or set algo.advantage={name: prime, implicit_coef: 0} to use the verifier's process rewards instead")
        if adv.name == "gae" and not self.critic.enabled:
            raise ConfigError("algo.advantage=gae needs a critic: set algo.critic.enabled=true (or choose another advantage)")
        if self.critic.enabled and adv.name != "gae":
            raise ConfigError(f"algo.critic.enabled=true but only algo.advantage=gae uses a critic, and the advantage here is "
                              f"{adv.name}: set algo.advantage=gae, or algo.critic.enabled=false")

    def _check_preference(self) -> None:
        pref = self.preference
        if pref.loss not in PREFERENCE_LOSSES:
            raise ConfigError(f"algo.preference.loss {pref.loss!r} is not registered; choose one of {', '.join(PREFERENCE_LOSSES.ids())}")
        if not 0 <= pref.label_smoothing < 0.5:
            raise ConfigError(f"algo.preference.label_smoothing must be in [0, 0.5), got {pref.label_smoothing}")
        if pref.source == "pairs" and not PREFERENCE_LOSSES.get(pref.loss).paired:
            raise ConfigError(f"algo.preference.loss={pref.loss} learns from single labelled completions, not pairs: "
                              "use algo.preference.source=online (the kto preset samples and verifies them each step)")


# estimators that compare completions of the same prompt
GROUP_RELATIVE = ("grpo", "mean_centered", "rloo", "grpo_process", "prime", "reinforce_pp_baseline")

# -- presets ----------------------------------------------------------------------------------

PRESET_DIR = Path(__file__).parent / "presets"  # the built-in presets, one YAML file each
_REGISTERED: dict[str, Path] = {}  # presets other packages registered (`register_preset`)


def register_preset(name: str, path: str | Path) -> None:
    """Make the YAML file ``path`` the preset ``name`` (from a package's ``rlvr.algos`` entry point)."""
    if name in _builtin_presets():
        raise ConfigError(f"preset {name!r} is built in; register yours under another name")
    _REGISTERED[name] = Path(path)


def _builtin_presets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.yaml"))}


def preset_files() -> dict[str, Path]:
    """Every preset's YAML file: the built-in ones, then those packages registered."""
    ADVANTAGES.ids()  # loads the rlvr.algos entry points, which may register presets
    return {**_builtin_presets(), **_REGISTERED}


# the order `rlvr algos list` shows the built-in presets in: GRPO and its variants, the learned scorers, preference
LISTING_ORDER = ("grpo", "dapo", "dr_grpo", "gspo", "prime", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gpg", "cispo",
                 "grpo_process", "ppo", "dpo", "online_dpo", "kto")


def preset_names() -> list[str]:
    """The presets: the built-in ones in `LISTING_ORDER`, then any others by name."""
    files = preset_files()
    return [n for n in LISTING_ORDER if n in files] + sorted(n for n in files if n not in LISTING_ORDER)


def preset_settings(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The settings a preset's YAML file states (its ``extends`` chain merged), not yet completed."""
    files = preset_files()
    if name not in files:
        raise ConfigError(f"algo.preset {name!r} is unknown; presets: {', '.join(preset_names())}")
    try:
        data = yaml.safe_load(files[name].read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{files[name]}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{files[name]}: a preset is a mapping of algo settings, got {type(data).__name__}")
    base = data.pop("extends", None)
    if base is not None:
        if base in _seen:
            raise ConfigError(f"{files[name]}: extends {base!r}, which extends it back")
        data = _merge(preset_settings(base, (*_seen, name)), data)[0]
    data["preset"] = name
    return data


# -- old spellings ----------------------------------------------------------------------------

# old flat key -> (section, key in it); None = the part's name
LEGACY: dict[str, tuple[str, str | None]] = {
    "advantage": ("advantage", None), "ratio": ("ratio", None), "policy_loss": ("policy_loss", None),
    "loss_agg": ("aggregation", None),
    "clip_low": ("policy_loss", "clip_low"), "clip_high": ("policy_loss", "clip_high"), "dual_clip": ("policy_loss", "dual_clip"),
    "kl_mode": ("kl", "mode"), "kl_estimator": ("kl", "estimator"), "kl_coef": ("kl", "coef"),
}


def legacy_keys(key: str = "algo") -> dict[str, str]:
    """The old spellings `AlgoConfig.from_config` still reads, dotted, with where each moved:
    ``{"algo.kl_mode": "algo.kl.mode", ...}`` (a part given by its bare name, ``algo.ratio=sequence``,
    is current, not old)."""
    out = {f"{key}.{old}": f"{key}.{section}" + (f".{sub}" if sub else "") for old, (section, sub) in LEGACY.items() if old != section}
    out[f"{key}.advantage_kwargs"] = f"{key}.advantage (the estimator's arguments)"
    out[f"{key}.correction.kind"] = f"{key}.correction.name"
    return out


def _check_keys(value: dict[str, Any], where: str, key: str) -> None:
    """An unknown top-level key is refused with the closest key, old spellings included (named by
    where they moved): ``algo.kl_coeff`` -> did you mean ``algo.kl.coef``?"""
    fields = [f.name for f in dataclasses.fields(AlgoConfig)]
    moved = {old: f"{new}.{sub}" if sub else new for old, (new, sub) in LEGACY.items() if old not in fields}
    moved["advantage_kwargs"] = "advantage"
    for k in value:
        if k in fields or k in moved:
            continue
        close = difflib.get_close_matches(str(k), [*fields, *moved], n=1, cutoff=0.6)
        hint = f" (did you mean '{key}.{moved.get(close[0], close[0])}'?)" if close else f" (known keys: {', '.join(fields)})"
        raise ConfigError(f"{where}: unknown key '{key}.{k}'{hint}")


def _translate_legacy(value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], set[str]]:
    """The user's ``algo`` mapping with old spellings moved to their sections; for each new key the
    spelling the user wrote (errors name what the user typed); and the parts whose preset settings
    carry over to another function (a flat ``policy_loss=NAME`` kept the clip settings)."""
    user = copy.deepcopy(value)
    if any(old in user for old in (*LEGACY, "advantage_kwargs") if old not in PARTS):
        # written before the sections (a run directory's config.yaml held every key, unset ones as null):
        # null meant "the preset's value" then, where a null part now means "no such part"
        user = {k: v for k, v in user.items() if v is not None}
    spelled: dict[str, str] = {}
    inherit: set[str] = set()
    kwargs = user.pop("advantage_kwargs", None)
    for old, (section, key) in LEGACY.items():
        if old not in user or (key is None and not isinstance(user[old], str)):
            continue  # a part given as a section (or null: no such part) is already new
        raw = user.pop(old)
        if key is None:
            user[section] = {**(user.get(section) or {}), "name": raw} if isinstance(user.get(section), dict) else {"name": raw}
            if section == "policy_loss":
                inherit.add(section)  # the clip settings were keys of their own, kept when the loss changed
            spelled[section] = f"algo.{old}"
        else:
            node = user.setdefault(section, {})
            if not isinstance(node, dict):
                node = user[section] = {"name": node}
            node[key] = raw
            spelled[f"{section}.{key}"] = f"algo.{old}"
    if kwargs:
        node = user.setdefault("advantage", {})
        if isinstance(node, str):
            node = user["advantage"] = {"name": node}
        node.update(kwargs)
        spelled["advantage"] = "algo.advantage_kwargs"
    for section in ("prm", "critic", "preference"):  # old run directories: unset keys written as null
        if isinstance(user.get(section), dict):
            user[section] = {k: v for k, v in user[section].items() if v is not None}
    correction = user.get("correction")
    if isinstance(correction, dict) and "kind" in correction:  # algo.correction.kind: the part's name now
        name = correction.pop("kind")
        spelled["correction"] = "algo.correction.kind"
        if name in CORRECTIONS:  # an old config holds every kind's settings: keep those this kind takes
            accepted = part_parameters(CORRECTIONS.get(name), PARTS["correction"][2])
            correction = {k: v for k, v in correction.items() if k in accepted or k == "name"}
        user["correction"] = {**correction, "name": name}
    return user, spelled, inherit


def _merge(preset: dict[str, Any], user: dict[str, Any], inherit: set[str] | frozenset[str] = frozenset()) -> tuple[dict[str, Any], dict[str, set[str]]]:
    """The preset's settings with the user's over them, and which part arguments the user supplied."""
    out = copy.deepcopy(preset)
    supplied: dict[str, set[str]] = {}
    for key, value in user.items():
        if key in PARTS and value is not None:
            mine = {"name": value} if isinstance(value, str) else dict(value) if isinstance(value, dict) else value
            if not isinstance(mine, dict):
                out[key] = mine  # not a section: the type check names it
                continue
            theirs = out.get(key)
            theirs = {"name": theirs} if isinstance(theirs, str) else theirs
            if theirs is None and ("name" not in mine or key in inherit):
                theirs = {"name": AlgoConfig.__dataclass_fields__[key].default_factory().name}
            if theirs is not None and key in inherit and mine.get("name", theirs["name"]) != theirs["name"]:
                registry, kind, leading = PARTS[key]  # the old settings of the preset's function carry over
                mine = {**complete(key, kind, Part(theirs), registry.get(theirs["name"]), leading, set()).params, **mine}
            elif theirs is not None and mine.get("name", theirs["name"]) == theirs["name"]:
                mine = {**theirs, **mine}
            supplied[key] = {k for k in (value if isinstance(value, dict) else {}) if k != "name"}
            out[key] = mine
        elif key in SECTIONS and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out, supplied


# What a preference preset reads besides algo.preference.*: the group filter of its online source
# and the reference refresh (iterative DPO). Every other algo.* key belongs to the policy objective.
_PREFERENCE_KEYS = ("preset", "recipe", "preference", "dynamic_sampling", "accuracy_band", "sampling_budget", "ref_update_every",
                    "epochs_per_batch", "minibatches")


def _check_family(name: str, preset: dict[str, Any], user: dict[str, Any], spelled: dict[str, str]) -> None:
    """Settings the preset's recipe does not read are errors when the user changed them (a value
    equal to the preset's, as in a run directory's resolved config, is not a change)."""
    recipe = preset.get("recipe", _default(None, "recipe"))
    if user.get("recipe") is not None and user["recipe"] != recipe:  # the recipe that runs a preset is the preset's (null: it)
        recipes = {n: preset_settings(n).get("recipe", _default(None, "recipe")) for n in preset_names()}
        theirs = [n for n, r in recipes.items() if r == user["recipe"]]
        choose = (f", or choose a preset of the {user['recipe']} recipe ({', '.join(theirs)})" if theirs else
                  f" (an algorithm runs the {' or the '.join(sorted(set(recipes.values())))} recipe)")
        raise ConfigError(f"{spelled.get('recipe', 'algo.recipe')} cannot be {user['recipe']!r}: algo.preset={name} runs the "
                          f"{recipe} recipe, which is part of the preset; leave algo.recipe out{choose}. A run's config.yaml "
                          f"records its preset's recipe and settings: to train another algorithm from it, give the preset on the "
                          f"command line (rlvr train RUN/config.yaml algo.preset={theirs[0] if theirs else 'NAME'}), not in the file")
    if recipe != "preference":
        pref = {k: v for k, v in (user.get("preference") or {}).items() if v != getattr(PreferenceConfig(), k, object())}
        if pref:
            key = next(iter(pref))
            raise ConfigError(f"algo.preference.{key} is set but algo.preset={name} runs the {recipe} recipe; "
                              f"preference settings belong to the presets {', '.join(n for n in preset_names() if _is_preference(n))}")
        return
    changed = [typed for key, value in user.items() if key not in _PREFERENCE_KEYS and value is not None
               for typed in _changed_keys(key, value, preset, spelled)]
    if changed:
        raise ConfigError(f"{changed[0]} has no effect with algo.preset={name} (the preference recipe has no advantage, ratio, "
                          f"clipping or explicit KL; beta sets its implicit KL): drop it, or set algo.preference.* instead")


def _changed_keys(key: str, value: Any, preset: dict[str, Any], spelled: dict[str, str]) -> list[str]:
    """The keys under ``key`` whose user value differs from the preset's, as the user spelled them."""
    if key in SECTIONS:
        ref = preset.get(key) or {}
        return [spelled.get(f"{key}.{k}", f"algo.{key}.{k}") for k, v in value.items() if v is not None and v != ref.get(k, _default(key, k))]
    if key in PARTS:
        theirs = preset.get(key, AlgoConfig.__dataclass_fields__[key].default_factory())
        mine = {"name": value} if isinstance(value, str) else value
        same = theirs is not None and all(v == _completed(key, theirs).get(k) for k, v in mine.items())
        return [] if same else [spelled.get(key, f"algo.{key}")]
    return [] if value == preset.get(key, _default(None, key)) else [spelled.get(key, f"algo.{key}")]


def _completed(key: str, section: dict[str, Any] | str) -> dict[str, Any]:
    """A part section with every argument of its function filled."""
    registry, kind, leading = PARTS[key]
    part = Part.from_config(section, "config", f"algo.{key}")
    return dict(complete(key, kind, part, registry.get(part.name), leading, set()))


def _default(section: str | None, key: str) -> Any:
    if section is None:
        f = AlgoConfig.__dataclass_fields__.get(key)
        return None if f is None else f.default if f.default is not dataclasses.MISSING else None
    cls = {"kl": KLConfig, "prm": PRMConfig, "critic": CriticConfig, "preference": PreferenceConfig}[section]
    return getattr(cls(), key, None)


def _is_preference(name: str) -> bool:
    return preset_settings(name).get("recipe") == "preference"


def algo_config(preset: str = "grpo", *, quiet: bool = False, **settings: Any) -> AlgoConfig:
    """The resolved algorithm of a preset with ``settings`` over it, as a config file would give it:
    ``algo_config("dapo", policy_loss={"name": "clipped", "clip_high": 0.3})``; old flat spellings work too."""
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        return AlgoConfig.from_config({"preset": preset, **settings})


def resolve_algorithm(cfg: AlgoConfig | dict[str, Any]) -> AlgoConfig:
    """Compatibility alias: the resolved algorithm of an ``algo`` mapping or config. A config read
    from a file is resolved already (`AlgoConfig.from_config`); a hand-built one is resolved as the
    mapping of the fields it sets."""
    if isinstance(cfg, dict):
        return AlgoConfig.from_config(cfg)
    return AlgoConfig.from_config(_changed_fields(cfg))


def _changed_fields(cfg: AlgoConfig) -> dict[str, Any]:
    """The fields of a hand-built `AlgoConfig` that differ from the defaults (what its author set)."""
    default, out = AlgoConfig(), {}
    for f in dataclasses.fields(cfg):
        mine, theirs = getattr(cfg, f.name), getattr(default, f.name)
        if dataclasses.is_dataclass(mine):
            changed = {k: v for k, v in dataclasses.asdict(mine).items() if v != getattr(theirs, k)}
            if changed:
                out[f.name] = changed
        elif mine != theirs or f.name == "preset":
            out[f.name] = dict(mine) if isinstance(mine, Part) else mine
    return out


Algorithm = AlgoConfig  # compatibility alias: the resolved algorithm is the config itself


def group_relative(algo: AlgoConfig) -> bool:
    """Compatibility alias of `AlgoConfig.group_relative`."""
    return algo.group_relative


def combination_warnings(algo: AlgoConfig) -> list[str]:
    """Settings that run but that the papers warn against."""
    if algo.is_preference:
        return _preference_warnings(algo)
    out = []
    ratio, loss, agg, kl = algo.ratio.name, algo.policy_loss, algo.aggregation.name, algo.kl
    clip_high = loss.get("clip_high")
    if ratio in ("sequence", "sequence_token") and agg != "seq_mean":
        out.append(f"ratio={ratio} with aggregation={agg}: GSPO's sequence ratio is meant for per-sequence aggregation (seq_mean); token-level aggregation re-weights sequences by length")
    if ratio in ("sequence", "sequence_token") and (clip_high or 0) > 0.01:
        out.append(f"sequence-level ratio with clip_high={clip_high}: GSPO clips sequence ratios at ~3e-4/4e-4; token-scale epsilons (0.2) barely clip")
    if ratio == "token" and loss.name == "clipped" and clip_high is not None and clip_high < 0.01:
        out.append(f"per-token ratio with clip_high={clip_high}: such tiny epsilons are GSPO's sequence-level values and clip almost every token")
    if kl.mode in ("off", "monitor") and kl.coef > 0:
        out.append(f"kl.coef={kl.coef} has no effect with kl.mode={kl.mode}")
    if algo.kl_active and kl.mode == "loss" and kl.estimator == "k1":
        out.append("kl.estimator=k1 in the loss: its gradient is zero in expectation (the samples are fixed), so it does not pull towards the reference; use k3 in the loss (GRPO) or k1 in the reward (REINFORCE++, PPO)")
    if algo.kl_active and kl.mode == "reward" and kl.estimator != "k1":
        out.append(f"kl.estimator={kl.estimator} in the reward: REINFORCE++ and PPO penalise the reward with k1, the unbiased per-token estimate; {kl.estimator} biases the penalty")
    if loss.name == "pg" and loss.get("dual_clip") is not None:
        out.append("dual_clip has no effect with policy_loss=pg (no importance ratio)")
    if (algo.dynamic_sampling or algo.accuracy_band is not None) and algo.sampling_budget <= 1.0:
        out.append("dynamic sampling with sampling_budget=1: no prompt can be generated to refill the batch, so every dropped group shrinks it")
    if algo.prm.enabled and algo.advantage.name != "prime":
        out.append(f"algo.prm.enabled=true with advantage={algo.advantage.name}: the PRM is trained every step but only the prime estimator uses its rewards")
    if algo.ref_update_every and not algo.needs_reference:
        out.append(f"ref_update_every={algo.ref_update_every} has no effect: no reference model is loaded (kl.mode={kl.mode})")
    return out


def _preference_warnings(algo: AlgoConfig) -> list[str]:
    pref, out = algo.preference, []
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


def resolved_preset(name: str) -> AlgoConfig:
    """A preset resolved with nothing over it (what `rlvr algos show` prints)."""
    return algo_config(name, quiet=True)


def preset_rows() -> list[tuple[str, dict[str, Any]]]:
    """Every preset with its resolved settings as plain data (for `rlvr algos list`)."""
    return [(name, dataclasses.asdict(resolved_preset(name))) for name in preset_names()]


class _Presets:
    """Compatibility view of the presets by name (``name in PRESETS``, ``list(PRESETS)``,
    ``PRESETS[name]``: the preset file's settings)."""

    def __contains__(self, name: object) -> bool:
        return name in preset_files()

    def __iter__(self):
        return iter(preset_names())

    def __len__(self) -> int:
        return len(preset_files())

    def __getitem__(self, name: str) -> dict[str, Any]:
        return {"recipe": _default(None, "recipe"), **preset_settings(name)}

    def items(self):
        return [(name, self[name]) for name in self]


PRESETS = _Presets()


__all__ = ["GROUP_RELATIVE", "LEGACY", "LISTING_ORDER", "PARTS", "PRESETS", "PRESET_DIR", "SECTIONS", "AlgoConfig", "Algorithm",
           "CorrectionConfig", "CriticConfig", "KLConfig", "Pairing", "PRMConfig", "PreferenceConfig", "algo_config",
           "combination_warnings", "group_relative", "legacy_keys", "preset_files", "preset_names", "preset_rows",
           "preset_settings", "register_preset", "resolve_algorithm", "resolved_preset"]
