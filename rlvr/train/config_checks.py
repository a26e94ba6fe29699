"""What a run config is refused for on its own, with no torch, no model and no data loaded:
`rlvr train` and `rlvr sft` say these before their heavy imports (a bad value in about a second),
and each recipe says them again when it starts (a run started from Python, `rlvr.train`).

`check_config` picks the checks of the recipe the config runs (`RECIPE_CHECKS`)."""

from __future__ import annotations

import errno
import os
from typing import Any, Callable

from rlvr import UserError
from rlvr.models.device_spec import parse_device_spec


def check_run(cfg: Any, evaluates: bool = True) -> None:
    """Every recipe: ``device`` is spelt as one (`rlvr.models.device_spec`); LoRA is not asked to
    run under FSDP; the task is built with ``task.config`` (a value it refuses, such as
    max_digits=-1, is said here) and has ``task.split`` for training and, when the run
    ``evaluates``, ``eval.split``; ``task.env`` and the ``task.heldout`` tasks are registered."""
    import envs
    import tasks
    from rlvr.train.task_checks import check_splits
    from tasks import hubs

    parse_device_spec(cfg.device)
    if evaluates and cfg.eval.split == cfg.task.split:  # (SFT always evaluates its final model)
        raise UserError(f"eval.split equals task.split ({cfg.task.split!r}): evaluation must use held-out data")
    _check_path_length("model.name_or_path", cfg.model.name_or_path)
    if cfg.model.lora.enabled and cfg.distributed == "fsdp":
        raise UserError("model.lora with distributed=fsdp is not supported (rlvr's FSDP checkpoints and engine syncs gather "
                        "full weights; a frozen sharded base with adapters is untested): use distributed=ddp")
    if cfg.task.env:
        registered("task.env", envs.ENVS, cfg.task.env)  # an unknown id, refused with the closest registered ones
    for heldout_id, split in cfg.task.heldout_pairs():
        if not hubs.is_hub_id(heldout_id):  # (a hub's or file's task is checked when it is made)
            registered("task.heldout", tasks.TASKS, heldout_id)
            try:
                tasks.TASKS.make(heldout_id).check_split(split)
            except tasks.TaskError as e:
                raise UserError(f"task.heldout: {e}") from None
    if not hubs.is_hub_id(cfg.task.id) and cfg.task.id in tasks.TASKS.registered_ids():
        check_splits(cfg.task.make(), cfg, evaluates)  # make: the split exists and shares no data set with task.heldout


def _check_path_length(key: str, value: str) -> None:
    """A value too long for this system to look up as a path is neither a path nor a model id."""
    try:
        os.stat(value)
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise UserError(f"{key}: a name of {len(value)} characters ({value[:40]!r}...) is too long to be a path or a model id") from None
    except ValueError:  # an embedded NUL byte
        raise UserError(f"{key}: {value[:40]!r} holds a NUL character; it cannot be a path or a model id") from None


def check_algorithm_run(cfg: Any) -> None:
    """A recipe that runs ``algo``: `check_run` (evaluation on the training split among its checks), and a ``recipe`` the
    preset does not run."""
    check_run(cfg, evaluates=bool(cfg.eval.every or cfg.eval.at_start))
    algo = cfg.algo
    if cfg.recipe not in (None, algo.recipe):
        raise UserError(f"recipe={cfg.recipe} but algo.preset={algo.preset} runs the {algo.recipe} recipe; drop the recipe key")


def check_policy_gradient(cfg: Any) -> None:
    """A group-relative advantage needs groups of at least two completions."""
    check_algorithm_run(cfg)
    if cfg.rollout.group_size == 1 and cfg.algo.group_relative:
        raise UserError(f"rollout.group_size=1 with the {cfg.algo.advantage.name} advantage: it compares completions of the same prompt, "
                        "so with one completion per prompt every advantage is 0 and nothing is learned; use rollout.group_size >= 2")


def check_preference(cfg: Any) -> None:
    """The example source of ``algo.preference.source`` (`SOURCE_CHECKS`) can run this config."""
    check_algorithm_run(cfg)
    SOURCE_CHECKS[cfg.algo.preference.source](cfg)


def check_pairs_source(cfg: Any) -> None:
    """Offline pairs: a pairs file, and nothing to generate asynchronously."""
    if cfg.rollout.async_.max_staleness:
        raise UserError(f"rollout.async.max_staleness={cfg.rollout.async_.max_staleness} with algo.preset={cfg.algo.preset}: "
                        "offline pairs (algo.preference.source=pairs) are fixed data, not samples of the policy, so there is "
                        "nothing to generate asynchronously; drop rollout.async.max_staleness, or use algo.preset=online_dpo")
    if not cfg.pairs.path:
        raise UserError(f"algo.preset={cfg.algo.preset} trains on a pairs file: set pairs.path=FILE "
                        "(build one with `rlvr pairs build --model M --task T --out pairs.jsonl`), or use algo.preset=online_dpo")


def check_online_source(cfg: Any) -> None:
    """Online examples: no pairs file."""
    if cfg.pairs.path:
        raise UserError(f"pairs.path is set but algo.preset={cfg.algo.preset} samples its examples online "
                        "(algo.preference.source=online); use algo.preset=dpo to train on a pairs file")


SOURCE_CHECKS: dict[str, Callable[[Any], None]] = {"pairs": check_pairs_source, "online": check_online_source}
RECIPE_CHECKS: dict[str, Callable[[Any], None]] = {"sft": check_run, "policy_gradient": check_policy_gradient, "preference": check_preference}


def check_config(cfg: Any) -> None:
    """The checks of the recipe ``cfg`` runs (its ``recipe`` key, else its preset's)."""
    algo = getattr(cfg, "algo", None)
    name = cfg.recipe or (algo.recipe if algo is not None else "sft")
    RECIPE_CHECKS.get(name, check_run)(cfg)


def registered(setting: str, registry: Any, key: str) -> Any:
    """``registry``'s spec of ``key``; an unknown one refused naming ``setting`` first (so `rlvr train` names the
    override that set it), with the registry's closest ids."""
    from rlvr.config import ConfigError

    try:
        return registry.spec(key)
    except LookupError as e:  # (a UserError, as every refused setting is, for the Python API's callers too)
        raise ConfigError(f"{setting}: {e}") from None


__all__ = ["RECIPE_CHECKS", "SOURCE_CHECKS", "check_config", "registered"]
