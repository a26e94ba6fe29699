"""The ``sft`` recipe (`rlvr sft CONFIG`, or `rlvr train CONFIG` on a config with ``recipe: sft``):
next-token loss on a task's worked solutions.

With ``model.name_or_path: tiny`` it first builds the embedded tiny model, so a machine with no
network gets a base model from scratch; any other id or directory is fine-tuned as is. Runs on the
harness, so it checkpoints, resumes (``resume=true``) and stops cleanly on a signal like RL runs.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rlvr import UserError
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout.episodes import TokenizedDemonstration, tokenize_demonstration
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.prompts import resolve_style
from rlvr.models.batch import TokenBatch, build_token_batch, scatter_completion_values
from rlvr.train.sft_config import SFTConfig
from rlvr.train.harness import Harness
from rlvr.train.task_checks import open_training_task


@dataclass
class NextTokenObjective:
    """Token-mean cross-entropy of the completion tokens of a `TokenBatch` over the whole minibatch."""

    model: torch.nn.Module
    batch: TokenBatch
    device: torch.device

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        return self.batch.completion_mask[rows].sum().reshape(1)

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        sub = self.batch.select(rows).to(self.device)
        logits = self.model(input_ids=sub.input_ids, attention_mask=sub.attention_mask).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), sub.input_ids[:, 1:], reduction="none")
        tokens = float(sub.completion_mask.sum())
        loss = (nll * sub.completion_mask).sum() / totals[0].clamp(min=1)
        return loss, {"nll": float((nll.detach() * sub.completion_mask).sum()) / max(tokens, 1.0)}, tokens


class SFTRecipe:
    """Supervised fine-tuning on ``task.solution`` of each problem of the training split."""

    config_class = SFTConfig

    def __init__(self, cfg: SFTConfig, harness: Harness):
        self.cfg, self.harness = cfg, harness
        self.task = open_training_task(cfg, evaluates=True, say=harness.print, prompts_needed=cfg.steps * cfg.batch_size * harness.num_processes)
        init = cfg.model.name_or_path
        if init == "tiny":  # built once; a resumed LoRA run loads it again under its adapters
            init = str(cfg.run_dir / "base")
            if harness.resume_from is None:
                if harness.is_main:
                    build_tiny_model(cfg.tiny, Path(init))
                harness.accel.wait_for_everyone()
        model, self.tokenizer = harness.load_policy(init)
        self.policy = harness.trainable("policy", model, cfg.optim, cfg.steps, tokenizer=self.tokenizer)
        self.engine = HFGenerateEngine(self.policy.unwrapped, self.tokenizer, synced=harness.sharded)
        self.style = resolve_style(cfg.prompt, self.tokenizer, cfg.model.name_or_path)
        self.position = 0
        self.total_steps = cfg.steps
        self.title = f"sft {cfg.name} on {self.task.id}"
        self.t0 = time.perf_counter()
        self.last_eval: dict[str, float] = {}

    def step(self, step: int) -> dict[str, float]:
        demos = self._examples(self.cfg.batch_size)
        batch = build_token_batch([d.prompt_ids for d in demos], [d.token_ids for d in demos], self.tokenizer.pad_token_id)
        if any(0 in d.loss_mask for d in demos):  # observations (tool output) are context, not targets
            batch = dataclasses.replace(batch, completion_mask=batch.completion_mask * scatter_completion_values([d.loss_mask for d in demos], batch))
        stats = self.harness.optimizer_step(self.policy, torch.arange(len(demos)),
                                            NextTokenObjective(self.policy.model, batch, self.harness.device),
                                            self.cfg.micro_batch_size, lengths=batch.attention_mask.sum(-1))
        loss = float(self.harness.reduce_sum(torch.tensor([stats["loss"]], dtype=torch.float64))[0])  # each process holds its share
        metrics = {"sft/loss": loss, "optim/lr": stats["lr"], "data/position": float(self.position),
                   "time/elapsed": time.perf_counter() - self.t0}
        if "grad_norm" in stats:
            metrics["optim/grad_norm"] = stats["grad_norm"]
        return metrics

    def _examples(self, count: int) -> list[TokenizedDemonstration]:
        """This process's ``count`` demonstrations, tokenized with their loss masks (an episode's
        observations are 0): the processes read one stream and take consecutive shares of
        ``count x processes`` problems that have a demonstration."""
        world, rank = self.harness.num_processes, self.harness.rank
        stream = self.task.stream(self.cfg.task.split, start=self.position)
        demos, skipped = [], 0
        while len(demos) < count * world:
            problem = next(stream)
            self.position += 1
            turns = self.task.demonstration(problem)
            if not turns:
                skipped += 1
                if skipped > 1000 and not demos:
                    raise UserError(f"task {self.task.id} provides no worked solutions in split {self.cfg.task.split!r}; it cannot be used for SFT")
                continue
            demos.append((problem, turns))
        role = getattr(self.task.env, "observation_role", "tool")  # multi-turn environments name it; others have no observations
        return [tokenize_demonstration(self.tokenizer, self.style.render(self.task.env, p), turns, observation_role=role)
                for p, turns in demos[rank * count:(rank + 1) * count]]

    def evaluate(self) -> dict[str, float]:
        from rlvr.eval.runner import EvalSettings, evaluate

        ev = self.cfg.eval
        settings = EvalSettings(split=ev.split, limit=ev.limit, max_new_tokens=ev.max_new_tokens or 128, chunk_prompts=256,
                                prompt=self.cfg.prompt)
        report = evaluate(self.engine, self.task, settings, progress=False, model_name=self.harness.evaluated_model())
        self.harness.log_report("eval", report)
        self.last_eval = {"eval/accuracy": report["greedy"]["accuracy"]}
        return self.last_eval

    def save_final(self) -> Path:
        """The model in ``final/``, its held-out accuracy logged at the last step (evaluated now
        unless the loop just did)."""
        final = self.harness.save_model(self.policy, self.cfg.run_dir / "final")
        every, last = self.cfg.eval.every, self.harness.current_step  # (before total_steps when a budget stopped the run)
        if not (every and last % every == 0):  # every process: a sharded model generates in step
            self.harness.log(last, self.evaluate())
        if self.harness.is_main:
            acc = self.last_eval.get("eval/accuracy", float("nan"))
            tqdm.write(f"sft: {last} steps in {time.perf_counter() - self.t0:.0f} s; "
                       f"greedy accuracy on {self.cfg.eval.split}: {acc:.3f}; model in {final}")
        return final

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = state["position"]

    def verification(self) -> None:
        """SFT verifies nothing while training."""

    def close(self) -> None:
        pass


def sft(cfg: SFTConfig) -> Path:
    """Run supervised fine-tuning; returns the directory of the trained model (``run_dir/final``)."""
    from rlvr.train.recipes import train

    result = train(cfg)
    if result.final_model is None:
        raise UserError(f"SFT ended with status {result.status!r} after {result.steps} steps; resume it with resume=true")
    return result.final_model


__all__ = ["NextTokenObjective", "SFTConfig", "SFTRecipe", "sft"]
