#!/usr/bin/env python
"""Rollout throughput: the HF engine on each of its decoders beside vLLM, on the same model, device,
precision, prompts and sampling.

``hf`` is the default HF engine (``rollout.hf.decode=auto``: the decoder it measures fastest);
``hf-NAME`` the same engine on one decoder (``hf-kv``, ``hf-static``, ``hf-cuda_graph``, ``hf-compiled``,
``hf-generate``: Hugging Face ``generate`` as TRL calls it, ``hf-continuous``: transformers'
``generate_batch``). All engines are built by `rlvr.rollout.engines.make_engine` and run in their own
subprocess, one after the other, with the same thread count, on ``--device`` in ``--dtype``; each does
one untimed warm-up call (graph capture, compilation, ``auto``'s measurement), then ``--repeats``
timed calls of ``--prompts`` arithmetic prompts x ``--n`` samples. Reports completion tokens per
second (median over repeats), engine start-up and warm-up time, the device, precision and attention
kernel, and the GPU memory peak; prints a table, writes JSON.

    python scripts/bench_rollout.py --model runs/quickstart/sft/final --engines hf-kv,hf-static,hf-generate
    python scripts/bench_rollout.py --model smollm2-135m-instruct --engines hf,hf-cuda_graph,hf-generate --dtype bfloat16   # on a GPU
    .venv-vllm/bin/python scripts/bench_rollout.py --engines hf,vllm      # vLLM: its own environment (scripts/setup_vllm_env.sh)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_engine(name: str, model: str, args: argparse.Namespace) -> dict:
    import torch

    import tasks
    from rlvr.models.loading import load_model
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.config import HFEngineConfig, RolloutConfig
    from rlvr.rollout.engines import make_engine

    from transformers import AutoTokenizer

    from rlvr.rollout.prompts import PromptConfig, resolve_style

    from rlvr.models.attention import attention_kernel
    from rlvr.models.device import resolve_device

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device, "--device")
    task = tasks.make("arithmetic-v1")
    # as training shows them: through the chat template when the model has one (a chat model given a
    # raw prompt ends its turn at once, which would time nothing)
    style = resolve_style(PromptConfig(), AutoTokenizer.from_pretrained(model), model)
    prompts = [style.render(task.env, p) for p in task.problems("validation")[: args.prompts]]
    t = time.perf_counter()
    if name == "hf" or name.startswith("hf-"):
        m, tok = load_model(model, dtype=args.dtype)
        decode = name.removeprefix("hf-") if name != "hf" else "auto"
        engine = make_engine(RolloutConfig(hf=HFEngineConfig(decode=decode)), m.to(device), tok)
    else:
        cfg = RolloutConfig(engine="vllm")
        cfg.vllm.dtype, cfg.vllm.enforce_eager = args.dtype, device.type == "cpu"
        engine = make_engine(cfg, model_path=model, seed=args.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    startup = time.perf_counter() - t
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed)
    t = time.perf_counter()
    engine.generate(prompts, args.n, sampling)
    warmup = time.perf_counter() - t
    walls, tokens = [], []
    for r in range(args.repeats):
        sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed + 1 + r)
        t = time.perf_counter()
        comps = engine.generate(prompts, args.n, sampling)
        walls.append(time.perf_counter() - t)
        tokens.append(sum(len(c.token_ids) for c in comps))
    rates = [k / w for k, w in zip(tokens, walls)]
    described = engine.describe()
    return {"engine": name, "device": str(device), "gpu": described.get("name"), "dtype": described.get("dtype", args.dtype),
            "attention": described.get("attention") or (attention_kernel(m) if name.startswith("hf") else None),
            "decoder": described.get("decoder"), "decoder_choice": described.get("decoder_choice"),
            "peak_gpu_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
            "startup_s": startup, "warmup_s": warmup, "wall_s": walls,
            "completion_tokens": tokens, "tokens_per_s": rates, "median_tokens_per_s": statistics.median(rates),
            "mean_completion_len": sum(tokens) / (len(tokens) * args.prompts * args.n),
            **({"vllm_version": __import__("vllm").__version__} if name == "vllm" else {})}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="runs/quickstart/sft/final", help="model directory (default: the quickstart's SFT base)")
    p.add_argument("--engines", default="hf,hf-kv,hf-static,hf-generate",
                   help="comma-separated: hf (auto), hf-DECODER (kv, static, cuda_graph, compiled, generate, continuous), vllm")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="float32", help="the model's precision, the same for every engine (parity)")
    p.add_argument("--device", default="auto", help="auto (the GPU when torch sees one), cpu, cuda or cuda:N: the same for every engine")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench_results/rollout")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.worker:
        from rlvr.models.paths import resolve_model

        try:  # a built-in name (smollm2-135m-instruct) or a .gguf file: its converted folder
            args.model = resolve_model(args.model)
        except Exception as e:
            print(f"no model at {args.model} ({e}): build one with `rlvr sft sft_quickstart` or pass --model")
            return 2

    if args.worker:  # one engine, in its own process
        (out / f"{args.worker}.json").write_text(json.dumps(run_engine(args.worker, args.model, args)))
        return 0

    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    rows = []
    for name in args.engines.split(","):
        print(f"running {name} ...", flush=True)
        cmd = [sys.executable, __file__, "--worker", name, *sys.argv[1:], "--model", args.model]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows.append(json.loads((out / f"{name}.json").read_text()))

    vllm_row = next((r for r in rows if r["engine"] == "vllm"), None)
    print(f"\nmodel {args.model}; vLLM {vllm_row.get('vllm_version', '?') if vllm_row else 'not run'}")
    first = rows[0]
    where = first["device"] + (f" ({first['gpu']})" if first.get("gpu") else "")
    print(f"{args.prompts} arithmetic prompts x {args.n} samples, up to {args.max_new_tokens} new tokens, temperature 1, "
          f"{args.dtype}, {args.threads} threads, device {where}, median of {args.repeats}")
    header = (f"{'engine':14} {'decoder':11} {'attention':9} {'tokens/s':>10} {'wall s':>8} {'tokens':>8} {'mean len':>9} "
              f"{'start-up s':>11} {'warm-up s':>10} {'GPU MB':>8}")
    print(header + "\n" + "-" * len(header))
    for r in rows:
        gpu = f"{r['peak_gpu_mb']:8.0f}" if r.get("peak_gpu_mb") is not None else f"{'-':>8}"
        print(f"{r['engine']:14} {str(r.get('decoder') or '-'):11} {str(r.get('attention') or '-'):9} {r['median_tokens_per_s']:10.0f} "
              f"{statistics.median(r['wall_s']):8.2f} {statistics.median(r['completion_tokens']):8.0f} {r['mean_completion_len']:9.1f} "
              f"{r['startup_s']:11.1f} {r['warmup_s']:10.1f} {gpu}")
    by = {r["engine"]: r for r in rows}
    if "hf-generate" in by:
        for r in rows:
            if r["engine"] != "hf-generate":
                print(f"{r['engine']} / hf-generate: {r['median_tokens_per_s'] / by['hf-generate']['median_tokens_per_s']:.2f}x tokens/s")
    summary = {"settings": {k: v for k, v in vars(args).items() if k != "worker"}, "rows": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"wrote {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
