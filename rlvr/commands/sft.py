"""`rlvr sft CONFIG [key=value ...]`: supervised warm-up on a task's worked solutions (the ``sft`` recipe)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sft", help="supervised warm-up (builds the embedded tiny model with model.name_or_path=tiny)")
    p.add_argument("config", nargs="?", help="YAML file, built-in config name (e.g. sft_quickstart), or run directory (with --resume)")
    p.add_argument("overrides", nargs="*", help="key=value overrides (dotted keys)")
    p.add_argument("--resume", action="store_true", help="continue the run from its latest checkpoint, with the run's own config.yaml")
    p.add_argument("--show-config", action="store_true", help="print the resolved config (or every key, without CONFIG) and exit")
    p.set_defaults(func=run, intermixed=True)


def run(args: argparse.Namespace) -> int:
    from rlvr.commands.train import run_training

    return run_training(args, command="sft", only_recipe="sft")
