#!/usr/bin/env python
"""Peak memory and time of one training micro-batch's log-probs on a real vocabulary: the plain
forward (full ``[B, L, V]`` logits) beside the chunked head (`rlvr.models.head`), with and without
top-p truncation.

Each case runs in its own process (peak RSS is per process): load the model, build a micro-batch of
``--batch`` sequences of ``--prompt`` + ``--completion`` tokens, then `token_logprobs` with entropy,
and backward, as the policy-gradient update does. Prints a table, writes JSON.

    python scripts/bench_head.py                      # SmolLM2-135M-Instruct (49,152 tokens), 32 x (40 + 48)
    python scripts/bench_head.py --batch 8 --top-p 0.9
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def run_case(args: argparse.Namespace, path: str, top_p: float) -> dict:
    import torch

    from rlvr.models import batch as batch_module
    from rlvr.models.batch import build_token_batch, token_logprobs
    from rlvr.models.loading import load_model

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model)
    if path == "plain":
        batch_module.head_path = lambda *a, **k: False  # the full-logits forward
    vocab = model.get_output_embeddings().weight.shape[0]
    prompts = [torch.randint(0, vocab, (args.prompt,)).tolist() for _ in range(args.batch)]
    completions = [torch.randint(0, vocab, (args.completion,)).tolist() for _ in range(args.batch)]
    batch = build_token_batch(prompts, completions, tok.pad_token_id)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    logp, ent = token_logprobs(model, batch, args.temperature, entropy=True, top_p=top_p)
    mask = batch.completion_mask
    ((logp * mask).sum() / mask.sum()).backward()
    seconds = time.perf_counter() - t
    return {"path": path, "top_p": top_p, "seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_after_load_mb": base_rss, "vocab": vocab, "mean_logp": float((logp * mask).sum() / mask.sum())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct", help="a model folder, .gguf file or built-in name")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--prompt", type=int, default=40)
    p.add_argument("--completion", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--top-p", type=float, default=0.9, help="the truncated cases' top-p")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="bench_results/head")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--case-top-p", type=float, help=argparse.SUPPRESS)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        result = run_case(args, args.worker, args.case_top_p)
        (out / f"{args.worker}-{args.case_top_p}.json").write_text(json.dumps(result))
        return 0

    from rlvr.models.paths import resolve_model

    args.model = resolve_model(args.model)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    rows = []
    for top_p in (1.0, args.top_p):
        for path in ("plain", "chunked"):
            print(f"running {path}, top-p {top_p} ...", flush=True)
            cmd = [sys.executable, __file__, *sys.argv[1:], "--model", args.model, "--worker", path, "--case-top-p", str(top_p)]
            subprocess.run(cmd, check=True, env=env, stderr=subprocess.DEVNULL)
            rows.append(json.loads((out / f"{path}-{top_p}.json").read_text()))
    print(f"\n{args.model}: {args.batch} x ({args.prompt} + {args.completion}) tokens, vocabulary {rows[0]['vocab']}, "
          f"temperature {args.temperature}, forward + entropy + backward, {args.threads} threads")
    header = f"{'path':8} {'top-p':>6} {'seconds':>8} {'peak RSS MB':>12} {'after load MB':>14} {'mean logp':>10}"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(f"{r['path']:8} {r['top_p']:6.2f} {r['seconds']:8.1f} {r['peak_rss_mb']:12.0f} {r['rss_after_load_mb']:14.0f} {r['mean_logp']:10.4f}")
    (out / "summary.json").write_text(json.dumps({"settings": {k: v for k, v in vars(args).items() if k not in ("worker", "case_top_p")},
                                                  "rows": rows}, indent=2))
    print(f"wrote {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
