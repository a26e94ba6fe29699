"""Where the preference recipe's examples come from: one `ExampleSource` per kind of example,
chosen once from the config by `example_source` (``algo.preference.source`` and whether the loss
compares pairs):

    OfflinePairSource  (pairs, paired loss; dpo):        pairs of ``pairs.path`` in seeded epoch shuffles,
                                                          reference log-probs cached before step 1 (or scored live)
    OnlinePairSource   (online, paired loss; online_dpo): the current policy's verified groups -> pairs of a pass and a fail
    LabelledSource     (online, unpaired loss; kto):      the current policy's verified completions, desirable when they passed

Each gives the recipe's update a `PairBatch` or `LabelledBatch` with its reference log-probs, adds
its data metrics to the step's, and carries its data position (which seeds the minibatch shuffle)
through checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

from rlvr import UserError
from rlvr.algos.preference import mismatched_partners
from rlvr.models.batch import TokenBatch, build_token_batch
from rlvr.models.paths import resolve_model
from rlvr.progress import progress_display
from rlvr.rollout.groups import GroupSource
from rlvr.rollout.sampling import SamplingReport
from rlvr.rollout.tensors import sample_rows
from rlvr.rollout.text import encode_prompt
from rlvr.train.config_checks import check_online_source, check_pairs_source
from rlvr.train.harness import Harness
from rlvr.train.pairs import MAX_BAD_FRACTION, PairsFile, group_pairs, read_pairs
from rlvr.train.preference.batches import LabelledBatch, PairBatch, sequence_logps
from rlvr.train.scorers.reference import frozen_reference
from tasks.base import stable_hash

if TYPE_CHECKING:
    from rlvr.train.preference.recipe import PreferenceTrainConfig

CACHE_FILE = "reference_logps.pt"
SCORE_CHUNK = 512
"""Pairs per batch of reference scoring (the forwards run in micro-batches inside it)."""

Examples = tuple["PairBatch | LabelledBatch", int]
"""A step's batch and how many of its rows are this process's (0: a placeholder with which this
process joins another process's update with weight 0)."""


class ExampleSource(Protocol):
    """The preference recipe's examples. Set up in the recipe's order: constructed (and `check`ed)
    before any model loads, `load` with the policy's starting weights before they are wrapped for
    training, `start` once the policy's group source exists; then `next_batch` each step."""

    online: ClassVar[bool]
    """Samples from the current policy: its reference may follow the policy and its failed verifications are counted."""
    refreshes_reference: bool
    """The reference takes the policy's weights every ``algo.ref_update_every`` steps (iterative DPO)."""

    @staticmethod
    def check(cfg: PreferenceTrainConfig) -> None:
        """Refuse a config this source cannot run (before any model loads)."""

    def load(self, model: torch.nn.Module, tokenizer: Any) -> torch.nn.Module | None:
        """With the loaded policy (its starting weights): the frozen reference this source scores with, or None."""

    def start(self, groups: GroupSource) -> None:
        """The policy's group source, once the policy is ready to train."""

    def next_batch(self, step: int, metrics: dict[str, float]) -> Examples | None:
        """This step's examples with their reference log-probs, the source's metrics added to
        ``metrics``; None: no update this step."""

    @property
    def position(self) -> int:
        """The data position after this step's examples (seeds the minibatch shuffle)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# -- offline pairs --------------------------------------------------------------------------------

class OfflinePairs:
    """The pairs of ``pairs.path`` as token ids, served in seeded per-epoch shuffles (position ``k``
    is always the same pair, so a resumed run continues exactly), with reference log-probs."""

    def __init__(self, source: PairsFile, cfg: PreferenceTrainConfig, tokenizer: Any, max_length: int | None, harness: Harness):
        self.cfg, self.harness = cfg, harness
        self.prompts, self.chosen, self.rejected, usable = [], [], [], []
        eos = [tokenizer.eos_token_id]
        for pair in source.pairs:
            prompt = encode_prompt(tokenizer, pair.prompt)
            chosen = tokenizer(pair.chosen, add_special_tokens=False)["input_ids"] + eos
            rejected = tokenizer(pair.rejected, add_special_tokens=False)["input_ids"] + eos
            longest = len(prompt) + max(len(chosen), len(rejected))
            if max_length is not None and longest > max_length:
                problem = f"{pair.where}: {longest} tokens, longer than {max_length} (pairs.max_length, or the model's max_position_embeddings)"
                if cfg.pairs.on_bad_row == "error":
                    raise UserError(problem)
                source.bad.append(problem)
                continue
            self.prompts.append(prompt)
            self.chosen.append(chosen)
            self.rejected.append(rejected)
            usable.append(pair)
        if not usable:
            raise UserError(f"no pair of {source.path} fits in {max_length} tokens")
        source.pairs = usable
        self.source = source
        self.pad_id = tokenizer.pad_token_id
        self.position = 0
        self.ref: torch.Tensor | None = None  # [P, 2] cached reference log-probs (chosen, rejected)
        harness.print(source.summary())
        harness.rundir.write_json("pairs_report.json", source.report())

    def __len__(self) -> int:
        return len(self.prompts)

    def at(self, start: int, count: int) -> torch.Tensor:
        """``[count]`` the pair indices at data positions ``start .. start + count - 1`` (all
        processes): position ``k`` is pair ``order_e[k mod P]`` of epoch ``e = k // P``'s seeded shuffle."""
        n, out = len(self), []
        position = start
        while len(out) < count:
            epoch, offset = divmod(position, n)
            order = torch.randperm(n, generator=torch.Generator().manual_seed(stable_hash("pairs", self.cfg.seed, epoch) % 2**63))
            part = order[offset: offset + count - len(out)].tolist()
            out += part
            position += len(part)
        return torch.tensor(out, dtype=torch.long)

    def take(self, count: int) -> torch.Tensor:
        """This process's share of the next ``count x processes`` pair indices."""
        world, rank = self.harness.num_processes, self.harness.rank
        out = self.at(self.position, count * world)
        self.position += count * world
        return out[rank * count: (rank + 1) * count]

    def used(self, start: int, steps: int, count: int) -> torch.Tensor:
        """Sorted indices of the pairs that ``steps`` steps of ``count`` pairs per process draw
        from data position ``start`` on (every process's share)."""
        return self.at(start, steps * count * self.harness.num_processes).unique()

    def batch(self, idx: torch.Tensor) -> PairBatch:
        b = PairBatch.build([self.prompts[i] for i in idx], [self.chosen[i] for i in idx], [self.rejected[i] for i in idx], self.pad_id)
        if self.ref is not None:
            b.ref = torch.cat([self.ref[idx, 0], self.ref[idx, 1]])
            if b.ref.isnan().any():  # the cache holds the pairs the run was set up to use: a bug, not bad data
                raise RuntimeError(f"pairs {idx[self.ref[idx].isnan().any(-1)].tolist()} have no reference log-probs")
        return b

    def fingerprint(self, reference: str) -> str:
        """Identifies the cached numbers: the reference's files and every pair's token ids."""
        h = hashlib.sha256(json.dumps({"reference": reference, "files": _file_stats(reference)}, sort_keys=True).encode())
        for seqs in (self.prompts, self.chosen, self.rejected):
            h.update(json.dumps(seqs, separators=(",", ":")).encode())
        return h.hexdigest()

    def score(self, model: torch.nn.Module, idx: torch.Tensor, micro_batch_size: int, progress: bool = False) -> torch.Tensor:
        """``[len(idx), 2]`` reference log-probs of the chosen and rejected completions of pairs
        ``idx``, in chunks of `SCORE_CHUNK` pairs, with a progress bar when there is more than one."""
        out = torch.zeros(len(idx), 2)
        with progress_display(len(idx), desc="reference log-probs", unit="pair", leave=False,
                              enabled=progress and len(idx) > SCORE_CHUNK) as bar:
            for start in range(0, len(idx), SCORE_CHUNK):
                chunk = idx[start: start + SCORE_CHUNK]
                tokens = PairBatch.build([self.prompts[i] for i in chunk], [self.chosen[i] for i in chunk], [self.rejected[i] for i in chunk],
                                         self.pad_id).tokens
                logps = sequence_logps(model, tokens, self.harness, micro_batch_size)
                out[start: start + len(chunk), 0], out[start: start + len(chunk), 1] = logps[: len(chunk)], logps[len(chunk):]
                bar.update(len(chunk))
        return out


def _file_stats(path: str) -> list[tuple[str, int, int]] | None:
    folder = Path(path)
    if not folder.is_dir():
        return None
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file())


