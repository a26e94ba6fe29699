"""Training recipes by name, and the one entry point that runs any of them.

A recipe is a class built from its config and a `rlvr.train.harness.Harness` that says what one
training step does (see `rlvr.train.harness.Recipe`). Its config class is registered beside it
(`RECIPE_CONFIGS`, the recipe's ``config_class``) from a module without torch, so a config is read,
checked and refused without importing the recipe. Which recipe runs is data: a config's
``recipe`` key, or else the recipe its ``algo.preset`` names (`rlvr/algos/presets/NAME.yaml`), so
`rlvr train CONFIG` dispatches by lookup and a new recipe is one registration.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from envs.registry import Registry
from rlvr.config import CONFIG_DIR, ConfigError, apply_overrides, build_with_overrides, in_file, override_named, read_config, shown
from rlvr.rollout.server_health import require_servers
from rlvr.train.config import RunConfig

if TYPE_CHECKING:  # the harness imports torch; reading a config must not
    from rlvr.train.harness import TrainResult

RECIPES: Registry = Registry("training recipe", versioned=False)
RECIPES.register("sft", "rlvr.train.sft:SFTRecipe", description="supervised fine-tuning on a task's worked solutions")
RECIPES.register("policy_gradient", "rlvr.train.policy_gradient:PolicyGradient",
                 description="GRPO family and PPO: sample groups, verify, advantages, clipped policy updates")
RECIPES.register("preference", "rlvr.train.preference:PreferenceRecipe",
                 description="DPO (offline pairs or online), IPO, cDPO/rDPO, SLiC, KTO: verified-correct over verified-wrong")
RECIPE_CONFIGS: Registry = Registry("training recipe config", versioned=False)
RECIPE_CONFIGS.register("sft", "rlvr.train.sft_config:SFTConfig")
RECIPE_CONFIGS.register("policy_gradient", "rlvr.train.config:TrainConfig")
RECIPE_CONFIGS.register("preference", "rlvr.train.preference.config:PreferenceTrainConfig")


def recipe_name(data: dict[str, Any]) -> str:
    """The recipe a raw config mapping asks for: its ``recipe`` key, else its preset's."""
    from rlvr.algos.config import AlgoConfig, preset_settings

    if data.get("recipe"):
        return str(data["recipe"])
    algo = data.get("algo") or {}
    preset = algo.get("preset") if isinstance(algo, dict) else None
    if preset is None:  # left out or null: the default
        preset = "grpo"
    return preset_settings(preset).get("recipe", AlgoConfig.recipe)


def legacy_keys() -> dict[str, str]:
    """Every old config-key spelling rlvr still recognises, dotted, with its current spelling: the
    ``RENAMED`` maps of every recipe's config classes (`rlvr.config.renamed_keys`) and the
    algorithm's old flat keys (`rlvr.algos.config.legacy_keys`). Shipped configs and the docs use
    none of them (tests/test_docs.py)."""
    from rlvr.algos.config import legacy_keys as algo_legacy_keys
    from rlvr.config import renamed_keys

    out = algo_legacy_keys()
    for name in RECIPES.ids():
        out |= renamed_keys(config_class(name))
    return out


def config_class(name: str) -> type:
    """The config class of recipe ``name`` (the recipe's ``config_class``, without importing the recipe)."""
    if name not in RECIPES:
        raise ConfigError(f"recipe {name!r} is unknown; recipes: {', '.join(RECIPES.ids())}")
    return RECIPE_CONFIGS.get(name) if name in RECIPE_CONFIGS else RECIPES.get(name).config_class


def load_run_config(source: str | Path, overrides: list[str]) -> RunConfig:
    """The config of a run from a YAML file, a built-in name or a run directory, with ``key=value``
    overrides, as the class of the recipe it asks for.

    With ``resume=true`` the run's own resolved ``config.yaml`` is the base (so only the run name
    is needed to continue it); the overrides apply on top (e.g. ``update.steps=60`` to go on)."""
    path = Path(source)
    if "resume=true" in [o.replace(" ", "").lower() for o in overrides] and not path.is_file() and not (path / "config.yaml").is_file():
        if path.is_dir():
            raise ConfigError(f"{path} is not a run directory (it holds no config.yaml); resume a run by its directory, e.g. runs/NAME")
        if not (CONFIG_DIR / f"{source}.yaml").is_file():
            raise ConfigError(f"no run directory {source}: resume a run by its directory (runs/NAME, with its config.yaml)")
    if path.is_dir() and (path / "config.yaml").is_file():  # a run directory: its config, and it stays where it is
        overrides = [f"output_dir={path.parent}", f"name={path.name}", *overrides]
        source = path / "config.yaml"
    cfg = _build(*read_config(source), overrides)
    saved = cfg.run_dir / "config.yaml"
    if cfg.resume and saved.is_file() and saved.resolve() != Path(source).resolve():
        cfg = _build(*read_config(saved), [*overrides, "resume=true"])
    return cfg


def _build(data: dict[str, Any], where: str, overrides: list[str]) -> RunConfig:
    try:
        cls = config_class(recipe_name(apply_overrides(RunConfig, data, overrides)))
    except ConfigError as e:  # an unknown recipe or preset: named as the override that set it, as the config's own errors are
        item = override_named(str(e), overrides)
        if item is None:
            raise in_file(e, where) from None
        raise ConfigError(f"command-line override {shown(item)}: {e}") from None
    return build_with_overrides(cls, data, where, overrides)


def train(cfg: RunConfig) -> TrainResult:
    """Run ``cfg`` end to end with the recipe it names."""
    from rlvr.train.harness import Harness

    name = cfg.recipe or recipe_name({"algo": {"preset": getattr(getattr(cfg, "algo", None), "preset", "grpo")}})
    recipe_cls = RECIPES.get(name)
    if not isinstance(cfg, recipe_cls.config_class):
        raise ConfigError(f"recipe {name!r} takes a {recipe_cls.config_class.__name__}, got a {type(cfg).__name__}")
    rollout = getattr(cfg, "rollout", None)
    if rollout is not None and rollout.engine == "vllm_server":  # before anything loads: servers still starting are waited for
        require_servers(rollout.vllm.server_urls or [rollout.vllm.server_url], rollout.vllm.server_wait_s)
    harness = Harness(cfg)
    try:
        recipe = recipe_cls(cfg, harness)
    except BaseException:
        harness.discard_failed_start()
        raise
    return harness.run(recipe)


__all__ = ["RECIPES", "RECIPE_CONFIGS", "config_class", "load_run_config", "recipe_name", "train"]
