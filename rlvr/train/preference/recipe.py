"""The ``preference`` recipe's config and its one update (the package docstring has the whole
picture): each step the example source gives a batch with its reference log-probs, and
``update.epochs_per_batch x update.minibatches`` optimizer steps train the policy on it."""

from __future__ import annotations

import time
from typing import Any

import torch

from rlvr.algos.preference import PREFERENCE_LOSSES, LossParams, PreferenceLoss, SequenceLogps, kto_reference_point
from rlvr.algos.config import AlgoConfig, PreferenceConfig
from rlvr.rollout.verification_tally import VerificationTally
from rlvr.train.accumulation import merge_stats
from rlvr.train.harness import Harness
from rlvr.train.preference.config import PairsConfig, PreferenceTrainConfig
from rlvr.train.preference.batches import LabelledBatch, LabelledObjective, PairBatch, PairObjective, sequence_logps
from rlvr.train.preference.sources import ExampleSource, example_source
from rlvr.train.recipe_base import AlgorithmRecipe


class PreferenceRecipe(AlgorithmRecipe):
    """Runs a `PreferenceTrainConfig` whose preset names the ``preference`` recipe."""

    config_class = PreferenceTrainConfig

    def __init__(self, cfg: PreferenceTrainConfig, harness: Harness):
        self.cfg, self.harness = cfg, harness
        self.algo: AlgoConfig = cfg.algo  # resolved and checked when the config was read
        self.settings: PreferenceConfig = self.algo.preference
        self.loss_fn: PreferenceLoss = PREFERENCE_LOSSES.get(self.settings.loss)
        source_type = example_source(self.settings.source, self.loss_fn.paired)
        self._check_settings()
        source_type.check(cfg)
        self.task = self._open_task()
        self.params = LossParams(self.settings.beta, self.settings.label_smoothing, self.settings.desirable_weight, self.settings.undesirable_weight)
        self.epochs, self.minibatches = self._passes()
        self.micro = cfg.update.micro_batch_size
        self.total_steps = cfg.update.steps
        self.title = f"{cfg.name}: {self.algo.preset} ({self.settings.loss}) on {self.task.id}"
        self.source: ExampleSource = source_type(cfg, harness)  # a pairs file is read (bad rows reported) before any model loads

        model, self.tokenizer = harness.load_policy(cfg.model.name_or_path)
        # the reference (or its cached log-probs) comes from the loaded weights, before the policy is wrapped or sharded
        self.reference: torch.nn.Module | None = self.source.load(model, self.tokenizer)
        self.policy = harness.trainable("policy", model, cfg.optim, cfg.update.steps * self.epochs * self.minibatches, tokenizer=self.tokenizer)
        self.groups = self._group_source()
        self.source.start(self.groups)

    # -- one step -------------------------------------------------------------------------------

    def step(self, step: int) -> dict[str, float]:
        """Examples from the source -> update (none: the source skipped the step) -> (iterative DPO) reference refresh."""
        t0, metrics = time.perf_counter(), {}
        examples = self.source.next_batch(step, metrics)
        if examples is not None:
            metrics |= self.update(*examples)
        self._refresh_reference(step, self.algo.ref_update_every if self.source.refreshes_reference else 0, metrics)
        self.groups.after_update()  # asynchronous generation: the new weights go to the worker now
        metrics["time/train"] = time.perf_counter() - t0 - metrics.get("time/generate", 0.0) - metrics.get("time/verify_wait", 0.0)
        return metrics

    def update(self, batch: PairBatch | LabelledBatch, local_rows: int) -> dict[str, float]:
        """For each epoch and minibatch: objective -> optimizer step. ``local_rows`` 0 marks a
        placeholder batch: this process joins with no rows."""
        micro = max(1, self.micro // batch.sequences_per_row)  # update.micro_batch_size counts sequences; a pair is two
        stats, objectives = [], []
        for minibatch in self._minibatches(torch.arange(local_rows)):
            objectives.append(self._objective(batch, minibatch))
            stats.append(self.harness.optimizer_step(self.policy, minibatch, objectives[-1], micro, batch.lengths))
        return update_metrics(stats, batch.stats, objectives, self.harness)

    def _objective(self, batch: PairBatch | LabelledBatch, rows: torch.Tensor) -> PairObjective | LabelledObjective:
        """The objective of one minibatch ``rows``; KTO's first takes the minibatch's reference point."""
        if isinstance(batch, PairBatch):
            return PairObjective(self.policy.model, batch, self.loss_fn, self.params, self.settings.length_norm, self.harness.device)
        return LabelledObjective(self.policy.model, batch, self._reference_point(batch, rows), self.loss_fn, self.params,
                                 self.settings.length_norm, self.harness.device)

    def _reference_point(self, batch: LabelledBatch, rows: torch.Tensor) -> float:
        """KTO's ``z_ref`` for a minibatch: the mean log-ratio of its rows' mismatched sequences
        over all processes (every process joins the sum, with or without rows)."""
        total = torch.zeros(2)
        usable = batch.mismatched is not None and len(rows) > 0
        if usable or self.harness.sharded:  # a sharded policy's forward is a collective: every process joins it
            source = batch.mismatched if batch.mismatched is not None else batch.tokens
            policy = sequence_logps(self.policy.unwrapped, source, self.harness, self.micro, rows if usable else rows[:0], self.harness.sharded)
            if usable:
                tokens = source.completion_mask[rows].sum(-1)
                r = SequenceLogps(policy[rows], batch.mismatched_ref[rows], tokens).logratio(self.settings.length_norm)
                total = torch.tensor([float(r.sum()), float(len(rows))])
        total = self.harness.reduce_sum(total)
        return kto_reference_point(float(total[0]), float(total[1]))

    def _minibatches(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """``rows`` shuffled once per epoch (seeded by the data position) and split into ``minibatches``
        parts; one pass of one minibatch keeps them in order."""
        if self.epochs == 1 and self.minibatches == 1:
            return [rows]
        return self._seeded_minibatches(rows, self.source.position)

    # -- evaluation, final model, state ---------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | self.source.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.source.load_state_dict(state)

    def verification(self) -> VerificationTally | None:
        return super().verification() if self.source.online else None


# -- metrics ------------------------------------------------------------------------------------------

METRIC_NAMES = {"loss": "loss/total", "grad_norm": "optim/grad_norm", "lr": "optim/lr"}
"""Logged names of the update's statistics; the others are ``preference/NAME``."""


def update_metrics(stats: list[dict[str, float]], batch_stats: tuple[str, ...], objectives: list[Any], harness: Harness) -> dict[str, float]:
    """The update's logged metrics from its optimizer steps' ``stats``: the loss and the objective's
    ``batch_stats`` are summed over processes (each holds its share of the batch's means), and KTO's
    mean reference point over the minibatches."""
    merged = merge_stats([s for s in stats if s])
    shared = ("loss", *batch_stats)
    merged |= dict(zip(shared, harness.reduce_sum(torch.tensor([merged.get(k, 0.0) for k in shared], dtype=torch.float64)).tolist()))
    out = {METRIC_NAMES.get(k, f"preference/{k}"): v for k, v in merged.items()}
    z_refs = [o.z_ref for o in objectives if isinstance(o, LabelledObjective)]
    if z_refs:
        out["preference/kl_ref_point"] = sum(z_refs) / len(z_refs)
    return out


__all__ = ["PairsConfig", "PreferenceRecipe", "PreferenceTrainConfig", "update_metrics"]
