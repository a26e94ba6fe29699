"""Settings of the rollout engine and of how groups are sampled (`rollout.*` in a training config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlvr.config import help_field


@dataclass
class RolloutConfig:
    """Generation of the groups."""

    engine: Literal["hf"] = help_field("hf", "Rollout engine: hf (Hugging Face generate)")
    prompts_per_step: int = help_field(32, "Prompts per training step (per process)", gt=0)
    group_size: int = help_field(8, "Completions per prompt (G)", gt=0)
    temperature: float = help_field(1.0, "Sampling temperature", gt=0)
    top_p: float = help_field(1.0, "Nucleus sampling mass", gt=0, le=1)
    top_k: int = help_field(0, "Top-k sampling (0 = off)", ge=0)
    max_new_tokens: int = help_field(128, "Longest completion in tokens", gt=0)
    chunk_prompts: int = help_field(16, "Prompts per generate call; verification of one chunk overlaps generation of the next", gt=0)
    max_batch_sequences: int = help_field(256, "Sequences per generate call (memory bound)", gt=0)