class OfflinePairSource:
    """``algo.preference.source=pairs`` (dpo): ``pairs.batch_size`` pairs of the pairs file a step,
    in seeded epoch shuffles. Their reference log-probs are cached before the first step (see
    `rlvr.train.preference`), or with ``algo.preference.reference_cache=false`` scored each step by a
    reference held in memory."""

    online = False

    @staticmethod
    def check(cfg: PreferenceTrainConfig) -> None:
        check_pairs_source(cfg)

    def __init__(self, cfg: PreferenceTrainConfig, harness: Harness):
        self.cfg, self.harness = cfg, harness
        self.micro, self.total_steps = cfg.update.micro_batch_size, cfg.update.steps
        self.refreshes_reference = False
        self.file = read_pairs(cfg.pairs.path, cfg.pairs.on_bad_row, MAX_BAD_FRACTION)  # bad data is reported before any model loads
        self.pairs: OfflinePairs | None = None
        self.reference: torch.nn.Module | None = None

    def load(self, model: torch.nn.Module, tokenizer: Any) -> torch.nn.Module | None:
        cfg = self.cfg
        max_length = cfg.pairs.max_length or getattr(model.config, "max_position_embeddings", None)
        self.pairs = OfflinePairs(self.file, cfg, tokenizer, max_length, self.harness)
        if cfg.algo.preference.reference_cache:
            self.pairs.ref = self._cached_reference_logps(model)
        else:
            self.reference = frozen_reference(self.harness, model, cfg.model.name_or_path, refreshed=False,
                                              needed_for=f"algo.preset={cfg.algo.preset}")
        return self.reference

    def _cached_reference_logps(self, policy: torch.nn.Module) -> torch.Tensor:
        """``[P, 2]`` reference log-probs of the pairs this run's remaining steps draw (NaN for the
        others; see the module docstring for the cache), from the loaded ``policy`` when it still
        holds the starting weights."""
        harness, pairs, path = self.harness, self.pairs, self.cfg.model.name_or_path
        cache = self.cfg.run_dir / CACHE_FILE
        fingerprint = pairs.fingerprint(resolve_model(path))
        resumed = harness.resumed_state()
        start, done = (resumed["recipe"]["pairs_position"], resumed["step"]) if resumed else (0, 0)
        steps = max(self.total_steps - done, 0)
        needed = pairs.used(start, steps, self.cfg.pairs.batch_size)
        logps = torch.full((len(pairs), 2), math.nan)
        if cache.is_file():
            saved = torch.load(cache, weights_only=False)
            if saved.get("fingerprint") == fingerprint:
                logps = saved["logps"]
            else:
                harness.print(f"{cache} was computed for other pairs or another reference: computing it again")
        missing = needed[logps[needed].isnan().any(-1)]
        if not len(missing):
            return logps
        t0, progress = time.perf_counter(), self.cfg.log.progress and harness.is_main
        if harness.resume_from is None:  # the policy still holds the starting weights
            logps[missing] = pairs.score(policy.to(harness.device), missing, self.micro, progress)
        else:
            model, _ = harness.load_model(path, "reference (log-probs recomputed, then released)")
            logps[missing] = pairs.score(harness.frozen(model), missing, self.micro, progress)
            del model
        if harness.is_main:
            tmp = cache.with_suffix(".tmp")
            torch.save({"fingerprint": fingerprint, "reference": path, "logps": logps}, tmp)
            tmp.replace(cache)
        harness.print(f"reference log-probs of {len(missing)} pairs (of {len(pairs)}; those {steps} steps use) computed in "
                      f"{time.perf_counter() - t0:.1f} s and cached in {cache}")
        return logps

    def start(self, groups: GroupSource) -> None:
        pass  # the group source only evaluates

    def next_batch(self, step: int, metrics: dict[str, float]) -> Examples:
        batch = self.pairs.batch(self.pairs.take(self.cfg.pairs.batch_size))
        if self.reference is not None:
            batch.ref = sequence_logps(self.reference, batch.tokens, self.harness, self.micro)
        metrics |= {"data/position": float(self.pairs.position), "data/epoch": self.pairs.position / len(self.pairs), "batch/pairs": float(batch.size)}
        return batch, batch.size

    @property
    def position(self) -> int:
        return self.pairs.position

    def state_dict(self) -> dict[str, Any]:
        return {"pairs_position": self.pairs.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pairs.position = state["pairs_position"]


# -- online examples --------------------------------------------------------------------------------

class OnlineSource:
    """``algo.preference.source=online``: each step the policy's sampled groups, verified and kept
    by the algorithm's group filter (`GroupSource`), become examples (`_examples`, in a subclass)."""

    online = True

    @staticmethod
    def check(cfg: PreferenceTrainConfig) -> None:
        check_online_source(cfg)

    def __init__(self, cfg: PreferenceTrainConfig, harness: Harness):
        self.cfg, self.harness = cfg, harness
        self.settings = cfg.algo.preference
        self.refreshes_reference = bool(cfg.algo.ref_update_every)  # iterative DPO: the reference follows the policy
        self.groups: GroupSource | None = None

    def load(self, model: torch.nn.Module, tokenizer: Any) -> torch.nn.Module:
        self.tokenizer = tokenizer
        self.reference = frozen_reference(self.harness, model, self.cfg.model.name_or_path, refreshed=self.refreshes_reference,
                                          needed_for=f"algo.preset={self.cfg.algo.preset}")
        return self.reference

    def start(self, groups: GroupSource) -> None:
        self.groups = groups

    def next_batch(self, step: int, metrics: dict[str, float]) -> Examples | None:
        report, collected = self.groups.collect()
        metrics |= collected
        batch = self._examples(report, metrics)
        examples = batch.size if batch is not None else 0
        self.harness.log_samples(step, sample_rows(report, self.cfg.log.samples_per_step))
        if not self.groups.trainable(report, examples, metrics, step=step):
            return None
        if batch is None:  # another process has examples: join its update with a placeholder of weight 0
            batch = self._placeholder(report)
        return batch, examples

    def _examples(self, report: SamplingReport, metrics: dict[str, float]) -> PairBatch | LabelledBatch | None:
        raise NotImplementedError

    def _placeholder(self, report: SamplingReport) -> PairBatch | LabelledBatch:
        raise NotImplementedError

    def _reference_logps(self, tokens: TokenBatch) -> torch.Tensor:
        return sequence_logps(self.reference, tokens, self.harness, self.cfg.update.micro_batch_size)

    @property
    def position(self) -> int:
        return self.groups.position

    def state_dict(self) -> dict[str, Any]:
        return {"pairs_position": 0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass  # the group source carries the data position


class OnlinePairSource(OnlineSource):
    """online_dpo: pairs of a passing and a failing completion of the same prompt."""

    def _examples(self, report: SamplingReport, metrics: dict[str, float]) -> PairBatch | None:
        """The kept groups' pairs (``algo.preference.pairs_per_group``, ``pairing``), sequences as generated."""
        prompts, chosen, rejected, chosen_masks, rejected_masks, groups_with_pairs = [], [], [], [], [], 0
        for g in report.kept:
            rng = random.Random(stable_hash("pairs", self.cfg.seed, self.groups.position, g.problem.id))
            found = group_pairs([c.text for c in g.completions], g.verdicts, self.settings.pairs_per_group, self.settings.pairing, rng)
            groups_with_pairs += bool(found)
            for w, l in found:
                prompts.append(g.completions[w].prompt_ids)
                chosen.append(g.completions[w].token_ids)
                rejected.append(g.completions[l].token_ids)
                chosen_masks.append(g.completions[w].loss_mask)  # an episode's observations are context, not scored
                rejected_masks.append(g.completions[l].loss_mask)
        metrics |= {"batch/groups": float(len(report.kept)), "batch/groups_with_pairs": float(groups_with_pairs), "batch/pairs": float(len(prompts))}
        if not prompts:
            return None
        batch = PairBatch.build(prompts, chosen, rejected, self.tokenizer.pad_token_id, chosen_masks + rejected_masks)
        batch.ref = self._reference_logps(batch.tokens)
        return batch

    def _placeholder(self, report: SamplingReport) -> PairBatch:
        c = report.generated[0].completions[0]
        return PairBatch.build([c.prompt_ids], [c.token_ids], [c.token_ids], self.tokenizer.pad_token_id)


class LabelledSource(OnlineSource):
    """kto: single completions labelled desirable (passed) or undesirable, with the mismatched
    sequences of KTO's reference point."""

    def _examples(self, report: SamplingReport, metrics: dict[str, float]) -> LabelledBatch | None:
        """Every valid completion of the kept groups, desirable when it passed (a failed verification
        is left out, or undesirable with ``verify.on_failure=zero``)."""
        keep_failed = self.cfg.verify.on_failure == "zero"
        rows = [(g.problem.id, c, v.passed) for g in report.kept for c, v in zip(g.completions, g.verdicts)
                if keep_failed or not v.status.is_failure]
        metrics |= {"batch/groups": float(len(report.kept)), "batch/desirable": float(sum(r[2] for r in rows)),
                    "batch/undesirable": float(sum(not r[2] for r in rows))}
        if not rows:
            return None
        prompts = [c.prompt_ids for _, c, _ in rows]
        completions = [c.token_ids for _, c, _ in rows]
        masks = [c.loss_mask for _, c, _ in rows]  # an episode's observations are context, not scored
        tokens = build_token_batch(prompts, completions, self.tokenizer.pad_token_id, masks)
        partner = mismatched_partners([key for key, _, _ in rows])
        mismatched = None if partner is None else build_token_batch(prompts, [completions[j] for j in partner], self.tokenizer.pad_token_id,
                                                                    [masks[j] for j in partner])
        return LabelledBatch(tokens, self._reference_logps(tokens), torch.tensor([r[2] for r in rows]), mismatched,
                             None if mismatched is None else self._reference_logps(mismatched))

    def _placeholder(self, report: SamplingReport) -> LabelledBatch:
        c = report.generated[0].completions[0]
        return LabelledBatch(build_token_batch([c.prompt_ids], [c.token_ids], self.tokenizer.pad_token_id), torch.zeros(1),
                             torch.ones(1, dtype=torch.bool), None, None)


SOURCES: dict[tuple[str, bool], type[ExampleSource]] = {
    ("pairs", True): OfflinePairSource,
    ("online", True): OnlinePairSource,
    ("online", False): LabelledSource,
}
"""The example source of each ``(algo.preference.source, loss is paired)``; a pairs file with an
unpaired loss is refused when the config is read."""


def example_source(source: str, paired: bool) -> type[ExampleSource]:
    return SOURCES[source, paired]


__all__ = ["CACHE_FILE", "SOURCES", "ExampleSource", "Examples", "LabelledSource", "OfflinePairSource", "OfflinePairs", "OnlinePairSource",
           "OnlineSource", "example_source"]
