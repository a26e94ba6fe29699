"""`rlvr compare EVAL_DIR EVAL_DIR...` and `rlvr compare --arm NAME=DIR,DIR,... --arm ...`: accuracies and
paired differences of greedy evaluations.

Directories: give them in the order you want differences taken (each later one minus each earlier
one), e.g. before, control, after: the last row is then the gain beyond format.

Arms (several seeds of one configuration each): ``--arm grpo=runs/a/s0,runs/a/s1,runs/a/s2`` per
configuration, the seeds in the same order in every arm; each arm's mean accuracy over its seeds
with a 95% interval across seeds, and each arm's difference to the reference arm (``--reference``,
default the first), paired by problem within a seed and aggregated over seeds.
"""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare greedy evaluations on the same problems (paired 95%% intervals of the differences); "
                                       "--arm NAME=DIR,DIR,... aggregates several seeds per configuration")
    p.add_argument("reports", nargs="*", metavar="EVAL_DIR", help="directories written by `rlvr eval` on the same task and split")
    p.add_argument("--labels", default=None, help="comma-separated names for the directories (default: their folder names)")
    p.add_argument("--arm", action="append", default=[], metavar="NAME=DIR,DIR,...",
                   help="one configuration: its evaluation directories, one per seed, in the same seed order in every arm (repeatable)")
    p.add_argument("--reference", default=None, help="with --arm: the arm the others are compared with (default: the first)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlvr import UserError

    if args.arm and args.reports:
        raise UserError("give either evaluation directories or --arm NAME=DIR,DIR,..., not both")
    if args.arm:
        return _arms(args)
    if not args.reports:
        raise UserError("give the evaluation directories to compare (EVAL_DIR EVAL_DIR ...), or --arm NAME=DIR,DIR,... per configuration")
    if args.reference:
        raise UserError("--reference names an arm: use it with --arm")
    return _pairwise(args)


def _pairwise(args: argparse.Namespace) -> int:
    from rlvr import UserError
    from rlvr.eval.compare import GreedyResult, compare, render

    labels = args.labels.split(",") if args.labels else [None] * len(args.reports)
    if len(labels) != len(args.reports):
        raise UserError(f"--labels names {len(labels)} directories but {len(args.reports)} were given")
    results = [GreedyResult.load(path, label) for path, label in zip(args.reports, labels)]
    shared, diffs = compare(results)
    if args.json:
        print(json.dumps({"problems": len(shared), "accuracy": {r.label: sum(r.passed[k] for k in shared) / len(shared) for r in results},
                          "differences": [d.__dict__ | {"excludes_zero": d.excludes_zero} for d in diffs]}, indent=2))
    else:
        print(render(results, shared, diffs))
    return 0


def parse_arm(spec: str):
    """``NAME=DIR,DIR,...`` as an `rlvr.eval.compare.Arm` of the loaded evaluations."""
    from rlvr import UserError
    from rlvr.eval.compare import Arm, GreedyResult

    name, sep, dirs = spec.partition("=")
    paths = [d for d in dirs.split(",") if d]
    if not sep or not name or not paths:
        raise UserError(f"--arm {spec!r}: expected NAME=DIR,DIR,... (one evaluation directory per seed)")
    return Arm(name, tuple(GreedyResult.load(path, f"{name}[{i}]") for i, path in enumerate(paths)))


def _arms(args: argparse.Namespace) -> int:
    from rlvr import UserError
    from rlvr.eval.compare import compare_arms, render_arms

    if args.labels:
        raise UserError("--labels names directories; with --arm the names are the arms'")
    arms = [parse_arm(spec) for spec in args.arm]
    shared, summaries, diffs = compare_arms(arms, args.reference)
    if args.json:
        print(json.dumps({"problems": len(shared),
                          "arms": [s.__dict__ | {"seeds": s.seeds} for s in summaries],
                          "differences": [d.__dict__ | {"excludes_zero": d.excludes_zero} for d in diffs]}, indent=2))
    else:
        print(render_arms(arms[0].runs[0], shared, summaries, diffs))
    return 0
