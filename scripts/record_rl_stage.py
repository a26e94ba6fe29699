#!/usr/bin/env python3
"""Measure a variant of the quickstart's RL stage and write its record (``records/NAME.json``, `rlvr.records`).

Runs `rlvr train quickstart` with the given overrides (another preset, LoRA, another learning rate)
from the quickstart's SFT base, and records the held-out greedy accuracy on the 500 frozen test
problems before and after, with 95% intervals, the gain and the mean completion length, exactly as
`rlvr quickstart` measures its own stage (`rlvr.quickstart.heldout`). Accuracies are deterministic
on a CPU (greedy decoding, seeded training), so a loaded machine changes only how long it takes;
no time is recorded.

    python3 scripts/record_rl_stage.py ppo-quickstart algo.preset=ppo
    python3 scripts/record_rl_stage.py lora-quickstart model.lora.r=16 optim.lr=1e-3 --base runs/quickstart/sft/final

Without ``--base`` the base is built first (`rlvr sft sft_quickstart`, about 1.5 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def logged(metrics: Path, keys: list[str]) -> dict[str, float]:
    """The first and last logged value of each of ``keys`` in a run's metrics.jsonl."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    out = {}
    for key in keys:
        values = [row[key] for row in rows if key in row]
        if not values:
            raise SystemExit(f"--metric {key}: the run logged no such metric ({metrics})")
        name = key.replace("/", "_")
        out[f"{name}_first"], out[f"{name}_last"] = values[0], values[-1]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="the record's name (records/NAME.json)")
    ap.add_argument("overrides", nargs="*", help="overrides of the quickstart RL config (key=value)")
    ap.add_argument("--base", help="the quickstart's SFT base (default: build it with rlvr sft sft_quickstart)")
    ap.add_argument("--into", default=str(ROOT / "records"), help="folder for the record (default: this checkout's records/)")
    ap.add_argument("--metric", action="append", default=[],
                    help="a logged metric (e.g. eval/accuracy) whose first and last values to record too, as KEY_first and KEY_last")
    ap.add_argument("--note", default="", help="anything a reader of the record should know")
    args = ap.parse_args()
    from rlvr.records import commit, write_record

    started_at = commit()

    from rlvr.config import load_config
    from rlvr.quickstart import SFT_CONFIG, heldout, heldout_settings, mean_completion_chars, rl_stage
    from rlvr.train.sft import SFTConfig, sft

    work = Path(tempfile.mkdtemp(prefix=f"rlvr-record-{args.name}-"))
    sft_cfg = load_config(SFTConfig, SFT_CONFIG, [f"output_dir={work}", "log.progress=false"])
    base = Path(args.base) if args.base else sft(sft_cfg)
    task, max_new = heldout_settings(sft_cfg)
    before = heldout(base, task, work / "eval_before", max_new)
    result = rl_stage(base, str(work), ["log.progress=false", *args.overrides])
    after = heldout(result.final_model, task, work / "eval_after", max_new)
    b, a = before["greedy"], after["greedy"]
    figures = {
        "accuracy_before": b["accuracy"], "accuracy_after": a["accuracy"],
        "before_ci_low": b["ci95"][0], "before_ci_high": b["ci95"][1], "after_ci_low": a["ci95"][0], "after_ci_high": a["ci95"][1],
        "gain_points": 100 * (a["accuracy"] - b["accuracy"]), "problems": before["problems"],
        "chars_before": mean_completion_chars(before), "chars_after": mean_completion_chars(after),
    }
    figures |= logged(result.run_dir / "metrics.jsonl", args.metric)
    command = " ".join(["python3 scripts/record_rl_stage.py", args.name, *map(shlex.quote, args.overrides),
                        *(f"--metric {m}" for m in args.metric)])
    path = write_record(args.name, command, figures, note=args.note, folder=Path(args.into), at=started_at)
    print(json.dumps(figures, indent=1))
    print(f"wrote {path} (runs in {work})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
