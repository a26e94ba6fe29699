#!/usr/bin/env python3
"""Run one `rlvr eval` and write its record (``records/NAME.json``, `rlvr.records`): greedy accuracy,
its 95% interval, problems and correct answers, the mean completion tokens, and the shares of
truncated, empty and answerless completions.

    python3 scripts/record_eval.py smollm2-arithmetic -- --model smollm2-135m-instruct --task arithmetic-v1 --limit 200 --max-new-tokens 96

Everything after ``--`` is passed to `rlvr eval` (its ``--out`` is set here). Greedy accuracy does
not depend on the machine's load; no time is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="the record's name (records/NAME.json)")
    ap.add_argument("--into", default=str(ROOT / "records"), help="folder for the record (default: this checkout's records/)")
    ap.add_argument("--note", default="", help="anything a reader of the record should know")
    ap.epilog = "-- then the arguments of rlvr eval (without --out)"
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, eval_args = ap.parse_args(argv[:split]), argv[split + 1:]
    from rlvr.records import commit, write_record

    started_at = commit()
    if not eval_args or "--out" in eval_args:
        ap.error("give rlvr eval's arguments after -- (without --out)")
    out = Path(tempfile.mkdtemp(prefix=f"rlvr-record-{args.name}-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([sys.executable, "-m", "rlvr.cli", "eval", *eval_args, "--out", str(out)], cwd=ROOT, env=env, check=True)
    report = json.loads((out / "report.json").read_text())
    g = report["greedy"]
    figures = {"accuracy": g["accuracy"], "correct": g["correct"], "problems": report["problems"],
               "ci_low": g["ci95"][0], "ci_high": g["ci95"][1], "mean_completion_tokens": g["mean_completion_tokens"],
               "truncated_rate": g["truncated_rate"], "empty_rate": g["empty_rate"], "no_answer_rate": g["no_answer_rate"]}

    command = " ".join(["python3 scripts/record_eval.py", args.name, "--", *map(shlex.quote, eval_args)])
    path = write_record(args.name, command, figures, note=args.note, folder=Path(args.into), at=started_at)
    print(json.dumps(figures, indent=1))
    print(f"wrote {path} (report in {out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
