"""`rlvr train CONFIG [key=value ...]`: a training run with the recipe the config names."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="run training from a YAML config (a file, a built-in name such as 'quickstart', or a run directory to resume)",
                       description="Keys of the config can be overridden as key=value, e.g. optim.lr=1e-5 algo.preset=dr_grpo. "
                                   "The preset picks the recipe (policy_gradient for the GRPO family and PPO, preference for dpo, online_dpo "
                                   "and kto: algo.preset=dpo pairs.path=pairs.jsonl); a config with "
                                   "`recipe: sft` runs supervised warm-up. `rlvr train --show-config` lists every key with its default and meaning.")
    p.add_argument("config", nargs="?", help="YAML file, built-in config name, or run directory (with --resume)")
    p.add_argument("overrides", nargs="*", help="key=value overrides (dotted keys)")
    p.add_argument("--resume", action="store_true", help="continue the run from its latest checkpoint, with the run's own config.yaml")
    p.add_argument("--show-config", action="store_true", help="print the resolved config (or every key, without CONFIG) and exit")
    p.set_defaults(func=run, intermixed=True)


def run(args: argparse.Namespace) -> int:
    return run_training(args, command="train")


def check_recipe(cfg, config: str, only_recipe: str | None) -> None:
    """Refuse a config of another recipe than the command runs (`rlvr sft` runs only sft configs)."""
    if only_recipe and (cfg.recipe or "policy_gradient") != only_recipe:
        from rlvr import UserError
        raise UserError(f"{config} configures the {cfg.recipe or 'policy_gradient'} recipe, not {only_recipe}: run it with `rlvr train {config}`")


def check_run(cfg, config: str, only_recipe: str | None = None, overrides: Sequence[str] = ()) -> None:
    """Every check of a loaded run config that needs neither torch nor a model (`rlvr train`'s and
    `rlvr sft`'s, and `rlvr.records`' check of a record's command): the recipe, then
    `rlvr.api.check_before_loading` (the engine and its settings, the reward, the task and environment
    ids and settings, the recipe's own checks). A refusal naming a key that one of ``overrides`` set
    names that override, as the config's own errors do."""
    from rlvr import UserError
    from rlvr.api import check_before_loading
    from rlvr.config import override_named, shown

    try:
        check_recipe(cfg, config, only_recipe)
        check_before_loading(cfg)
    except (UserError, LookupError, ValueError) as e:  # (a registry's unknown id, a task's refusal)
        item = override_named(str(e), overrides)
        if item is None:
            raise
        raise type(e)(f"command-line override {shown(item)}: {e}") from None


def run_training(args: argparse.Namespace, command: str, only_recipe: str | None = None) -> int:
    """Load, check and run a training config (shared by `rlvr train` and `rlvr sft`)."""
    import yaml

    from rlvr.config import describe, to_dict
    from rlvr.train.config import TrainConfig
    from rlvr.train.recipes import load_run_config

    if args.show_config and not args.config:
        cls = TrainConfig
        if only_recipe:
            from rlvr.train.recipes import config_class
            cls = config_class(only_recipe)
        for key, default, help in describe(cls):
            print(f"{key:32} {default:14} {help}")
        return 0
    if not args.config:
        print(f"rlvr {command}: a CONFIG is required (a YAML file or a built-in name such as "
              f"'{'sft_quickstart' if only_recipe == 'sft' else 'quickstart'}'); `rlvr {command} --show-config` lists every key", file=sys.stderr)
        return 2
    cfg = load_run_config(args.config, args.overrides + (["resume=true"] if args.resume else []))
    check_run(cfg, args.config, only_recipe, args.overrides)  # --show-config too: a config it prints is one `train` would run
    if args.show_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True))
        return 0
    # torch and transformers load from here on: every check above is refused without them
    from rlvr.rollout.base import EngineError
    from rlvr.rollout.sync import WeightSyncError
    from rlvr.train.checkpoint import is_out_of_space, out_of_space_message
    from rlvr.train.harness import TrainingError
    from rlvr.train.recipes import train

    try:
        result = train(cfg)
    except (TrainingError, WeightSyncError, EngineError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as e:  # a full disk under the run directory (metrics, the final model)
        if not is_out_of_space(e):
            raise
        where = Path(getattr(e, "filename", None) or cfg.run_dir)
        print(f"error: {out_of_space_message(where)}; free space and continue with `rlvr train {cfg.run_dir} --resume`", file=sys.stderr)
        return 1
    if os.environ.get("RANK", "0") == "0":  # one summary line under torchrun / accelerate launch
        print(f"{result.status}: {result.steps} steps; run directory {result.run_dir}" + (f"; model in {result.final_model}" if result.final_model else ""))
    return 0 if result.status == "completed" else 1
