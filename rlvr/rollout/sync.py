"""Proof that a weight sync arrived: score a small fixed probe of completions with the engine and
with the trainer's model and compare the log-probs token by token.

Two checks, both raising `WeightSyncError`:

- the gap: mean |engine - trainer| log-prob over the probe's tokens above ``max_gap``
  (``rollout.probe.max_gap``) means the engine is not running the trainer's weights;
- staleness: when the trainer's weights moved since the last check and the engine's log-probs
  are closer to the trainer's previous ones than to its current ones, the update did not arrive,
  however small the step (a loose threshold alone would let small steps slip through).

The trainer calls `SyncProbe.check` after every sync and every wake-up, and logs `ProbeResult.metrics`.
An engine with several copies of the weights (several rollout servers) has each checked
(`RolloutEngine.score_each`); a failure names the server.
With FSDP every rank must call it (the trainer's forward is a collective).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from rlvr.models.batch import trainer_logprobs
from rlvr.rollout.base import Completion, RolloutEngine
from rlvr.rollout.weights import WeightSyncError

SETTING = "rollout.probe.max_gap"


class ScoringEngine(Protocol):
    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        ...


@dataclass(frozen=True)
class ProbeResult:
    """One comparison.

    Attributes:
        mean_gap / max_gap: Mean and largest |engine - trainer| log-prob over the probe's tokens.
        tokens: Probe tokens compared.
        trainer_moved: Mean |trainer now - trainer at the previous check| (None at the first check).
        previous_gap: Mean |engine - trainer at the previous check| (None at the first check).
    """

    mean_gap: float
    max_gap: float
    tokens: int
    trainer_moved: float | None = None
    previous_gap: float | None = None

    def metrics(self) -> dict[str, float]:
        out = {"sync/logprob_gap_mean": self.mean_gap, "sync/logprob_gap_max": self.max_gap}
        if self.trainer_moved is not None:
            out["sync/trainer_moved"] = self.trainer_moved
        return out


class SyncProbe:
    """A fixed set of (prompt ids, completion ids) scored after every sync.

    Args:
        prompt_ids / completion_ids: The probe sequences (completions must be non-empty).
        max_gap: Largest allowed mean |engine - trainer| log-prob (``rollout.probe.max_gap``).
        stale_margin: Staleness is called when the gap to the current weights exceeds this many
            times the gap to the previous ones (and the trainer moved more than float noise).
    """

    def __init__(self, prompt_ids: Sequence[list[int]], completion_ids: Sequence[list[int]], max_gap: float, stale_margin: float = 2.0):
        if not prompt_ids or len(prompt_ids) != len(completion_ids) or not all(completion_ids):
            raise ValueError("a sync probe needs at least one prompt, each with a non-empty completion")
        self.prompt_ids = [list(p) for p in prompt_ids]
        self.completion_ids = [list(c) for c in completion_ids]
        self.max_gap = max_gap
        self.stale_margin = stale_margin
        self._previous: torch.Tensor | None = None  # the trainer's probe log-probs at the last passed check

    @classmethod
    def from_completions(cls, completions: Sequence[Completion], max_gap: float, k: int = 4) -> SyncProbe:
        """The first ``k`` non-empty completions of a batch (e.g. the first one generated)."""
        chosen = [c for c in completions if c.token_ids][:k]
        return cls([c.prompt_ids for c in chosen], [c.token_ids for c in chosen], max_gap)

    @classmethod
    def from_texts(cls, tokenizer: PreTrainedTokenizerBase, pairs: Sequence[tuple[str, str]], max_gap: float) -> SyncProbe:
        """``(prompt, completion)`` texts, tokenized as the engines tokenize prompts."""
        prompts = [tokenizer(p).input_ids for p, _ in pairs]
        completions = [tokenizer(c, add_special_tokens=False).input_ids for _, c in pairs]
        return cls(prompts, completions, max_gap)

    def trainer_logprobs(self, model: torch.nn.Module, pad_id: int = 0) -> torch.Tensor:
        """The trainer's log-probs of the probe ``[N]`` (flat over probe tokens)."""
        return torch.tensor([x for row in trainer_logprobs(model, self.prompt_ids, self.completion_ids, pad_id) for x in row],
                            dtype=torch.float64)

    def engine_logprobs(self, engine: ScoringEngine) -> list[list[float]]:
        """The engine's log-probs of the probe, per sequence (what `compare` takes)."""
        return engine.score(self.prompt_ids, self.completion_ids)

    def measure(self, engine: ScoringEngine, model: torch.nn.Module, pad_id: int = 0) -> tuple[ProbeResult, torch.Tensor]:
        """The comparison without judging it, and the trainer's log-probs ``[N]`` (flat over probe tokens)."""
        return self.compare(self.engine_logprobs(engine), self.trainer_logprobs(model, pad_id))

    def compare(self, engine_rows: list[list[float]], trainer_lp: torch.Tensor) -> tuple[ProbeResult, torch.Tensor]:
        """`measure` from log-probs computed apart: the engine's (`engine_logprobs`) and the trainer's
        (`trainer_logprobs`) for the same weights, e.g. a generation worker's score of version v and
        the trainer's taken when it pushed v."""
        engine_lp = torch.tensor([x for row in engine_rows for x in row], dtype=torch.float64)
        gap = (engine_lp - trainer_lp).abs()
        moved = previous_gap = None
        if self._previous is not None:
            moved = float((trainer_lp - self._previous).abs().mean())
            previous_gap = float((engine_lp - self._previous).abs().mean())
        return ProbeResult(float(gap.mean()), float(gap.max()), len(gap), moved, previous_gap), trainer_lp

    def check(self, engine: ScoringEngine, model: torch.nn.Module, pad_id: int = 0) -> ProbeResult:
        """Measure and judge every copy of the engine's weights (`RolloutEngine.score_each`: each
        server); raises `WeightSyncError` (naming the setting, and the server) when a sync failed.
        Returns the comparison with the largest gap."""
        each = self.engine_logprobs_each(engine)
        return self.judge_each(each, self.trainer_logprobs(model, pad_id))

    def engine_logprobs_each(self, engine: ScoringEngine) -> dict[str, list[list[float]]]:
        """`engine_logprobs` of every copy of the engine's weights, by where it lives (`RolloutEngine.score_each`)."""
        if isinstance(engine, RolloutEngine):
            return engine.score_each(self.prompt_ids, self.completion_ids)
        return {"": self.engine_logprobs(engine)}

    def judge_each(self, each: dict[str, list[list[float]]], trainer_lp: torch.Tensor) -> ProbeResult:
        """`judge` for every copy's log-probs (``engine_logprobs_each``) against the same trainer
        log-probs, naming the server that failed; the comparison with the largest gap."""
        results = [self.compare(rows, trainer_lp)[0] for rows in each.values()]
        for where, result in zip(each, results):
            self._verdict(result, f"rollout server {where}: " if where else "")
        self._previous = trainer_lp
        return max(results, key=lambda r: r.mean_gap)

    def judge(self, result: ProbeResult, trainer_lp: torch.Tensor) -> ProbeResult:
        """Raise `WeightSyncError` when a comparison (`measure`, `compare`) shows a failed sync; else
        remember the trainer's log-probs for the next staleness check and return the result."""
        self._verdict(result)
        self._previous = trainer_lp
        return result

    def _verdict(self, result: ProbeResult, where: str = "") -> None:
        if result.mean_gap > self.max_gap:
            raise WeightSyncError(
                f"{where}engine and trainer disagree on the sync probe: mean |log-prob gap| {result.mean_gap:.3g} "
                f"(max {result.max_gap:.3g}) over {result.tokens} tokens exceeds {SETTING}={self.max_gap:g}; "
                "the engine is not generating with the trainer's weights (raise the setting only for a known precision gap)")
        noise = 1e-6  # below this the trainer did not move in float32
        if (result.previous_gap is not None and result.trainer_moved is not None and result.trainer_moved > noise
                and result.mean_gap > self.stale_margin * max(result.previous_gap, noise)):
            raise WeightSyncError(
                f"{where}the weight update did not arrive: the engine's probe log-probs match the trainer's previous weights "
                f"(gap {result.previous_gap:.3g}) better than its current ones (gap {result.mean_gap:.3g}; "
                f"the trainer moved {result.trainer_moved:.3g})")
