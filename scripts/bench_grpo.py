#!/usr/bin/env python
"""GRPO step time, tokens/s and learning per step: rlvr beside TRL's GRPOTrainer.

Both train the same SFT base of the embedded model on the same arithmetic prompts in the same
order, with the same group size (8), prompts per step (32), micro-batch (128 sequences), loss
(per-sequence token mean, then mean over sequences), k3 KL (beta 0.04), clip (0.2), learning rate
and schedule, sampling temperature and completion length. Each framework runs in its own
subprocess, one after the other, with the same torch thread count; then both trained models are
evaluated on the frozen held-out test split (500 problems, greedy). Prints a table, writes JSON.

Both generate a step's 256 completions in one call (rlvr: ``rollout.chunk_prompts=32``; its
default of 16 overlaps verification of one chunk with generation of the next, which pays for slow
verifiers, not for arithmetic's 8 ms).

    python scripts/bench_grpo.py --steps 20             # TRL needs: pip install -e '.[bench]'
    python scripts/bench_grpo.py --model runs/quickstart/sft/final --frameworks rlvr
    python scripts/bench_grpo.py --variant overlap='rollout.overlap=true'   # rlvr, rlvr-overlap and TRL in one run
    python scripts/bench_grpo.py --model smollm2-135m-instruct --steps 6  # a real chat model: the chat profile
    python scripts/bench_grpo.py --model smollm2-135m-instruct --frameworks rlvr,trl,trl-vllm --device cuda   # one GPU

Both frameworks run on ``--device`` (auto: the GPU when torch sees one) in the same precision, and
the held-out evaluations run there too. ``trl-vllm`` is TRL generating with vLLM colocated on the
same GPU (``use_vllm=True, vllm_mode="colocate"``), run when vLLM is installed. The table reports each
run's device, attention kernel and GPU memory peak.

Profiles: ``embedded`` (the numbers above, for the embedded character-level model) and ``chat`` (a
real pretrained chat model: 8 prompts x 4 completions x 48 tokens, micro-batch 32, temperature
0.7 (top-p 1, as TRL scores), learning rate 1e-5, both frameworks given the same chat messages: the question
and the task's answer instruction, rendered by the model's own chat template). ``auto`` picks
``chat`` when the model's tokenizer has a chat template. Held-out accuracy is then measured on the
first 200 test problems.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

@dataclass(frozen=True)
class Profile:
    """The settings both frameworks share."""

    prompts_per_step: int
    group: int
    micro: int
    max_new: int
    lr: float
    warmup: int
    beta: float
    clip: float
    temperature: float
    top_p: float
    chat: bool
    task_config: dict = field(default_factory=dict)
    heldout_limit: int | None = None


PROFILES = {
    "embedded": Profile(32, 8, 128, 64, 1e-4, 2, 0.04, 0.2, 1.0, 1.0, chat=False, task_config={"direct_frac": 0.5}),
    # top-p 1: TRL scores the tempered full distribution, so rlvr does too (under top-p it scores the truncated one)
    "chat": Profile(8, 4, 32, 48, 1e-5, 2, 0.04, 0.2, 0.7, 1.0, chat=True, heldout_limit=200),
    # the smallest run that exercises every path (scripts/gpu_check.sh --cpu): no numbers to compare
    "tiny": Profile(4, 2, 8, 16, 1e-5, 0, 0.04, 0.2, 0.7, 1.0, chat=True, heldout_limit=8),
}


def run_rlvr(model: str, steps: int, out: Path, threads: int, seed: int, extra: tuple[str, ...] = (), name: str = "rlvr",
             prof: Profile = PROFILES["embedded"], device: str = "auto") -> dict:
    from rlvr.config import load_config
    from rlvr.train import TrainConfig, train

    overrides = [
        f"output_dir={out}", f"name={name}", f"model.name_or_path={model}", f"seed={seed}", f"threads={threads}", f"device={device}",
        f"update.steps={steps}", f"rollout.prompts_per_step={prof.prompts_per_step}", f"rollout.group_size={prof.group}",
        f"rollout.max_new_tokens={prof.max_new}", f"rollout.chunk_prompts={prof.prompts_per_step}", f"update.micro_batch_size={prof.micro}",
        f"optim.lr={prof.lr}", f"optim.warmup_steps={prof.warmup}", "optim.schedule=cosine", "algo.preset=grpo", f"algo.kl.coef={prof.beta}",
        "algo.kl.mode=loss", f"algo.policy_loss.clip_low={prof.clip}", f"algo.policy_loss.clip_high={prof.clip}", f"rollout.temperature={prof.temperature}",
        f"rollout.top_p={prof.top_p}", f"prompt.format={'chat' if prof.chat else 'raw'}", f"task.config={json.dumps(prof.task_config)}",
        "eval.every=0", "eval.at_start=false", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false", "log.plot=false",
        "overwrite=true", *extra,
    ]
    result = train(load_config(TrainConfig, "quickstart", overrides))
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    resources = json.loads((result.run_dir / "resources.json").read_text())
    policy = next((m for m in resources["models"] if m["role"] == "policy"), {})
    return {
        "step_s": [r["time/step"] for r in rows],
        "completion_tokens": [r["rollout/response_len"] * prof.prompts_per_step * prof.group for r in rows],
        "reward": [r["reward/mean"] for r in rows],
        "model": str(result.final_model),
        "device": resources["device"].get("device"), "gpu": resources["device"].get("name"), "attention": policy.get("attention"),
        "decoder": (resources.get("decoder") or {}).get("name"),
        "peak_gpu_mb": resources["peak_cuda_bytes"] / 2**20 if "peak_cuda_bytes" in resources else None,
    }


def run_trl(model: str, steps: int, out: Path, threads: int, seed: int, extra: tuple[str, ...] = (), name: str = "trl",
            prof: Profile = PROFILES["embedded"], device: str = "auto") -> dict:
    """TRL's GRPOTrainer on ``device``; ``extra`` holds its precision (``bf16``: ``bf16=True``) and optionally
    ``attn=KERNEL`` (the model's attention; default: transformers'); ``trl-vllm`` generates with vLLM colocated."""
    attn = next((e.split("=", 1)[1] for e in extra if e.startswith("attn=")), None)
    import torch

    from rlvr.models.device import resolve_device

    where = resolve_device(device, "--device")
    if where.type == "cuda":
        torch.cuda.set_device(where)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import tasks
    from envs.types import Problem

    torch.set_num_threads(threads)
    from rlvr.rollout.prompts import RAW, PromptStyle

    task = tasks.make("arithmetic-v1", **prof.task_config)
    stream = task.stream("train", seed=seed)  # the same prompts, in the same order, as rlvr's trainer
    problems = [next(stream) for _ in range(steps * prof.prompts_per_step)]
    env = task.env
    style = PromptStyle(chat=True) if prof.chat else RAW  # rlvr's own rendering: the same messages reach both chat templates
    data = Dataset.from_list([{"prompt": style.render(env, p), "question": p.prompt, "reference": p.reference, "pid": p.id}
                              for p in problems])

    def reward(completions, question, reference, pid, **_):
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]  # conversational: the assistant message
        return [env.verify(Problem(i, q, r), t).reward for q, t, r, i in zip(question, texts, reference, pid)]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.lengths, self.rewards, self._t = [], [], [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self._t)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"] * prof.prompts_per_step * prof.group)
                self.rewards.append(logs.get("reward", float("nan")))

    args = GRPOConfig(
        output_dir=str(out / name), max_steps=steps, seed=seed, use_cpu=where.type == "cpu", bf16="bf16" in extra,
        **(dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3) if name.startswith("trl-vllm") else {}),
        per_device_train_batch_size=prof.micro, gradient_accumulation_steps=prof.prompts_per_step * prof.group // prof.micro,
        num_generations=prof.group, max_completion_length=prof.max_new, temperature=prof.temperature, top_p=prof.top_p, top_k=0,
        learning_rate=prof.lr, lr_scheduler_type="cosine", warmup_steps=prof.warmup, max_grad_norm=1.0, weight_decay=0.0,
        beta=prof.beta, epsilon=prof.clip, loss_type="grpo", scale_rewards="group", num_iterations=1,
        shuffle_dataset=False, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        gradient_checkpointing=False,  # TRL's GRPO default is True (recompute activations); rlvr keeps them, so parity is off
    )
    timer = StepTimer()
    policy = AutoModelForCausalLM.from_pretrained(model, attn_implementation=attn)
    trainer = GRPOTrainer(model=policy, reward_funcs=reward, args=args,
                          train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model), callbacks=[timer])
    trainer.train()
    final = out / name / "final"
    trainer.save_model(str(final))
    trainer.processing_class.save_pretrained(str(final))
    return {"step_s": timer.times, "completion_tokens": timer.lengths, "reward": timer.rewards, "model": str(final),
            "device": str(trainer.args.device), "gpu": torch.cuda.get_device_name(where) if where.type == "cuda" else None,
            "attention": getattr(policy.config, "_attn_implementation", None), "decoder": "vllm" if args.use_vllm else "generate",
            "peak_gpu_mb": torch.cuda.max_memory_allocated(where) / 2**20 if where.type == "cuda" else None}


WORKERS = {"rlvr": run_rlvr, "trl": run_trl}
PRECISIONS = ("fp32", "bf16")  # bf16: autocast with float32 weights (rlvr: model.precision=bf16, TRL: bf16=True)


def precision_of(name: str, default: str) -> str:
    """A framework's precision: its name's suffix (``trl-fp32``), else ``--precision``."""
    suffix = name.rsplit("-", 1)[-1]
    return suffix if suffix in PRECISIONS else default


def worker_overrides(name: str, precision: str, variants: dict[str, str], trl_attn: str | None = None) -> str:
    """What the worker for ``name`` gets: rlvr overrides (its precision first, a variant's after), or
    TRL's precision and attention kernel."""
    if name.startswith("trl"):
        return precision_of(name, precision) + (f" attn={trl_attn}" if trl_attn else "")
    variant = variants.get(name.removeprefix("rlvr-"), "") if name.startswith("rlvr-") else ""
    return f"model.precision={precision_of(name, precision)} {variant}".strip()


def heldout(model: str, threads: int, prof: Profile, device: str = "auto") -> float:
    import torch

    import tasks
    from rlvr.eval.runner import EvalSettings, evaluate
    from rlvr.rollout.config import RolloutConfig
    from rlvr.rollout.engines import make_engine
    from rlvr.rollout.prompts import PromptConfig

    torch.set_num_threads(threads)
    engine = make_engine(RolloutConfig(), model_path=model, device=device, dtype="float32")  # the trained weights' own precision
    settings = EvalSettings(max_new_tokens=prof.max_new, chunk_prompts=256 if not prof.chat else 64, limit=prof.heldout_limit,
                            prompt=PromptConfig(format="chat" if prof.chat else "raw"))
    report = evaluate(engine, tasks.make("arithmetic-v1"), settings, progress=False)
    return report["greedy"]["accuracy"]


def ensure_base(model: str | None, out: Path) -> str:
    if model:
        from rlvr.models.paths import resolve_model

        return resolve_model(model)  # a built-in name (smollm2-135m-instruct) or a .gguf file: its converted folder
    default = Path("runs/quickstart/sft/final")
    if default.exists():
        return str(default)
    from rlvr.config import load_config
    from rlvr.train.sft import SFTConfig, sft

    print("no SFT base given: building one with sft_quickstart (a few minutes)")
    return str(sft(load_config(SFTConfig, "sft_quickstart", [f"output_dir={out}", "name=sft", "log.progress=false", "overwrite=true"])))


def profile_for(model: str) -> str:
    """``chat`` for a model whose tokenizer has its own chat template, else ``embedded``."""
    from transformers import AutoTokenizer

    from rlvr.rollout.prompts import has_own_chat_template

    return "chat" if has_own_chat_template(AutoTokenizer.from_pretrained(model)) else "embedded"


def summarise(name: str, r: dict, skip: int) -> dict:
    times = r["step_s"][skip:] or r["step_s"]
    toks = r["completion_tokens"][skip:] or r["completion_tokens"]
    return {
        "framework": name,
        "median_step_s": statistics.median(times),
        "mean_step_s": statistics.fmean(times),
        "completion_tokens_per_s": sum(toks) / sum(times[: len(toks)]) if toks else float("nan"),
        "train_reward_first5": statistics.fmean(r["reward"][:5]),
        "train_reward_last5": statistics.fmean(r["reward"][-5:]),
        "heldout_after": r["heldout_after"],
        "peak_rss_mb": r.get("peak_rss_mb", float("nan")),
        "device": r.get("device"), "gpu": r.get("gpu"), "attention": r.get("attention"), "decoder": r.get("decoder"),
        "peak_gpu_mb": r.get("peak_gpu_mb"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="SFT base (default: runs/quickstart/sft/final, else built)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frameworks", default="rlvr,trl",
                   help="rlvr, trl, trl-fp32 / trl-bf16 (TRL in the other precision too), trl-vllm (TRL with vLLM colocated; needs vllm and a GPU)")
    p.add_argument("--device", default="auto", help="where every framework trains and evaluates: auto (the GPU when torch sees one), cpu, cuda, cuda:N")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="both frameworks' compute precision (bf16: autocast, float32 weights; measured faster here on a CPU with AVX512-BF16; CPUs without bf16 instructions emulate it)")
    p.add_argument("--skip", type=int, default=2, help="first steps left out of timing (warm-up)")
    p.add_argument("--out", default="bench_results/grpo")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=OVERRIDES",
                   help="another rlvr run in the same benchmark, e.g. overlap='rollout.overlap=true' (space-separated key=value)")
    p.add_argument("--trl-attn", help="TRL's model attention kernel (e.g. eager; default: transformers' default, sdpa)")
    p.add_argument("--profile", choices=("auto", *PROFILES), default="auto",
                   help="shared settings: embedded (the embedded model) or chat (a real chat model); auto: chat when the tokenizer has a chat template")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--overrides", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.worker:  # one framework, in its own process
        worker = WORKERS["trl" if args.worker.startswith("trl") else "rlvr"]
        result = worker(args.model, args.steps, out, args.threads, args.seed, tuple(args.overrides.split()), args.worker, PROFILES[args.profile],
                        args.device)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the whole run in this process (Linux: KiB)
        (out / f"{args.worker}.json").write_text(json.dumps(result))
        return 0

    from rlvr.models.device import resolve_device

    resolve_device(args.device, "--device")
    base = ensure_base(args.model, out)
    profile = args.profile if args.profile != "auto" else profile_for(base)
    prof = PROFILES[profile]
    results, rows = {}, []
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    for name in [*args.frameworks.split(","), *(f"rlvr-{v}" for v in variants)]:
        if name.startswith("trl"):
            try:
                import trl  # noqa: F401
            except ImportError:
                print("TRL is not installed (pip install -e '.[bench]'): skipping it")
                continue
        if name.startswith("trl-vllm"):
            import importlib.util

            import torch

            if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
                print(f"{name} needs vLLM and a GPU: skipping it")
                continue
        print(f"running {name} for {args.steps} steps ...", flush=True)
        cmd = [sys.executable, __file__, "--worker", name, "--model", base, "--steps", str(args.steps),
               "--threads", str(args.threads), "--seed", str(args.seed), "--out", str(out), "--profile", profile, "--device", args.device,
               "--overrides", worker_overrides(name, args.precision, variants, args.trl_attn)]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL if name.startswith("trl") else None)
        results[name] = json.loads((out / f"{name}.json").read_text())
        results[name]["heldout_after"] = heldout(results[name]["model"], args.threads, prof, args.device)
        rows.append(summarise(name, results[name], args.skip))
    before = heldout(base, args.threads, prof, args.device)

    print(f"\nGRPO on arithmetic-v1 ({profile} profile), {args.steps} steps of {prof.prompts_per_step} prompts x {prof.group}, "
          f"{args.threads} threads, {args.precision}; held-out ({prof.heldout_limit or 500}, greedy) before RL: {before:.3f}")
    where = next((f"{r['device']}" + (f" ({r['gpu']})" if r.get("gpu") else "") for r in rows if r.get("device")), "?")
    print(f"device {where}")
    header = (f"{'framework':16} {'decoder':10} {'attention':9} {'median step s':>14} {'mean step s':>12} {'compl. tok/s':>13} {'reward first5':>14} "
              f"{'reward last5':>13} {'held-out after':>15} {'peak RSS MB':>12} {'peak GPU MB':>12}")
    print(header + "\n" + "-" * len(header))
    for r in rows:
        gpu = f"{r['peak_gpu_mb']:12.0f}" if r.get("peak_gpu_mb") is not None else f"{'-':>12}"
        print(f"{r['framework']:16} {str(r.get('decoder') or '-'):10} {str(r.get('attention') or '-'):9} {r['median_step_s']:14.2f} "
              f"{r['mean_step_s']:12.2f} {r['completion_tokens_per_s']:13.0f} {r['train_reward_first5']:14.3f} {r['train_reward_last5']:13.3f} "
              f"{r['heldout_after']:15.3f} {r['peak_rss_mb']:12.0f} {gpu}")
    trl_rows = [r for r in rows if r["framework"].startswith("trl")]
    if trl_rows:
        print()
    for trl_row in trl_rows:
        for r in rows:
            if not r["framework"].startswith("trl"):
                print(f"{r['framework']}: median step {r['median_step_s'] / trl_row['median_step_s']:.2f}x {trl_row['framework']}'s "
                      f"({trl_row['median_step_s'] / r['median_step_s']:.2f}x faster)")
    (out / "summary.json").write_text(json.dumps({"heldout_before": before, "profile": profile, "steps": args.steps, "threads": args.threads, "precision": args.precision, "device": args.device, "trl_attn": args.trl_attn, "variants": variants,
                                                   "rows": rows, "per_step": results}, indent=2))
    print(f"wrote {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
