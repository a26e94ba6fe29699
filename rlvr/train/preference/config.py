"""The ``preference`` recipe's config: the RL config and where offline pairs come from (apart from
the recipe so that reading and checking it imports no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.config import help_field
from rlvr.train.config import TrainConfig


@dataclass
class PairsConfig:
    """Offline preference pairs (``algo.preference.source=pairs``, the dpo preset)."""

    path: str | None = help_field(None, "JSONL pairs file: `rlvr pairs build` output, or TRL's layout (prompt, chosen, rejected; text or chat messages)")
    batch_size: int = help_field(32, "Pairs per training step (per process); each step takes update.epochs_per_batch x update.minibatches optimizer steps on them (default one)", gt=0)
    on_bad_row: Literal["skip", "error"] = help_field("skip", "A malformed or too long row: skip (counted, reported with file:line and written to pairs_report.json) or error (stop at the first)")
    max_length: int | None = help_field(None, "Longest prompt + completion in tokens (None = the model's max_position_embeddings); longer pairs are reported like malformed rows", gt=0)


@dataclass
class PreferenceTrainConfig(TrainConfig):
    """A run of the preference recipe: the RL config (rollouts for online sources and evaluation),
    and where offline pairs come from."""

    pairs: PairsConfig = field(default_factory=PairsConfig)
