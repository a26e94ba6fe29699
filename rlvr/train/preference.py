"""The ``preference`` recipe: DPO and its variants on verified pairs, and KTO on pass/fail labels.

    offline pairs (dpo):  pairs file -> reference log-probs of the pairs the run will use (cached)
                          -> each step: a batch of pairs -> objective -> step
    online pairs (online_dpo): sample groups -> verify -> keep groups with a pass and a fail -> pairs -> objective -> step
    online labels (kto):  sample groups -> verify -> each completion desirable (passed) or not -> reference point -> objective -> step

The loss is a registered pure function (`rlvr.algos.preference`), the settings are
``algo.preference.*`` (`rlvr.algos.presets.PreferenceConfig`), the offline pairs file is the
``pairs.*`` section of this recipe's config. Sampling and verification are the same
`rlvr.rollout.groups.GroupSource` the policy-gradient recipe uses (with the algorithm's group filter:
DAPO's dynamic sampling keeps exactly the groups that give pairs); accumulation, checkpoints and the
loop are the harness's.

The reference is the policy's starting weights. For offline pairs its log-probs are computed
before the first step, with the policy itself (which still has those weights), for the pairs the
run's steps will draw (``update.steps x pairs.batch_size x processes`` data positions of the seeded
epoch shuffles, not the whole file), and cached in the run directory (``reference_logps.pt``, NaN
for pairs not scored), so no second model is held in memory. The cache is keyed by a fingerprint of
the reference (``model.name_or_path`` and its files' names, sizes and modification times) and of
every pair's token ids; a resumed run scores what its remaining steps draw and the cache lacks
(none when it resumes the same run; every such pair when the fingerprint differs: another pairs
file, tokenizer or base) from a temporarily loaded reference. ``algo.preference.reference_cache=false``
holds the reference in memory instead and scores each batch as it comes.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm import tqdm

from rlvr import UserError
from rlvr.algos.preference import (PAIR_STATS, PREFERENCE_LOSSES, UNPAIRED_STATS, LossParams, PreferenceLoss, SequenceLogps, kto_reference_point,
                                   mismatched_partners, pair_objective, unpaired_objective)
from rlvr.algos.presets import AlgoConfig, PreferenceConfig
from rlvr.config import help_field
from rlvr.models.paths import resolve_model
from rlvr.rollout.text import encode_prompt
from rlvr.models.batch import TokenBatch, build_token_batch, token_logprobs
from rlvr.train.config import TrainConfig
from rlvr.train.accumulation import merge_stats
from rlvr.train.harness import Harness
from rlvr.train.recipe_base import AlgorithmRecipe
from rlvr.rollout.verification_tally import VerificationTally
from rlvr.train.pairs import MAX_BAD_FRACTION, PairsFile, group_pairs, read_pairs
from rlvr.train.scorers.reference import frozen_reference
from rlvr.rollout.tensors import sample_rows
from rlvr.rollout.sampling import SamplingReport
from rlvr.train.scoring import frozen_logprobs
from tasks.base import stable_hash

CACHE_FILE = "reference_logps.pt"
SCORE_CHUNK = 512
"""Pairs per batch of reference scoring (the forwards run in micro-batches inside it)."""


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


# -- batches and their objectives ---------------------------------------------------------------

def sequence_logps(model: torch.nn.Module, batch: TokenBatch, harness: Harness, micro_batch_size: int, rows: torch.Tensor | None = None,
                   collective: bool = False) -> torch.Tensor:
    """``[B]`` summed log-probs of the completions of ``rows`` (default: all; 0 elsewhere) under a
    model that is not being trained, in micro-batches of similar length. ``collective``: the model
    is sharded, so every process joins as many forwards (`Harness.micro_batches`)."""
    rows = torch.arange(batch.input_ids.shape[0]) if rows is None else rows
    micros = harness.micro_batches(rows, micro_batch_size, batch.attention_mask.sum(-1), collective)
    return (frozen_logprobs(model, batch, micros, harness.device) * batch.completion_mask).sum(-1)


@dataclass
class PairBatch:
    """P pairs as one right-padded batch: chosen sequences in rows ``0..P-1``, rejected ones in
    rows ``P..2P-1``; ``ref`` ``[2P]`` their reference log-probs. Rows of the optimizer step are pairs."""

    tokens: TokenBatch
    ref: torch.Tensor

    @classmethod
    def build(cls, prompts: list[list[int]], chosen: list[list[int]], rejected: list[list[int]], pad_id: int,
              loss_masks: list[list[int] | None] | None = None) -> PairBatch:
        """``loss_masks``: chosen then rejected, as `build_token_batch` takes them (episodes' observations)."""
        return cls(build_token_batch(prompts + prompts, chosen + rejected, pad_id, loss_masks), torch.zeros(2 * len(prompts)))

    @property
    def size(self) -> int:
        return len(self.ref) // 2

    @property
    def lengths(self) -> torch.Tensor:
        """``[P]`` the longer sequence of each pair (micro-batches are sorted by it)."""
        n = self.tokens.attention_mask.sum(-1)
        return torch.maximum(n[: self.size], n[self.size:])


@dataclass
class PairObjective:
    """`rlvr.algos.preference.pair_objective` over micro-batches of pairs: one forward of the
    chosen and rejected sequences of the micro-batch's pairs."""

    model: torch.nn.Module
    batch: PairBatch
    loss_fn: PreferenceLoss
    params: LossParams
    length_norm: bool
    device: torch.device

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.tensor([float(len(rows))])

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        k, seq = len(rows), torch.cat([rows, rows + self.batch.size])
        sums, tokens = _policy_logps(self.model, self.batch.tokens.select(seq).to(self.device))
        ref = self.batch.ref[seq].to(self.device)
        loss, stats = pair_objective(SequenceLogps(sums[:k], ref[:k], tokens[:k]), SequenceLogps(sums[k:], ref[k:], tokens[k:]),
                                     self.loss_fn, self.params, self.length_norm, float(totals[0]))
        return loss, stats, float(k)


@dataclass
class LabelledBatch:
    """N completions labelled desirable (passed) or undesirable, with the mismatched sequences of
    KTO's reference point: row ``i``'s prompt followed by the completion of row ``partner[i]``."""

    tokens: TokenBatch
    ref: torch.Tensor  # [N]
    desirable: torch.Tensor  # [N] bool
    mismatched: TokenBatch | None  # None when every completion answers the same prompt
    mismatched_ref: torch.Tensor | None  # [N]

    @property
    def size(self) -> int:
        return len(self.ref)

    @property
    def lengths(self) -> torch.Tensor:
        return self.tokens.attention_mask.sum(-1)


@dataclass
class LabelledObjective:
    """`rlvr.algos.preference.unpaired_objective` over micro-batches of labelled completions,
    with the minibatch's reference point ``z_ref`` (a constant)."""

    model: torch.nn.Module
    batch: LabelledBatch
    z_ref: float
    loss_fn: PreferenceLoss
    params: LossParams
    length_norm: bool
    device: torch.device

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        d = self.batch.desirable[rows]
        return torch.tensor([float(len(rows)), float(d.sum()), float((~d).sum())])

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        sums, tokens = _policy_logps(self.model, self.batch.tokens.select(rows).to(self.device))
        seqs = SequenceLogps(sums, self.batch.ref[rows].to(self.device), tokens)
        loss, stats = unpaired_objective(seqs, self.batch.desirable[rows].to(self.device), self.z_ref, self.loss_fn, self.params,
                                         self.length_norm, totals)
        return loss, stats, float(len(rows))


def _policy_logps(model: torch.nn.Module, sub: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B]`` summed completion log-probs (with grad) and completion lengths of a micro-batch."""
    logp, _ = token_logprobs(model, sub)
    m = sub.completion_mask
    return (logp * m).sum(-1), m.sum(-1)


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
        with tqdm(total=len(idx), desc="reference log-probs", unit="pair", leave=False, dynamic_ncols=True,
                  disable=not progress or len(idx) <= SCORE_CHUNK) as bar:
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


# -- the recipe -------------------------------------------------------------------------------------

class PreferenceRecipe(AlgorithmRecipe):
    """Runs a `PreferenceTrainConfig` whose preset names the ``preference`` recipe."""

    config_class = PreferenceTrainConfig

    def __init__(self, cfg: PreferenceTrainConfig, harness: Harness):
        self.cfg, self.harness = cfg, harness
        self.algo: AlgoConfig = cfg.algo  # resolved and checked when the config was read
        self.settings: PreferenceConfig = self.algo.preference
        self.online = self.settings.source == "online"
        self._check_settings()
        self.task = self._open_task()
        self.loss_fn: PreferenceLoss = PREFERENCE_LOSSES.get(self.settings.loss)
        self.params = LossParams(self.settings.beta, self.settings.label_smoothing, self.settings.desirable_weight, self.settings.undesirable_weight)
        self.epochs, self.minibatches = self._passes()
        self.micro = cfg.update.micro_batch_size
        self.refreshes = self.online and bool(self.algo.ref_update_every)  # iterative DPO: the reference follows the policy
        self.total_steps = cfg.update.steps
        self.title = f"{cfg.name}: {self.algo.preset} ({self.settings.loss}) on {self.task.id}"
        pairs_file = None if self.online else read_pairs(cfg.pairs.path, cfg.pairs.on_bad_row, MAX_BAD_FRACTION)  # bad data is reported before any model loads

        model, self.tokenizer = harness.load_policy(cfg.model.name_or_path)
        self.pairs: OfflinePairs | None = None
        self.reference: torch.nn.Module | None = None
        if not self.online:
            max_length = cfg.pairs.max_length or getattr(model.config, "max_position_embeddings", None)
            self.pairs = OfflinePairs(pairs_file, cfg, self.tokenizer, max_length, harness)
        # the reference (or its cached log-probs) comes from the loaded weights, before the policy is wrapped or sharded
        if self.online or not self.settings.reference_cache:
            self.reference = frozen_reference(harness, model, cfg.model.name_or_path, refreshed=self.refreshes,
                                              needed_for=f"algo.preset={self.algo.preset}")
        else:
            self.pairs.ref = self._cached_reference_logps(model)
        self.policy = harness.trainable("policy", model, cfg.optim, cfg.update.steps * self.epochs * self.minibatches, tokenizer=self.tokenizer)
        self.groups = self._group_source()

    def _check_settings(self) -> None:
        super()._check_settings()
        cfg = self.cfg
        if self.online and cfg.pairs.path:
            raise UserError(f"pairs.path is set but algo.preset={self.algo.preset} samples its examples online "
                            "(algo.preference.source=online); use algo.preset=dpo to train on a pairs file")
        if not self.online and not cfg.pairs.path:
            raise UserError(f"algo.preset={self.algo.preset} trains on a pairs file: set pairs.path=FILE "
                            "(build one with `rlvr pairs build --model M --task T --out pairs.jsonl`), or use algo.preset=online_dpo")

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

    # -- one step -------------------------------------------------------------------------------

    def step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        if self.online:
            metrics = self._online_step(step)
        else:
            idx = self.pairs.take(self.cfg.pairs.batch_size)
            batch = self.pairs.batch(idx)
            if self.reference is not None:
                batch.ref = self._reference_logps(batch.tokens)
            metrics = {"data/position": float(self.pairs.position), "data/epoch": self.pairs.position / len(self.pairs),
                       "batch/pairs": float(batch.size)} | self.update(batch)
        self._refresh_reference(step, self.algo.ref_update_every if self.refreshes else 0, metrics)
        metrics["time/train"] = time.perf_counter() - t0 - metrics.get("time/generate", 0.0) - metrics.get("time/verify_wait", 0.0)
        return metrics

    def _online_step(self, step: int) -> dict[str, float]:
        report, metrics = self.groups.collect()
        paired = self.loss_fn.paired
        batch = self._pairs_of(report, metrics) if paired else self._labelled_of(report, metrics)
        examples = batch.size if batch is not None else 0
        self.harness.log_samples(step, sample_rows(report, self.cfg.log.samples_per_step))
        if not self.groups.trainable(report, examples, metrics, step=step):
            return metrics
        if batch is None:  # another process has examples: join its update with a placeholder of weight 0
            batch = self._placeholder(report, paired)
        return metrics | self.update(batch, local_rows=examples)

    def _pairs_of(self, report: SamplingReport, metrics: dict[str, float]) -> PairBatch | None:
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

    def _labelled_of(self, report: SamplingReport, metrics: dict[str, float]) -> LabelledBatch | None:
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

    def _placeholder(self, report: SamplingReport, paired: bool) -> PairBatch | LabelledBatch:
        c = report.generated[0].completions[0]
        if paired:
            return PairBatch.build([c.prompt_ids], [c.token_ids], [c.token_ids], self.tokenizer.pad_token_id)
        return LabelledBatch(build_token_batch([c.prompt_ids], [c.token_ids], self.tokenizer.pad_token_id), torch.zeros(1),
                             torch.ones(1, dtype=torch.bool), None, None)

    def _reference_logps(self, tokens: TokenBatch) -> torch.Tensor:
        return sequence_logps(self.reference, tokens, self.harness, self.micro)

    # -- the update -----------------------------------------------------------------------------

    def update(self, batch: PairBatch | LabelledBatch, local_rows: int | None = None) -> dict[str, float]:
        """For each epoch and minibatch: (KTO: the reference point) -> objective -> optimizer step.
        ``local_rows`` 0 marks a placeholder batch: this process joins with no rows."""
        rows = torch.arange(batch.size if local_rows is None else local_rows)
        paired = isinstance(batch, PairBatch)
        micro = max(1, self.micro // 2) if paired else self.micro  # update.micro_batch_size counts sequences; a pair is two
        stats, z_refs = [], []
        for minibatch in self._minibatches(rows):
            if paired:
                objective = PairObjective(self.policy.model, batch, self.loss_fn, self.params, self.settings.length_norm, self.harness.device)
            else:
                z_refs.append(self._reference_point(batch, minibatch))
                objective = LabelledObjective(self.policy.model, batch, z_refs[-1], self.loss_fn, self.params, self.settings.length_norm,
                                              self.harness.device)
            stats.append(self.harness.optimizer_step(self.policy, minibatch, objective, micro, batch.lengths))
        merged = merge_stats([s for s in stats if s])
        # this process's shares of whole-batch means (and of the loss), summed over processes: the batch's values
        shared = ("loss", *(PAIR_STATS if paired else UNPAIRED_STATS))
        merged |= dict(zip(shared, self.harness.reduce_sum(torch.tensor([merged.get(k, 0.0) for k in shared], dtype=torch.float64)).tolist()))
        names = {"loss": "loss/total", "grad_norm": "optim/grad_norm", "lr": "optim/lr"}
        out = {names.get(k, f"preference/{k}"): v for k, v in merged.items()}
        if z_refs:
            out["preference/kl_ref_point"] = sum(z_refs) / len(z_refs)
        return out

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
        return self._seeded_minibatches(rows, self.groups.position if self.online else self.pairs.position)

    # -- evaluation, final model, state ---------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"pairs_position": self.pairs.position if self.pairs else 0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.pairs is not None:
            self.pairs.position = state["pairs_position"]

    def verification(self) -> VerificationTally | None:
        return super().verification() if self.online else None


__all__ = ["LabelledBatch", "LabelledObjective", "OfflinePairs", "PairBatch", "PairObjective", "PairsConfig", "PreferenceRecipe",
           "PreferenceTrainConfig", "sequence_logps"]
