"""Training: one harness (`rlvr.train.harness`) under recipes looked up by name (`rlvr.train.recipes`):
``sft``, ``policy_gradient`` (the GRPO family and PPO)."""

from rlvr.train.config import TrainConfig
from rlvr.train.harness import TrainingError, TrainResult
from rlvr.train.recipes import load_run_config, train

__all__ = ["TrainConfig", "TrainResult", "TrainingError", "load_run_config", "train"]
