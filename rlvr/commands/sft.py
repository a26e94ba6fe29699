"""`rlvr sft CONFIG [key=value ...]`: supervised warm-up on a task's worked solutions."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sft", help="supervised warm-up (builds the embedded tiny model with model.name_or_path=tiny)")
    p.add_argument("config", help="YAML file or built-in config name (e.g. sft_quickstart)")
    p.add_argument("overrides", nargs="*", help="key=value overrides (dotted keys)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.train.sft import SFTConfig, sft

    sft(load_config(SFTConfig, args.config, args.overrides))
    return 0
