"""Helpers shared by every trainer: optimizer and schedule, seeds, threads, RNG state."""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from rlvr.train.config import OptimConfig


def make_optimizer(model: torch.nn.Module, cfg: "OptimConfig", total_steps: int):
    """AdamW + a transformers schedule (warm-up, then cosine/linear decay or constant)."""
    from transformers import get_scheduler

    trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters only, no state for the frozen base
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas))
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
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
