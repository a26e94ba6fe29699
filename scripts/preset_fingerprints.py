"""Fixed-seed fingerprints of every algorithm preset, to show a refactoring changed no number.

For each preset: a short `rlvr train quickstart` run (2 steps, small batches, one thread, seed 0)
from the same base; the fingerprint is every logged metric except timings, and a SHA-256 of the
final weights. Run it before and after a change and compare the two files:

    python scripts/preset_fingerprints.py --base BASE --out before.json      # on the old tree
    python scripts/preset_fingerprints.py --base BASE --out after.json --compare before.json

BASE is a model folder (e.g. the quickstart's SFT base: `rlvr sft sft_quickstart`). A pairs file
for the offline preset is built from BASE with `rlvr pairs build` (the same command both times).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from safetensors.torch import load_file

SHORT = ["update.steps=2", "optim.warmup_steps=0", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.chunk_prompts=4",
         "rollout.max_new_tokens=24", "eval.at_start=false", "eval.every=0", "log.checkpoint_every=0", "log.progress=false",
         "log.tensorboard=false", "log.plot=false", "threads=1", "seed=0",
         # one decoder named: decode=auto picks by a timing measurement, and on a loaded machine it may pick another
         # (kv and static sample different tokens from one seed), which would change the numbers between two runs
         "rollout.hf.decode=kv"]
# wall-clock and throughput numbers differ between any two runs
TIMING = ("time", "sec", "per_s", "throughput", "tokens_per", "elapsed", "wall", "rss", "memory", "bytes")


def cli(*args: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"rlvr {' '.join(args[:3])} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def weights_sha(folder: Path) -> str:
    h = hashlib.sha256()
    for file in sorted(folder.glob("*.safetensors")):
        tensors = load_file(str(file))
        for name in sorted(tensors):
            h.update(name.encode())
            h.update(tensors[name].float().numpy().tobytes())
    return h.hexdigest()


def fingerprint(run: Path) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    metrics = [{k: v for k, v in sorted(row.items()) if not any(t in k for t in TIMING)} for row in rows]
    return {"metrics": metrics, "weights": weights_sha(run / "final")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="model folder every run starts from")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--presets", default="", help="comma-separated presets (default: every one rlvr lists)")
    ap.add_argument("--compare", help="a previous output: report every preset whose fingerprint differs")
    args = ap.parse_args()
    presets = [p for p in args.presets.split(",") if p] or list_presets()
    work = Path(tempfile.mkdtemp(prefix="rlvr-fingerprints-"))
    pairs = work / "pairs.jsonl"
    cli("pairs", "build", "--model", args.base, "--task", "arithmetic-v1", "--prompts", "16", "--n", "4", "--max-new-tokens", "24",
        "--threads", "1", "--out", str(pairs))
    out = {}
    for preset in presets:
        cli("train", "quickstart", f"output_dir={work}", f"name={preset}", f"model.name_or_path={args.base}", f"algo.preset={preset}",
            *([f"pairs.path={pairs}", "pairs.batch_size=4"] if preset == "dpo" else []), *SHORT)
        out[preset] = fingerprint(work / preset)
        print(f"{preset}: {out[preset]['weights'][:16]}", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        differ = [p for p in presets if before.get(p) != out[p]]
        missing = [p for p in before if p not in out]
        print(f"identical: {len(presets) - len(differ)} of {len(presets)}" + (f"; differ: {', '.join(differ)}" if differ else "")
              + (f"; not run now: {', '.join(missing)}" if missing else ""))
        sys.exit(1 if differ or missing else 0)


def list_presets() -> list[str]:
    from rlvr.algos.config import preset_names

    return preset_names()


if __name__ == "__main__":
    main()
