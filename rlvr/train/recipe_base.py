"""The skeleton the recipes that run an algorithm share: `AlgorithmRecipe`.

The policy-gradient recipe (`rlvr.train.policy_gradient`) and the preference recipe
(`rlvr.train.preference`) both resolve an ``algo`` preset, refuse a recipe the preset does not run
and evaluation on the training split, open the training task, take ``update.epochs_per_batch x
update.minibatches`` optimizer steps per batch in a seeded shuffle, may refresh their reference
from the policy, and sample through a `rlvr.rollout.groups.GroupSource` that evaluates, carries the
data position and counts failed verifications. Those parts live here once; a recipe holds only what
differs (its batch, its objective, its extra checks and state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr.algos.config import AlgoConfig
from rlvr.rollout.engines import preflight_engine
from rlvr.rollout.groups import GroupSource, check_async
from rlvr.rollout.verification_tally import VerificationTally
from rlvr.train.config import TrainConfig
from rlvr.train.config_checks import check_config
from rlvr.train.harness import Harness
from rlvr.train.task_checks import open_training_task, prompts_drawn
from rlvr.train.trainable import TrainableModel
from tasks.base import Task


class AlgorithmRecipe:
    """Base of a recipe run by `rlvr.train.harness.Harness` that trains ``policy`` with ``algo``.

    A subclass sets ``cfg``, ``harness``, ``algo``, ``policy``, ``reference`` (or None) and
    ``groups``, and uses the helpers below; the `rlvr.train.harness.Recipe` methods other than
    ``step`` pass through to the harness and the group source unless it overrides them.
    """

    cfg: TrainConfig
    harness: Harness
    algo: AlgoConfig
    task: Task
    tokenizer: Any
    policy: TrainableModel
    reference: torch.nn.Module | None
    groups: GroupSource
    epochs: int
    minibatches: int

    # -- setup ----------------------------------------------------------------------------------

    def _check_settings(self) -> None:
        """The config's own refusals (`rlvr.train.config_checks`: `rlvr train` says them before torch loads)."""
        check_config(self.cfg)

    def _open_task(self) -> Task:
        """The training task, checked before any model loads (`open_training_task`), and what the
        rollout engine needs from outside (`preflight_engine`: e.g. every rollout server answers)."""
        cfg, harness = self.cfg, self.harness
        preflight_engine(cfg.rollout)
        task = open_training_task(cfg, evaluates=bool(cfg.eval.every or cfg.eval.at_start), say=harness.print,
                                  prompts_needed=prompts_drawn(cfg, self.algo.sampling_budget, harness.num_processes))
        if cfg.rollout.async_.max_staleness:  # what the config alone could not decide (processes, the task), before any model loads
            check_async(cfg.rollout, harness.num_processes, task)
        return task

    def _passes(self) -> tuple[int, int]:
        """Passes over each batch and optimizer steps per pass: ``update.*``, else the preset's."""
        cfg = self.cfg
        return cfg.update.epochs_per_batch or self.algo.epochs_per_batch, cfg.update.minibatches or self.algo.minibatches

    def _group_source(self) -> GroupSource:
        """Groups sampled by the policy, kept by the algorithm's group filter within its sampling budget."""
        return GroupSource(self.cfg, self.task, self.policy, self.tokenizer, self.harness, self.algo.group_filter, self.algo.sampling_budget)

    # -- the update -----------------------------------------------------------------------------

    def _seeded_minibatches(self, rows: torch.Tensor, position: int) -> list[torch.Tensor]:
        """``rows`` shuffled once per epoch (seeded by the data ``position``, so a resumed run draws
        the same order) and split into ``minibatches`` parts: ``epochs x minibatches`` optimizer steps."""
        gen = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + position)
        return [part for _ in range(self.epochs) for part in rows[torch.randperm(len(rows), generator=gen)].tensor_split(self.minibatches)]

    def _refresh_reference(self, step: int, every: int, metrics: dict[str, float]) -> None:
        """Every ``every`` steps (0: never) the reference takes the policy's current weights."""
        if every and step % every == 0:
            self.reference.load_state_dict(self.policy.unwrapped.state_dict())
            metrics["policy/reference_refreshed"] = 1.0

    # -- evaluation, final model, state ---------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy and no-answer rate on ``eval.split`` with the current weights."""
        from rlvr.eval.runner import EvalSettings, evaluate

        cfg = self.cfg
        settings = EvalSettings(split=cfg.eval.split, greedy=True, n=0, max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                                limit=cfg.eval.limit, chunk_prompts=cfg.rollout.hf.max_batch_sequences,
                                verify_workers=cfg.verify.workers, verify_kind=cfg.verify.kind, verify_timeout_s=cfg.verify.timeout_s,
                                prompt=cfg.prompt)
        with self.groups.engine_for_evaluation() as engine:
            report = evaluate(engine, self.groups.task, settings, progress=False,
                              model_name=self.harness.evaluated_model())
        self.harness.log_report("eval", report)
        return {"eval/accuracy": report["greedy"]["accuracy"], "eval/no_answer_rate": report["greedy"]["no_answer_rate"]}

    def save_final(self) -> Path:
        return self.harness.save_model(self.policy, self.cfg.run_dir / "final")

    def state_dict(self) -> dict[str, Any]:
        return self.groups.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.groups.load_state_dict(state)

    def verification(self) -> VerificationTally | None:
        return self.groups.tally

    def failed_streak(self) -> int:
        return self.groups.failed_steps

    def can_checkpoint(self) -> bool:
        return self.groups.can_checkpoint()

    def close(self) -> None:
        self.groups.close()


__all__ = ["AlgorithmRecipe"]
