"""Supervised warm-up (`rlvr sft CONFIG`): next-token loss on a task's worked solutions.

With ``model.name_or_path: tiny`` it first builds the embedded tiny model, so a machine with no
network gets a base model from scratch; any other id or directory is fine-tuned as is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

import tasks
from rlvr import UserError
from rlvr.config import help_field
from rlvr.models.loading import load_model
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from rlvr.rollout.hf import HFGenerateEngine, render_prompt
from rlvr.runs import RunDir
from rlvr.train.batch import build_token_batch
from rlvr.train.common import ModelConfig, OptimConfig, TaskConfig, make_optimizer, seed_everything, set_threads


@dataclass
class SFTEvalConfig:
    every: int = help_field(0, "Greedy accuracy on `split` every this many steps (0 = only at the end)")
    split: str = help_field("validation", "Held-out split for the accuracy check")
    limit: int | None = help_field(200, "Problems evaluated (None = all)")
    max_new_tokens: int = help_field(128, "Longest completion when evaluating")


@dataclass
class SFTConfig:
    """A supervised warm-up run."""

    name: str = help_field("sft", "Run name: the run directory is output_dir/name")
    output_dir: str = help_field("runs", "Parent folder of run directories")
    seed: int = help_field(0, "Seed for initialisation and data order")
    threads: int = help_field(0, "Torch CPU threads (0 = OMP_NUM_THREADS or torch's default)")
    model: ModelConfig = field(default_factory=ModelConfig)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    steps: int = help_field(500, "Optimizer steps")
    batch_size: int = help_field(64, "Sequences per optimizer step")
    micro_batch_size: int = help_field(64, "Sequences per forward/backward")
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=2e-3, warmup_steps=25))
    eval: SFTEvalConfig = field(default_factory=SFTEvalConfig)
    progress: bool = help_field(True, "Show a progress bar")
    tensorboard: bool = help_field(True, "Write TensorBoard events")

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def _examples(task: tasks.Task, split: str, tokenizer, start: int, count: int) -> tuple[list[list[int]], list[list[int]], int]:
    """Token ids of ``count`` (prompt, solution + eos) pairs from the stream; also the new position."""
    prompts, targets = [], []
    stream = task.stream(split, start=start)
    pos, skipped = start, 0
    while len(prompts) < count:
        problem = next(stream)
        pos += 1
        solution = task.solution(problem)
        if not solution:
            skipped += 1
            if skipped > 1000 and not prompts:
                raise UserError(f"task {task.id} provides no worked solutions in split {split!r}; it cannot be used for SFT")
            continue
        prompts.append(tokenizer(render_prompt(tokenizer, task.env.format_prompt(problem)))["input_ids"])
        targets.append(tokenizer(solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
    return prompts, targets, pos


def sft(cfg: SFTConfig) -> Path:
    """Run supervised fine-tuning; returns the directory of the trained model (``run_dir/final``)."""
    from accelerate import Accelerator

    from rlvr.eval.runner import EvalSettings, evaluate

    set_threads(cfg.threads)
    seed_everything(cfg.seed)
    accel = Accelerator(cpu=not torch.cuda.is_available())
    task = cfg.task.make()
    if cfg.task.split in task.heldout_splits:
        raise UserError(f"task.split {cfg.task.split!r} is held out in {task.id}; SFT must use a training split")
    run = RunDir(cfg.run_dir, tensorboard=cfg.tensorboard, enabled=accel.is_main_process)
    run.write_config(cfg)
    source = cfg.model.name_or_path
    if source == "tiny":
        source = str(build_tiny_model(cfg.tiny, cfg.run_dir / "base"))
    model, tokenizer = load_model(source, cfg.model.dtype, cfg.model.trust_remote_code)
    optimizer, scheduler = make_optimizer(model, cfg.optim, cfg.steps)
    model, optimizer, scheduler = accel.prepare(model, optimizer, scheduler)
    engine = HFGenerateEngine(accel.unwrap_model(model), tokenizer)

    def accuracy() -> float:
        settings = EvalSettings(split=cfg.eval.split, limit=cfg.eval.limit, max_new_tokens=cfg.eval.max_new_tokens, chunk_prompts=256)
        return evaluate(engine, task, settings, progress=False)["greedy"]["accuracy"]

    position, t0 = 0, time.perf_counter()
    bar = tqdm(range(cfg.steps), desc=f"sft {cfg.name}", unit="step", disable=not cfg.progress, dynamic_ncols=True)
    model.train()
    for step in bar:
        prompts, targets, position = _examples(task, cfg.task.split, tokenizer, position, cfg.batch_size)
        batch = build_token_batch(prompts, targets, tokenizer.pad_token_id).to(accel.device)
        total_tokens = batch.completion_mask.sum()
        loss_sum = 0.0
        for micro in torch.arange(len(prompts)).split(cfg.micro_batch_size):
            sub = batch.select(micro)
            logits = model(input_ids=sub.input_ids, attention_mask=sub.attention_mask).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), sub.input_ids[:, 1:], reduction="none")
            loss = (nll * sub.completion_mask).sum() / total_tokens  # token mean over the whole batch
            accel.backward(loss)
            loss_sum += float(loss.detach())
        if cfg.optim.max_grad_norm > 0:
            accel.clip_grad_norm_(model.parameters(), cfg.optim.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        metrics = {"sft/loss": loss_sum, "optim/lr": scheduler.get_last_lr()[0], "time/elapsed": time.perf_counter() - t0}
        if cfg.eval.every and (step + 1) % cfg.eval.every == 0:
            metrics["eval/accuracy"] = accuracy()
        run.log_metrics(step + 1, metrics)
        bar.set_postfix(loss=f"{loss_sum:.4f}")
    final = cfg.run_dir / "final"
    if accel.is_main_process:
        accel.unwrap_model(model).save_pretrained(final)
        tokenizer.save_pretrained(final)
        acc = accuracy()
        run.log_metrics(cfg.steps, {"eval/accuracy": acc})
        run.write_state(status="completed", steps=cfg.steps, final_model=str(final), eval_accuracy=acc, wall_s=time.perf_counter() - t0)
        run.plot(title=f"SFT {cfg.name} on {task.id}")
        tqdm.write(f"sft: {cfg.steps} steps in {time.perf_counter() - t0:.0f} s; greedy accuracy on {cfg.eval.split}: {acc:.3f}; model in {final}")
    run.close()
    return final
