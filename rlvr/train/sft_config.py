"""The ``sft`` recipe's config, apart from the recipe (`rlvr.train.sft`) so that reading and
checking it imports no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.config import help_field
from rlvr.models.tiny import TinyModelConfig
from rlvr.train.config import EvalConfig, OptimConfig, RunConfig


@dataclass
class SFTConfig(RunConfig):
    """A supervised warm-up run."""

    recipe: str | None = help_field("sft", "Training recipe: sft")
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    steps: int = help_field(500, "Optimizer steps", ge=0)
    batch_size: int = help_field(64, "Sequences per optimizer step (per process)", gt=0)
    micro_batch_size: int = help_field(64, "Sequences per forward/backward", gt=0)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=2e-3, warmup_steps=25))
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(limit=200))
