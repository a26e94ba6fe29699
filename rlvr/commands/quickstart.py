"""`rlvr quickstart`: the embedded default end to end (SFT, held-out eval, GRPO, held-out eval)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="build a tiny model, warm it up, train it with GRPO and evaluate before/after")
    p.add_argument("--output-dir", default="runs", help="parent of the run directory runs/quickstart (default: runs)")
    p.add_argument("--sft", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for sft_quickstart.yaml")
    p.add_argument("--rl", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for quickstart.yaml")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rlvr.quickstart import run_quickstart
    from rlvr.quickstart_report import format_summary

    summary = run_quickstart(args.output_dir, args.sft, args.rl)
    print("\n" + format_summary(summary))
    print(f"\nsummary: {Path(args.output_dir) / 'quickstart' / 'summary.json'}; curves: {summary['rl_run']}/curves.png")
    return 0
