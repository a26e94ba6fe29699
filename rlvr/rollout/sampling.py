"""Streaming group sampling: sample prompts -> generate groups -> verify -> (filter) -> a batch.

`GroupSampler.collect` fills one training batch. It generates a chunk of prompts, hands the
completions to the verifier pool and generates the next chunk while they are verified. With a
`GroupFilter` that drops groups (DAPO's dynamic sampling, PRIME's accuracy band) it keeps
requesting new prompts until the batch holds ``target`` groups, sizing each request by the yield
seen so far, and stops at a budget of generated prompts; when the budget is spent the batch is
whatever was kept (possibly nothing) and the report says so. It never raises for lack of groups.

Several processes (DDP) sample in lockstep: each round every process generates its share of the
same number of prompts, and the decisions use the kept counts of all processes (``gather_counts``),
so all of them read the same stretch of the shared prompt stream and stop together.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from envs.types import Problem, Verdict
from rlvr.algos.filters import GroupFilter, keep_groups
from rlvr.rollout.base import Completion


class PendingResult(Protocol):
    def result(self) -> list[Verdict]: ...


@dataclass
class Group:
    """One prompt with its G completions and their verdicts."""

    problem: Problem
    completions: list[Completion]
    verdicts: list[Verdict]


@dataclass
class SamplingReport:
    """What one call of `GroupSampler.collect` produced and what it cost.

    Attributes:
        kept: The groups of the training batch (at most ``target``, plus the partial rollouts
            carried from earlier batches that finished in this one, which come first), in generation order.
        generated: Every group generated for this batch, kept or not (for metrics).
        target: Groups this process was asked for.
        budget_prompts: The most it was allowed to generate.
        budget_exhausted: The budget ran out before the batch (of all processes) was full.
        rounds: Generate calls.
        generate_s / verify_wait_s: Time generating, and waiting for verdicts after generating.
        weights_version: The policy's optimizer steps when the batch was sampled (set by the
            caller; a batch older than the policy is off-policy).
        prepared: What a recipe computed for the kept groups while the batch was generated ahead
            (`rlvr.rollout.groups.GroupSource.prepare`), e.g. the frozen reference's log-probs.
    """

    kept: list[Group]
    generated: list[Group]
    target: int
    budget_prompts: int
    budget_exhausted: bool
    rounds: int
    generate_s: float
    verify_wait_s: float
    weights_version: int = 0
    prepared: dict[str, Any] = field(default_factory=dict)

    @property
    def prompts_generated(self) -> int:
        """Prompts this process generated (one group each)."""
        return len(self.generated)

    @property
    def yield_(self) -> float:
        """Kept groups per generated group."""
        return len(self.kept) / max(self.prompts_generated, 1)


@dataclass
class _Chunk:
    problems: list[Problem]
    completions: list[Completion]
    pending: PendingResult
    carried: bool = False  # partial rollouts begun in an earlier batch


@dataclass
class GroupSampler:
    """Fills training batches with groups that pass a filter.

    Attributes:
        generate: ``problems -> completions`` (G per problem, grouped in order).
        submit: ``(problems, completions) -> pending verdicts`` (one verdict per completion).
        group_size: G.
        chunk_prompts: Most prompts per generate call.
        group_filter: Which groups to keep (an inactive filter keeps all and never refills).
        budget_factor: Most prompts generated per batch, as a multiple of ``target``.
        on_failure_valid: Whether a failed verification (error/timeout) still counts as a member
            of its group (``verify.on_failure=zero``) or is left out (``drop``).
        rank / world: This process and the number of processes.
        gather_counts: ``local kept count -> every process's count, by rank`` (one process: ``[n]``).
        yield_estimate: Expected kept/generated, carried between batches to size refills.
        carried: Partial rollouts (`rlvr.rollout.partial`): ``() -> (problems, completions)`` of the
            groups started in earlier batches that are complete now; verified and filtered first,
            they join the batch on top of its ``target`` and count neither towards it nor towards its
            budget (they were counted when started), so every batch starts its own new prompts and the
            pipeline stays full.
        hold: Partial rollouts: ``(problems, completions) -> (problems, completions)`` of a generate
            call's complete groups; the others are kept back (parked) by the hook.
    """

    generate: Callable[[list[Problem]], list[Completion]]
    submit: Callable[[list[Problem], list[Completion]], PendingResult]
    group_size: int
    chunk_prompts: int
    group_filter: GroupFilter = field(default_factory=GroupFilter)
    budget_factor: float = 1.0
    on_failure_valid: bool = False
    rank: int = 0
    world: int = 1
    gather_counts: Callable[[int], list[int]] = lambda n: [n]
    yield_estimate: float = 1.0
    carried: Callable[[], tuple[list[Problem], list[Completion]]] | None = None
    hold: Callable[[list[Problem], list[Completion]], tuple[list[Problem], list[Completion]]] | None = None

    def collect(self, take_prompts: Callable[[int], list[Problem]], target: int) -> SamplingReport:
        """Generate, verify and filter groups until ``target`` are kept (summed over processes:
        ``target`` times the number of processes) or the budget is spent.

        ``take_prompts(n)`` returns this process's next ``n`` prompts (advancing the shared stream
        by ``n`` per process).
        """
        filtering = self.group_filter.active
        budget = max(target, math.ceil(target * self.budget_factor)) if filtering else target
        world = self.world if filtering else 1
        global_target = target * world
        kept: list[Group] = []
        carried_kept: list[Group] = []
        generated: list[Group] = []
        in_flight: deque[_Chunk] = deque()
        kept_global, requested, rounds = 0, 0, 0
        t_gen = t_wait = 0.0
        if self.carried is not None:
            t = time.perf_counter()
            problems, completions = self.carried()
            t_gen += time.perf_counter() - t
            if problems:
                in_flight.append(_Chunk(problems, completions, self._submit(problems, completions), carried=True))
        while True:
            pending_prompts = sum(len(c.problems) for c in in_flight if not c.carried) * world
            expected = kept_global + self.yield_estimate * pending_prompts
            want = 0
            if requested < budget and expected < global_target:
                need_global = (global_target - expected) / max(self.yield_estimate, 0.05)
                want = min(self.chunk_prompts, budget - requested, max(1, math.ceil(need_global / world)))
            if want:
                problems = take_prompts(want)
                t = time.perf_counter()
                completions = self.generate(problems)
                t_gen += time.perf_counter() - t
                if self.hold is not None:
                    problems, completions = self.hold(problems, completions)
                if problems:
                    in_flight.append(_Chunk(problems, completions, self._submit(problems, completions)))
                requested += want
                rounds += 1
            if in_flight and (len(in_flight) > 1 or not want):  # keep one chunk verifying while the next generates
                chunk = in_flight.popleft()
                t = time.perf_counter()
                verdicts = chunk.pending.result()
                t_wait += time.perf_counter() - t
                groups = [Group(p, chunk.completions[i * self.group_size:(i + 1) * self.group_size],
                                verdicts[i * self.group_size:(i + 1) * self.group_size]) for i, p in enumerate(chunk.problems)]
                generated += groups
                keep = self._keep(groups) if filtering else [True] * len(groups)
                if chunk.carried:
                    carried_kept += [g for g, k in zip(groups, keep) if k]
                    continue
                kept += [g for g, k in zip(groups, keep) if k]
                kept_global = sum(self.gather_counts(len(kept))) if filtering else len(kept)
            elif not want and not in_flight:
                break
        exhausted = filtering and kept_global < global_target
        if filtering:
            counts = self.gather_counts(len(kept))
            self.yield_estimate = min(1.0, max(sum(counts) / max(requested * world, 1), 0.05))
            room = max(0, global_target - sum(counts[: self.rank]))  # surplus: earlier processes fill the batch first
            kept = kept[:room]
        return SamplingReport(carried_kept + kept, generated, target, budget, exhausted, rounds, t_gen, t_wait)

    def _submit(self, problems: list[Problem], completions: list[Completion]) -> PendingResult:
        return self.submit([p for p in problems for _ in range(self.group_size)], completions)

    def _keep(self, groups: list[Group]) -> list[bool]:
        rewards = torch.tensor([[v.reward for v in g.verdicts] for g in groups], dtype=torch.float32)
        passed = torch.tensor([[v.passed for v in g.verdicts] for g in groups], dtype=torch.bool)
        failed = torch.tensor([[v.status.is_failure for v in g.verdicts] for g in groups], dtype=torch.bool)
        valid = torch.ones_like(failed) if self.on_failure_valid else ~failed
        return keep_groups(rewards, passed, valid, self.group_filter).tolist()
