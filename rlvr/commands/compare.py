"""`rlvr compare EVAL_DIR EVAL_DIR...`: accuracies and paired differences of greedy evaluations.

Give the directories in the order you want differences taken (each later one minus each earlier
one), e.g. before, control, after: the last row is then the gain beyond format.
"""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare greedy evaluations on the same problems (paired 95%% intervals of the differences)")
    p.add_argument("reports", nargs="+", metavar="EVAL_DIR", help="directories written by `rlvr eval` on the same task and split")
    p.add_argument("--labels", default=None, help="comma-separated names for the directories (default: their folder names)")
    p.add_argument("--json", action="store_true", help="print the differences as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
