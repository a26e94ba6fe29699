"""Config sections and helpers shared by every trainer (SFT, RL)."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from rlvr.config import help_field


@dataclass
class ModelConfig:
    """The policy to train."""

    name_or_path: str = help_field("tiny", "Hugging Face model id or local directory; 'tiny' builds the embedded model from `tiny` (SFT only)")
    dtype: Literal["float32", "bfloat16", "float16"] = help_field("float32", "Parameter dtype")
    trust_remote_code: bool = help_field(False, "Allow model code from the hub (only for models you trust)")


@dataclass
class TaskConfig:
    """The task to train on."""

    id: str = help_field("arithmetic-v1", "Registered task id (see `rlvr tasks list`)")
    config: dict[str, Any] = help_field({}, "Task configuration overriding its defaults")
    split: str = help_field("train", "Split to train on (held-out splits are refused)")
    env: str | None = help_field(None, "Environment id replacing the task's own verifier (None = the task's)")
    env_kwargs: dict[str, Any] = help_field({}, "Keyword arguments for that environment")
    heldout: list[str] = help_field([], "Other tasks held out for evaluation, as ID or ID:SPLIT (default split: test); training refuses a split that may share problems with any (e.g. hendrycks-math-v1:test with math500-v1)")

    def make(self):
        """The configured task, with its environment replaced if ``env`` is set; refuses a
        training split that may share problems with a held-out one (`tasks.assert_disjoint`)."""
        import tasks

        task = tasks.make(self.id, **self.config)
        if self.env:
            task.env_id, task.env_kwargs = self.env, dict(self.env_kwargs)
        heldout = [(entry.split(":", 1)[0], entry.split(":", 1)[1] if ":" in entry else "test") for entry in self.heldout]
        tasks.assert_disjoint((task, self.split), heldout)
        return task


@dataclass
class OptimConfig:
    """AdamW and the learning-rate schedule."""

    lr: float = help_field(1e-5, "Peak learning rate")
    weight_decay: float = help_field(0.0, "AdamW weight decay")
    betas: list[float] = help_field([0.9, 0.999], "AdamW betas")
    schedule: Literal["cosine", "linear", "constant"] = help_field("cosine", "Decay after warm-up")
    warmup_steps: int = help_field(0, "Optimizer steps of linear warm-up")
    max_grad_norm: float = help_field(1.0, "Gradient clipping by global norm (0 = off)")


def make_optimizer(model: torch.nn.Module, cfg: OptimConfig, total_steps: int):
    """AdamW + a transformers schedule (warm-up, then cosine/linear decay or constant)."""
    from transformers import get_scheduler

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas))
    name = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}[cfg.schedule]
    sched = get_scheduler(name, opt, num_warmup_steps=cfg.warmup_steps, num_training_steps=max(total_steps, 1))
    return opt, sched


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_threads(threads: int) -> None:
    """Torch intra-op threads (0 = leave torch's default, or OMP_NUM_THREADS when set)."""
    if threads > 0:
        torch.set_num_threads(threads)
    elif os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
