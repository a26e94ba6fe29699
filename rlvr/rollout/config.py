"""Settings of the rollout engine and of how groups are sampled (`rollout.*` in a training config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlvr.config import help_field


@dataclass
class RolloutConfig:
    """Generation of the groups."""

    engine: Literal["hf"] = help_field("hf", "Rollout engine: hf (Hugging Face generate)")
    prompts_per_step: int = help_field(32, "Prompts per training step (per process)")
    group_size: int = help_field(8, "Completions per prompt (G)")
    temperature: float = help_field(1.0, "Sampling temperature")
    top_p: float = help_field(1.0, "Nucleus sampling mass")
    top_k: int = help_field(0, "Top-k sampling (0 = off)")
    max_new_tokens: int = help_field(128, "Longest completion in tokens")
    chunk_prompts: int = help_field(16, "Prompts per generate call; verification of one chunk overlaps generation of the next")
    max_batch_sequences: int = help_field(256, "Sequences per generate call (memory bound)")
