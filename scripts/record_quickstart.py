#!/usr/bin/env python3
"""Measure the README's quickstart and write its record (``records/quickstart.json``, `rlvr.records`).

Runs ``scripts/quickstart.sh`` as a newcomer does (set-up included: on a fresh clone it creates
``.venv``), times it, and records the held-out accuracies before and after GRPO with their 95%
intervals, the mean length of the greedy completions (the fingerprint test's finer check,
``tests/rlvr/test_quickstart_fingerprint.py``), the gain, and each phase's seconds from ``runs/quickstart/summary.json``. The README,
Getting started and the other pages cite these figures; ``tests/test_records.py`` holds them to it.

    python3 scripts/record_quickstart.py            # in a fresh clone, on a quiet machine
    python3 scripts/record_quickstart.py --into ../main/records   # write the record into another checkout
    python3 scripts/record_quickstart.py --name quickstart-avx2     # on another kind of CPU (its own fingerprint)

The figures depend on the kind of CPU (`rlvr.records.cpu_kernels`: torch's kernels round differently on
AVX2 and AVX-512), so each kind measured has its own record; the pages cite ``quickstart`` and name the others.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--into", default=str(ROOT / "records"), help="folder for the record (default: this checkout's records/)")
    ap.add_argument("--name", default="quickstart", help="the record's name: quickstart, or quickstart-KIND on another kind of CPU")
    ap.add_argument("--note", default="", help="what else ran on the machine, where it was not quiet")
    args = ap.parse_args()
    from rlvr.records import kind_name_problem, script_command, write_record

    if problem := kind_name_problem("quickstart", args.name):
        ap.error(problem)
    fresh = not (ROOT / ".venv").exists()
    t0 = time.perf_counter()
    subprocess.run(["bash", str(ROOT / "scripts" / "quickstart.sh")], cwd=ROOT, check=True)
    script_s = time.perf_counter() - t0
    s = json.loads((ROOT / "runs" / "quickstart" / "summary.json").read_text())
    from rlvr.quickstart_report import record_figures

    figures = record_figures(s) | {"script_s": script_s, "setup_s": script_s - s["wall_time"]["total_s"]}

    note = ("a fresh clone: set-up created .venv" if fresh else "an existing .venv") + (f"; {args.note}" if args.note else "")
    command = script_command("record_quickstart", "quickstart", args.name)
    path = write_record(args.name, command, figures, note=note, folder=Path(args.into))
    print(json.dumps(figures, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
