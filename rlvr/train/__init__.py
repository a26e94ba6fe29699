"""Training: one harness (`rlvr.train.harness`) under recipes looked up by name (`rlvr.train.recipes`):
``sft``, ``policy_gradient`` (the GRPO family and PPO), ``preference`` (DPO, online DPO, KTO).

The names below are imported on first use: reading and checking a config (`rlvr.train.config`,
``rlvr train`` refusing a bad one) must not import torch, which the harness needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr.lazy import lazy_exports

if TYPE_CHECKING:
    from rlvr.train.config import TrainConfig
    from rlvr.train.harness import TrainingError, TrainResult
    from rlvr.train.recipes import load_run_config, train

__getattr__ = lazy_exports(__name__, {"TrainConfig": "rlvr.train.config", "TrainResult": "rlvr.train.harness",
                                      "TrainingError": "rlvr.train.harness", "load_run_config": "rlvr.train.recipes",
                                      "train": "rlvr.train.recipes"})

__all__ = ["TrainConfig", "TrainResult", "TrainingError", "load_run_config", "train"]
