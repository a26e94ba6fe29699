"""Verified groups as training tensors, and what the policy generated as metrics and samples.

`build_rollouts` turns the groups a `rlvr.rollout.sampling.GroupSampler` kept into a `Rollouts`:
one right-padded `TokenBatch` of prompt + completion tokens, the engine's log-probs, rewards,
outcome labels and the verifier's process rewards placed on tokens (`place_step_rewards`), all
in the trainer's "target space" (see `rlvr.models.batch`).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Any

import torch

from envs.types import Problem, Status, Verdict
from rlvr.algos.filters import zero_variance_groups
from rlvr.rollout.records import prediction_fields
from rlvr.rollout.base import Completion
from rlvr.models.batch import TokenBatch, build_token_batch, scatter_completion_values
from rlvr.rollout.sampling import Group, SamplingReport


@dataclass
class Rollouts:
    """One step's generated and verified groups (B = prompts x group size sequences, T = L - 1).

    Attributes:
        valid: ``[B]`` verdicts usable for the update (failed verifications are dropped or scored 0
            by ``verify.on_failure``; all False for the placeholder group of a process that kept none).
        mask: ``[B, T]`` float, the tokens the loss covers: completion tokens the model sampled
            (not observations of multi-turn episodes) of valid sequences.
    """

    problems: list[Problem]
    completions: list[Completion]
    verdicts: list[Verdict]
    group_ids: torch.Tensor  # [B] long
    rewards: torch.Tensor  # [B] float
    passed: torch.Tensor  # [B] bool: the verifier's outcome label
    valid: torch.Tensor  # [B] bool
    truncated: torch.Tensor  # [B] bool: generation hit rollout.max_new_tokens
    batch: TokenBatch
    mask: torch.Tensor  # [B, T]
    rollout_logp: torch.Tensor  # [B, T] the engine's log-probs of the sampled tokens
    step_rewards: torch.Tensor  # [B, T] process rewards at the last token of each step
    step_mask: torch.Tensor  # [B, T] bool
    stale: bool = False  # sampled by older weights than the policy's (rollout.overlap): the engine's log-probs are the behaviour's
    ref_logp: torch.Tensor | None = None  # [B, T] the frozen reference's, when computed while the batch was generated ahead

    @property
    def rows(self) -> torch.Tensor:
        """Indices of the sequences the update trains on (valid, with at least one loss token)."""
        return torch.nonzero(self.mask.sum(-1) > 0).squeeze(1)

    @property
    def lengths(self) -> torch.Tensor:
        """``[B]`` tokens per sequence (prompt + completion), to sort micro-batches by."""
        return self.batch.attention_mask.sum(-1)


def build_rollouts(groups: list[Group], pad_id: int, *, drop_failed: bool, placeholder: bool = False, stale: bool = False) -> Rollouts:
    """Tensors of ``groups`` (each of the same size G). ``drop_failed`` leaves error/timeout
    verdicts out of the update; ``placeholder`` marks every sequence invalid (a process that kept
    no group but must join the others' update)."""
    G = len(groups[0].completions)
    completions = [c for g in groups for c in g.completions]
    verdicts = [v for g in groups for v in g.verdicts]
    failed = torch.tensor([v.status.is_failure for v in verdicts])
    valid = ~failed if drop_failed else torch.ones_like(failed)
    if placeholder:
        valid = torch.zeros_like(valid)
    batch = build_token_batch([c.prompt_ids for c in completions], [c.token_ids for c in completions], pad_id)
    loss_mask = batch.completion_mask
    if any(getattr(c, "loss_mask", None) is not None for c in completions):  # observation tokens are context, not trained on
        loss_mask = loss_mask * scatter_completion_values(
            [c.loss_mask if c.loss_mask is not None else [1] * len(c.token_ids) for c in completions], batch)
    step_rewards, step_mask = place_step_rewards(completions, verdicts, batch.completion_mask.shape[1])
    return Rollouts(
        problems=[g.problem for g in groups for _ in range(G)], completions=completions, verdicts=verdicts,
        group_ids=torch.arange(len(groups)).repeat_interleave(G),
        rewards=torch.tensor([v.reward for v in verdicts], dtype=torch.float32),
        passed=torch.tensor([v.passed for v in verdicts]), valid=valid,
        truncated=torch.tensor([c.truncated for c in completions]), batch=batch,
        mask=loss_mask * valid.float().unsqueeze(1),
        rollout_logp=scatter_completion_values([c.logprobs for c in completions], batch),
        step_rewards=step_rewards, step_mask=step_mask, stale=stale)


def place_step_rewards(completions: list[Completion], verdicts: list[Verdict], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Process rewards in target space ``[B, width]``: each step's reward at the token where its
    character span ends. Steps ending on the same token add up (the code environment's per-test
    rewards all span the whole program: their sum is the number of tests passed)."""
    rewards = torch.zeros(len(completions), width)
    mask = torch.zeros(len(completions), width, dtype=torch.bool)
    for b, (c, v) in enumerate(zip(completions, verdicts)):
        if not v.steps or not c.char_ends:
            continue
        offset = len(c.prompt_ids) - 1  # target index of the first completion token
        for step in v.steps:
            k = bisect.bisect_left(c.char_ends, step.end)
            if k < len(c.char_ends):
                rewards[b, offset + k] += step.reward
                mask[b, offset + k] = True
    return rewards, mask


_FAILED = (Status.ERROR, Status.TIMEOUT)


def _group_fractions(groups: list[list[Verdict]]) -> dict[str, float]:
    """Of these fully judged groups, the fraction with one reward throughout and with every completion passing."""
    return {
        "groups/zero_variance_frac": zero_variance_frac(torch.tensor([[v.reward for v in g] for g in groups]).flatten(), len(groups[0])),
        "groups/all_correct_frac": sum(all(v.passed for v in g) for g in groups) / len(groups),
    }


def generation_metrics(report: SamplingReport, group_size: int) -> dict[str, float]:
    """What the policy generated this step (every group, kept or not) and what sampling cost."""
    verdicts = [v for g in report.generated for v in g.verdicts]
    completions = [c for g in report.generated for c in g.completions]
    if not verdicts:
        return {"sampling/prompts": 0.0, "sampling/completions": 0.0, "sampling/budget_exhausted": float(report.budget_exhausted)}
    lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)
    # a failure to verify is not a wrong answer: the scores average only the verdicts that were judged,
    # and the group fractions only groups whose every completion was judged
    judged = [v for v in verdicts if v.status not in _FAILED]
    whole = [g.verdicts for g in report.generated if g.verdicts and all(v.status not in _FAILED for v in g.verdicts)]
    rewards = torch.tensor([v.reward for v in judged], dtype=torch.float32)
    passed = torch.tensor([v.passed for v in judged], dtype=torch.float32)
    scores = {  # none when no verification succeeded (the environment failed): 0 would read as a drop in the curve
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "reward/accuracy": float(passed.mean()),
        **(_group_fractions(whole) if whole else {}),
    } if judged else {}
    return {
        **scores,
        "rollout/response_len": float(lengths.mean()),
        "rollout/truncated_frac": float(sum(c.truncated for c in completions) / len(completions)),
        "rollout/empty_frac": float(sum(not c.text.strip() for c in completions) / len(completions)),
        "rollout/tokens": float(lengths.sum() + sum(len(c.prompt_ids) for c in completions)),
        "verify/no_answer_frac": sum(v.status is Status.NO_ANSWER for v in verdicts) / len(verdicts),
        "verify/errors": float(sum(v.status is Status.ERROR for v in verdicts)),
        "verify/timeouts": float(sum(v.status is Status.TIMEOUT for v in verdicts)),
        "verify/steps_per_completion": sum(len(v.steps) for v in verdicts) / len(verdicts),
        "sampling/prompts": float(report.prompts_generated),
        "sampling/completions": float(len(completions)),
        "sampling/extra_prompts": float(max(0, report.prompts_generated - report.target)),  # the cost of refilling
        "sampling/kept_groups": float(len(report.kept)),
        "sampling/yield": report.yield_,
        "sampling/rounds": float(report.rounds),
        "sampling/budget_prompts": float(report.budget_prompts),
        "sampling/budget_exhausted": float(report.budget_exhausted),
        "time/generate": report.generate_s,
        "time/verify_wait": report.verify_wait_s,
    }


def zero_variance_frac(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups (consecutive runs of ``group_size`` in ``rewards`` ``[B]``) whose rewards are all equal."""
    grouped = rewards.view(-1, group_size)
    return float(zero_variance_groups(grouped, torch.ones_like(grouped, dtype=torch.bool)).float().mean())


def sample_rows(report: SamplingReport, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` generated completions with their verdicts (process-reward steps
    included; an episode turn by turn), marked with whether their group was kept."""
    kept = {id(g) for g in report.kept}
    rows = ({"problem": g.problem.id, "prompt": c.prompt_text or g.problem.prompt, "completion": c.text, "reference": g.problem.reference,
             "kept": id(g) in kept, **verdict_row(v), **prediction_fields(c)}
            for g in report.generated for c, v in zip(g.completions, g.verdicts))
    return list(itertools.islice(rows, limit))


def verdict_row(v: Verdict) -> dict[str, Any]:
    row = {"reward": v.reward, "passed": v.passed, "status": v.status.value, "extracted": v.extracted}
    if v.steps:
        row["steps"] = [s.to_dict() for s in v.steps]
    if "error" in v.info:
        row["error"] = v.info["error"]
    return row
