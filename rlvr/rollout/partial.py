"""Partial rollouts (``rollout.async.partial``): generations cut at a per-round token budget and
continued in the next round, after the next weight push, by the newer policy.

`PartialRollouts` plugs into `rlvr.rollout.sampling.GroupSampler` through its two hooks:

- ``hold(problems, completions)``: after a generate call for new prompts, the groups whose every
  completion finished go on to verification; a group with a completion that was cut (it used the
  round's budget without ending, and has tokens and rounds left) is parked whole;
- ``carried()``: at the start of the next round, every cut completion of the parked groups is
  continued from its prompt and its tokens so far (one call per remaining budget); the groups that
  are now complete go first into the round's batch, in the order they were started.

A group therefore finishes in the round its longest member does: groups enter a batch out of the
order they were started in, which is why every group is verified, filtered and normalised as a
unit (`rlvr.rollout.sampling`, `rlvr.algos.advantages`). Each token keeps the version that sampled
it (`rlvr.rollout.base.Completion.versions`), and its log-prob is the one of the engine that
sampled it (the behaviour policy of that token). A generation spans at most ``max_segments``
rounds: in its last one it runs to ``rollout.max_new_tokens`` (`rlvr.rollout.staleness`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from envs.types import Problem
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.text import token_char_ends


@dataclass
class Parked:
    """A group with at least one cut completion.

    Attributes:
        problem: Its prompt.
        completions: Its G completions so far (finished ones and cut ones).
        segments: Rounds its generations have had so far.
    """

    problem: Problem
    completions: list[Completion]
    segments: int = 1


def join(head: Completion, tail: Completion, version: int, tokenizer: Any) -> Completion:
    """``head`` continued by ``tail`` (generated after ``head``'s prompt and tokens): one completion
    of ``head``'s prompt whose tokens, log-probs and versions are both parts', decoded again as a
    whole (a token's text may depend on the one before it)."""
    ids = head.token_ids + tail.token_ids
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return dataclasses.replace(
        head, token_ids=ids, logprobs=head.logprobs + tail.logprobs, text=text, truncated=tail.truncated,
        char_ends=token_char_ends(tokenizer, ids, len(text)), stop_string=tail.stop_string,
        versions=(head.versions or [version] * len(head.token_ids)) + [version] * len(tail.token_ids), info={})


@dataclass
class PartialRollouts:
    """The parked groups of one generation worker and the rules to cut and continue them.

    Attributes:
        group_size: G.
        max_new_tokens: Longest completion in all (``rollout.max_new_tokens``).
        segment_tokens: Tokens a generation may decode per round before it is cut.
        max_segments: Rounds a generation may span; in its last it is not cut.
        parked: The groups waiting for their next round, oldest first.
    """

    group_size: int
    max_new_tokens: int
    segment_tokens: int
    max_segments: int
    parked: list[Parked] = field(default_factory=list)

    def first_budget(self) -> int:
        """``max_new_tokens`` of a new generation's first round."""
        return self.max_new_tokens if self.max_segments <= 1 else min(self.segment_tokens, self.max_new_tokens)

    def _budget(self, completion: Completion, segments: int) -> int:
        """Tokens a cut completion may decode in its next round (its last: all it has left)."""
        left = self.max_new_tokens - len(completion.token_ids)
        return left if segments + 1 >= self.max_segments else min(self.segment_tokens, left)

    def is_cut(self, completion: Completion) -> bool:
        """Stopped by the round's budget, with tokens left: it continues next round."""
        return completion.truncated and len(completion.token_ids) < self.max_new_tokens

    def hold(self, problems: Sequence[Problem], completions: Sequence[Completion]) -> tuple[list[Problem], list[Completion]]:
        """The complete groups of a generate call (to verify now); the others are parked."""
        G = self.group_size
        done_p, done_c = [], []
        for i, p in enumerate(problems):
            group = list(completions[i * G:(i + 1) * G])
            if any(self.is_cut(c) for c in group):
                self.parked.append(Parked(p, group))
            else:
                done_p.append(p)
                done_c += group
        return done_p, done_c

    def carried(self, generate: Callable[[list[list[int]], SamplingParams], list[Completion]], sampling: SamplingParams,
                version: int, tokenizer: Any) -> tuple[list[Problem], list[Completion]]:
        """Continue every cut completion once (``generate(prompt_ids, sampling)``, one completion per
        prompt, called once per distinct budget) with the policy ``version``; returns the groups that
        are now complete, in the order they were started, and keeps the rest parked."""
        jobs: dict[int, list[tuple[int, int]]] = {}  # budget -> (parked index, member)
        for gi, group in enumerate(self.parked):
            for mi, c in enumerate(group.completions):
                if self.is_cut(c):
                    jobs.setdefault(self._budget(c, group.segments), []).append((gi, mi))
        for budget, members in sorted(jobs.items()):
            heads = [self.parked[gi].completions[mi] for gi, mi in members]
            tails = generate([h.prompt_ids + h.token_ids for h in heads], dataclasses.replace(sampling, max_new_tokens=budget))
            for (gi, mi), head, tail in zip(members, heads, tails):
                self.parked[gi].completions[mi] = join(head, tail, version, tokenizer)
        done_p, done_c, still = [], [], []
        for group in self.parked:
            group.segments += 1
            if any(self.is_cut(c) for c in group.completions):
                still.append(group)
            else:
                done_p.append(group.problem)
                done_c += group.completions
        self.parked = still
        return done_p, done_c

    def state(self) -> list[Parked]:
        """The parked groups (a copy, for a checkpoint or a retry of the round)."""
        return [Parked(g.problem, list(g.completions), g.segments) for g in self.parked]

    def restore(self, parked: list[Parked]) -> None:
        self.parked = [Parked(g.problem, list(g.completions), g.segments) for g in parked]


__all__ = ["Parked", "PartialRollouts", "join"]
