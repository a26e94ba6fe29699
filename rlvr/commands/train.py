"""`rlvr train CONFIG [key=value ...]`: an RL training run."""

from __future__ import annotations

import argparse
import os


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="run RL training from a YAML config (a file or a built-in name such as 'quickstart')",
                       description="Keys of the config can be overridden as key=value, e.g. optim.lr=1e-5 algo.preset=dr_grpo. "
                                   "`rlvr train --show-config` lists every key with its default and meaning.")
    p.add_argument("config", nargs="?", help="YAML file or built-in config name")
    p.add_argument("overrides", nargs="*", help="key=value overrides (dotted keys)")
    p.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    p.add_argument("--show-config", action="store_true", help="print the resolved config (or every key, without CONFIG) and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from rlvr.config import describe, load_config, to_dict
    from rlvr.train.rl import TrainConfig, train

    if args.show_config and not args.config:
        for key, default, help in describe(TrainConfig):
            print(f"{key:32} {default:14} {help}")
        return 0
    if not args.config:
        raise SystemExit("rlvr train: a CONFIG is required (a YAML file or a built-in name such as 'quickstart')")
    cfg = load_config(TrainConfig, args.config, args.overrides + (["resume=true"] if args.resume else []))
    if args.show_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    result = train(cfg)
    if os.environ.get("RANK", "0") == "0":  # one summary line under torchrun / accelerate launch
        print(f"{result.status}: {result.steps} steps; run directory {result.run_dir}" + (f"; model in {result.final_model}" if result.final_model else ""))
    return 0 if result.status == "completed" else 1
