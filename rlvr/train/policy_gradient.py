"""The ``policy_gradient`` recipe: the GRPO family and PPO, the same loop for every preset.

    sample prompts -> generate groups -> verify -> (filter, refill) -> rollouts
    shape rewards -> advantages -> for each epoch and minibatch: objective -> optimizer step

The algorithm is a resolved table of parts (`rlvr.algos.config`); nothing here branches on a
preset's name. Learned scorers are components built when the algorithm asks for them: PRIME's
implicit PRM (`rlvr.train.scorers.prm`) and PPO's critic (`rlvr.train.scorers.critic`). Streaming group sampling
(DAPO's dynamic sampling, PRIME's accuracy band) is `rlvr.rollout.sampling`, driven by the
`rlvr.rollout.groups.GroupSource` the online preference recipes share; run directory,
accumulation, checkpoints and the loop are the harness's (`rlvr.train.harness`).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass

import torch

from rlvr.algos.advantages import ADVANTAGES, AdvantageInputs, lambda_returns
from rlvr.algos.aggregation import Normalizer
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.objective import ObjectiveInputs, policy_objective, takes_behaviour
from rlvr.algos.correction import CORRECTIONS, mismatch_warning
from rlvr.algos.parts import Part, check_output
from rlvr.algos.config import AlgoConfig, CorrectionConfig
from rlvr.algos.shaping import overlong_buffer_tokens, soft_overlong_penalty, truncation_mask
from rlvr.rollout.base import SamplingParams
from rlvr.models.batch import TokenBatch, token_logprobs
from rlvr.train.config import TrainConfig
from rlvr.train.scorers.critic import Critic, ValueModel, check_tokenizer, value_metrics
from rlvr.train.accumulation import merge_stats
from rlvr.train.harness import Harness
from rlvr.train.recipe_base import AlgorithmRecipe
from rlvr.train.scorers import ScoringBatch
from rlvr.train.scorers.prm import ImplicitPRM
from rlvr.models.lora import shares_weights
from rlvr.train.scorers.reference import frozen_reference
from rlvr.rollout.tensors import Rollouts, build_rollouts, sample_rows, zero_variance_frac
from rlvr.rollout.sampling import SamplingReport
from rlvr.models.scoring import frozen_logprobs


@dataclass
class PolicyObjective:
    """`rlvr.algos.objective.policy_objective` over micro-batches of a rollout batch.

    The ``old`` of the importance ratio is ``old_logp`` when the update takes several optimizer
    steps (the policy before them, computed once), the engine's own ``rollout_logp`` when the batch
    was sampled by older weights than the policy's (``rollout.overlap``, ``rollout.async``) and
    nothing else corrects for that, and otherwise the proximal policy: the current forward's own
    log-probs, detached (a single step needs no extra forward). A mismatch correction
    (``correction``, `rlvr.algos.correction`) reweights or rejects tokens by the ratio of that
    ``old`` to the engine's log-probs (off-policy batches: proximal over behaviour, so the weight
    covers both the staleness and the engine's numerics); a policy loss that reads the behaviour
    policy itself (``decoupled``) gets the proximal ``old`` and the engine's log-probs as the
    behaviour (a rejected token's loss is 0 and it still counts in the normalisers, which
    come from ``mask`` before any forward: see `rlvr.algos.objective.ObjectiveInputs.keep`);
    ``top_p``/``top_k`` score tokens under the sampler's truncated distribution.
    """

    model: torch.nn.Module
    batch: TokenBatch
    mask: torch.Tensor  # [B, T] tokens the loss covers
    advantages: torch.Tensor  # [B, T]
    old_logp: torch.Tensor | None  # [B, T]
    ref_logp: torch.Tensor | None  # [B, T]
    rollout_logp: torch.Tensor  # [B, T] the engine's
    parts: AlgoConfig
    sampling: SamplingParams
    max_len: float
    device: torch.device
    stale: bool = False
    correction: Part = dataclasses.field(default_factory=CorrectionConfig)  # algo.correction
    pack: bool = False

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        m = self.mask[rows]
        return torch.stack([(m.sum(-1) > 0).sum().float(), m.sum()])

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        sub = self.batch.select(rows).to(self.device)
        width = sub.completion_mask.shape[1]
        m = self.mask[rows, :width].to(self.device)
        s = self.sampling
        logp, entropy = token_logprobs(self.model, sub, s.temperature, entropy=True, entropy_grad=self.parts.entropy_coef != 0,
                                       top_p=s.top_p, top_k=s.top_k, pack=self.pack)
        rollout = self.rollout_logp[rows, :width].to(self.device)
        behaviour_loss = takes_behaviour(self.parts.policy_loss.name)
        if self.old_logp is not None:
            old = self.old_logp[rows, :width].to(self.device)
        elif self.stale and self.correction.name == "none" and not behaviour_loss:
            old = rollout  # the engine's log-probs are the behaviour policy's: the ratio is taken against them
        else:
            old = logp.detach()  # the proximal policy: the weights before this update (one optimizer step: this forward's)
        corrected = CORRECTIONS.get(self.correction.name)(old, rollout, m, **self.correction.params)
        ref = None if self.ref_logp is None else self.ref_logp[rows, :width].to(self.device)
        norm = Normalizer(sequences=float(totals[0]), tokens=float(totals[1]), max_len=self.max_len)
        # rejected tokens (MIS) keep their place in the loss mask: zero-loss tokens under the batch's normalisers
        inputs = ObjectiveInputs(logp, old, self.advantages[rows, :width].to(self.device), m, norm, ref, entropy,
                                 corrected.weights if self.correction.name != "none" else None, keep=corrected.mask,
                                 behaviour_logp=rollout if behaviour_loss else None)
        loss, stats = policy_objective(inputs, self.parts)
        stats |= {f"mismatch_{k}": v for k, v in corrected.stats.items()}
        if self.old_logp is None and not self.stale:  # the trainer's log-probs beside the engine's, same weights
            gap = (logp.detach() - rollout).abs()
            stats["logprob_gap"] = float((gap * m).sum() / m.sum().clamp(min=1))
        return loss, stats, float(m.sum())


class PolicyGradient(AlgorithmRecipe):
    """Runs a `TrainConfig` whose preset names the ``policy_gradient`` recipe."""

    config_class = TrainConfig

    def __init__(self, cfg: TrainConfig, harness: Harness):
        self.cfg, self.harness = cfg, harness
        self.algo: AlgoConfig = cfg.algo  # resolved and checked when the config was read
        self._check_settings()
        self.task = self._open_task()
        self.epochs, self.minibatches = self._passes()
        self.total_steps = cfg.update.steps
        self.warned_mismatch = False
        self.title = f"{cfg.name}: {self.algo.preset} on {self.task.id}"
        micro = cfg.update.micro_batch_size
        optimizer_steps = cfg.update.steps * self.epochs * self.minibatches

        model, self.tokenizer = harness.load_policy(cfg.model.name_or_path)
        self.reference = self._reference(model) if self.algo.needs_reference else None  # before the policy is wrapped or sharded
        self.policy = harness.trainable("policy", model, cfg.optim, optimizer_steps, tokenizer=self.tokenizer)
        self.prm = self._prm(micro) if self.algo.prm.enabled else None
        self.critic = self._critic(micro, optimizer_steps) if self.algo.critic.enabled else None

        self.groups = self._group_source()
        # (not with LoRA: the reference is the policy's own module with its adapters off, not usable while it trains)
        if cfg.rollout.overlap and self.reference is not None and not self.algo.ref_update_every and not shares_weights(self.reference):
            self.groups.prepare = self._prescore_reference  # the frozen reference scores the next batch while this one trains

    # -- setup ----------------------------------------------------------------------------------

    def _check_settings(self) -> None:
        super()._check_settings()
        cfg = self.cfg
        if self.algo.critic.enabled and self.algo.critic.warmup_steps >= cfg.update.steps > 0:
            warnings.warn(f"algo.critic.warmup_steps={self.algo.critic.warmup_steps} >= update.steps={cfg.update.steps}: the policy is never updated",
                          UserWarning, stacklevel=2)

    def _reference(self, policy: torch.nn.Module) -> torch.nn.Module:
        """The frozen reference: the policy's starting weights (refreshed every N steps when asked)."""
        return frozen_reference(self.harness, policy, self.cfg.model.name_or_path, refreshed=bool(self.algo.ref_update_every),
                                needed_for=f"algo.kl.mode={self.algo.kl.mode}{' with a PRM' if self.algo.prm.enabled else ''}")

    def _prm(self, micro: int) -> ImplicitPRM:
        """PRIME's implicit PRM and its frozen reference, both from ``algo.prm.init`` (default: the
        policy's starting weights, whose frozen copy is then shared with the policy's reference)."""
        cfg, harness, settings = self.cfg, self.harness, self.algo.prm
        init = settings.init or cfg.model.name_or_path
        model, _ = harness.load_model(harness.source("prm", init), "prm")
        self.prm_shares_reference = init == cfg.model.name_or_path and self.reference is not None and not self.algo.ref_update_every
        ref = self.reference if self.prm_shares_reference else harness.frozen(harness.load_model(init, "prm_reference")[0])
        # PRIME trains the PRM at a constant rate (1e-6 beside the policy's 5e-7)
        optim = dataclasses.replace(cfg.optim, lr=cfg.optim.lr * settings.lr_scale, schedule="constant", warmup_steps=0)
        part = harness.trainable("prm", model, optim, cfg.update.steps, tokenizer=self.tokenizer)
        return ImplicitPRM(part, ref, harness, settings.beta, micro)

    def _critic(self, micro: int, optimizer_steps: int) -> Critic:
        """PPO's value model, from ``algo.critic.init`` (default: the policy's starting weights; separate weights)."""
        cfg, harness, settings = self.cfg, self.harness, self.algo.critic
        if settings.init:
            check_tokenizer(settings.init, self.tokenizer)
        source = harness.source("critic", settings.init or cfg.model.name_or_path)
        model = ValueModel.from_pretrained(source, dtype=self.policy.unwrapped.dtype, trust_remote_code=cfg.model.trust_remote_code,
                                           attn_implementation=self.harness.attn_implementation)
        harness.record_model("critic", source, model)
        optim = dataclasses.replace(cfg.optim, lr=cfg.optim.lr * settings.lr_scale)
        part = harness.trainable("critic", model, optim, optimizer_steps, tokenizer=self.tokenizer)
        return Critic(part, harness, settings.value_clip, micro)

    # -- one step -------------------------------------------------------------------------------

    def step(self, step: int) -> dict[str, float]:
        cfg = self.cfg
        t_step = time.perf_counter()
        report, rollouts, metrics = self.collect()
        if self.groups.trainable(report, float(rollouts.valid.sum()) if rollouts is not None else 0.0, metrics, step=step):
            metrics |= self.update(rollouts, step)
            self._warn_on_mismatch(metrics)
        self._refresh_reference(step, self.algo.ref_update_every, metrics)
        self.groups.after_update()  # asynchronous generation: the new weights go to the worker now
        self.harness.log_samples(step, sample_rows(report, cfg.log.samples_per_step))
        metrics["throughput/tokens_per_s"] = metrics.get("rollout/tokens", 0.0) / max(time.perf_counter() - t_step, 1e-9)
        return metrics

    def _warn_on_mismatch(self, metrics: dict[str, float]) -> None:
        """Once a run: say when the sampler's and the trainer's log-probs disagree while nothing corrects for it (`mismatch_warning`)."""
        warning = mismatch_warning(metrics.get("mismatch/kl_k1", 0.0), self.algo.correction.name, self.cfg.model.precision)
        if warning and not self.warned_mismatch:  # once a run
            self.harness.print(f"warning: {warning}")
            self.warned_mismatch = True

    def collect(self) -> tuple[SamplingReport, Rollouts | None, dict[str, float]]:
        """Generate and verify groups until the training batch is full (`GroupSource.collect`);
        return the sampling report, the kept groups as tensors (None when none was kept) and metrics.

        Rewards, accuracy and lengths are logged over every generated group (what the policy does);
        the ``batch/`` and ``sampling/`` metrics describe what the step trains on and what it cost."""
        cfg, G = self.cfg, self.cfg.rollout.group_size
        report, metrics = self.groups.collect()
        groups, placeholder = report.kept, False
        if not groups:
            if self.harness.num_processes == 1 or not report.generated:
                return report, None, metrics
            groups, placeholder = report.generated[:1], True  # another process kept groups: join its update with no rows
        rollouts = build_rollouts(groups, self.tokenizer.pad_token_id, drop_failed=cfg.verify.on_failure == "drop", placeholder=placeholder,
                                  stale=report.weights_version != self.policy.updates)
        if not placeholder:
            rollouts.ref_logp = report.prepared.get("ref_logp")
        metrics |= {"batch/groups": float(len(report.kept)), "batch/reward_mean": float(rollouts.rewards.mean()),
                    "batch/zero_variance_frac": zero_variance_frac(rollouts.rewards, G), "verify/dropped": float((~rollouts.valid).sum())}
        return report, rollouts, metrics

    # -- the update -----------------------------------------------------------------------------

    def update(self, r: Rollouts, step: int) -> dict[str, float]:
        """Shape rewards -> advantages -> for each epoch and minibatch: critic and policy steps."""
        t0, algo = time.perf_counter(), self.algo
        metrics: dict[str, float] = {}
        rows = r.rows
        ref_logp = r.ref_logp if r.ref_logp is not None else self._logp(self.reference, r, rows) if self.reference is not None else None
        rewards, kl_penalty = self.shape_rewards(r, ref_logp, metrics)
        token_rewards = self.prm_rewards(r, rows, ref_logp, metrics) if self.prm is not None else None
        values = self.critic.score(ScoringBatch(r.batch, rows, r.mask, r.lengths))[0] if self.critic is not None else None
        inputs = AdvantageInputs(rewards=rewards, group_ids=r.group_ids, mask=r.mask, valid=r.valid, step_rewards=r.step_rewards,
                                 step_mask=r.step_mask, kl_penalty=kl_penalty, token_rewards=token_rewards, values=values,
                                 reduce_sum=self.harness.reduce_sum)
        advantages = ADVANTAGES.get(algo.advantage.name)(inputs, **algo.advantage.params)
        check_output("advantage estimator", algo.advantage.name, advantages, tuple(r.mask.shape))
        if self._no_gradient(advantages, r.mask):  # e.g. every group all right or all wrong: no gradient
            metrics |= {"train/skipped": 1.0, "train/skipped_no_signal": 1.0, "time/train": time.perf_counter() - t0}
            return metrics
        returns = lambda_returns(inputs, **algo.advantage.params) if self.critic is not None else None
        mask, rows = self._trained_tokens(r, rows, metrics)
        old_logp = self._old_logp(r, rows, mask, metrics)
        objective = self._objective(r, mask, advantages, old_logp, ref_logp)
        train_policy = self.critic is None or step > algo.critic.warmup_steps
        policy_stats, critic_stats = [], []
        micro = self.cfg.update.micro_batch_size
        idle = self._idle_rows(advantages, mask)
        for minibatch in self._seeded_minibatches(rows, self.groups.position):
            if self.critic is not None:
                critic_stats.append(self.critic.update(ScoringBatch(r.batch, minibatch, mask, r.lengths), returns, values))
            if train_policy:
                policy_stats.append(self.harness.optimizer_step(self.policy, minibatch, objective, micro, self._micro_order(r),
                                                                idle=None if idle is None else idle[minibatch]))
        metrics |= _idle_metrics(idle, rows) | _policy_metrics(policy_stats) | _advantage_metrics(advantages, mask)
        if self.critic is not None:
            metrics |= _critic_metrics(critic_stats, values, returns, mask)
        metrics["train/policy_updated"] = float(train_policy)
        metrics["time/train"] = time.perf_counter() - t0
        return metrics

    def _trained_tokens(self, r: Rollouts, rows: torch.Tensor, metrics: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``[B, T]`` tokens the loss covers and the rows that have any: with ``algo.mask_truncated``
        truncated completions shape their groups' baselines but get no gradient."""
        mask = r.mask
        if self.algo.mask_truncated:  # truncated completions shape their groups' baselines but get no gradient
            mask = truncation_mask(r.truncated, mask)
            metrics["batch/masked_truncated"] = float((r.truncated & r.valid).sum())
            rows = torch.nonzero(mask.sum(-1) > 0).squeeze(1)
        return mask, rows

    def _old_logp(self, r: Rollouts, rows: torch.Tensor, mask: torch.Tensor, metrics: dict[str, float]) -> torch.Tensor | None:
        """The behaviour policy's log-probs ``[B, T]`` when the update takes several optimizer steps
        (the policy before them), else None (see `PolicyObjective`)."""
        single_step = self.epochs == 1 and self.minibatches == 1
        old_logp = None if single_step else self._logp(self.policy.unwrapped, r, rows, collective=self.harness.sharded)
        if old_logp is not None:
            metrics["rollout/logprob_gap"] = _masked_mean((old_logp - r.rollout_logp).abs(), mask)
        return old_logp

    def _objective(self, r: Rollouts, mask: torch.Tensor, advantages: torch.Tensor, old_logp: torch.Tensor | None,
                   ref_logp: torch.Tensor | None) -> PolicyObjective:
        cfg, algo = self.cfg, self.algo
        return PolicyObjective(self.policy.model, r.batch, mask, advantages, old_logp, ref_logp, r.rollout_logp, algo,
                               self.groups.sampling, float(cfg.update.max_len_norm or cfg.rollout.max_new_tokens),
                               self.harness.device, stale=r.stale, correction=algo.correction, pack=cfg.update.pack)

    def shape_rewards(self, r: Rollouts, ref_logp: torch.Tensor | None, metrics: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Outcome rewards ``[B]`` with DAPO's soft overlong penalty, and the per-token KL penalty
        ``[B, T]`` when the KL lives in the reward (``beta * KL_t``, taken from the reward)."""
        algo, cfg = self.algo, self.cfg
        rewards = r.rewards.clone()
        buffer = overlong_buffer_tokens(cfg.rollout.max_new_tokens, algo.overlong_buffer_frac)
        if buffer > 0:
            lengths = torch.tensor([len(c.token_ids) for c in r.completions])
            penalty = soft_overlong_penalty(lengths, cfg.rollout.max_new_tokens, buffer, algo.overlong_penalty)
            rewards = rewards + penalty
            metrics["reward/overlong_penalty"] = float(penalty[r.valid].mean()) if r.valid.any() else 0.0
        kl_penalty = None
        if ref_logp is not None and algo.kl_active and algo.kl.mode == "reward":
            kl_penalty = algo.kl.coef * KL_ESTIMATORS.get(algo.kl.estimator)(r.rollout_logp, ref_logp) * r.mask
            metrics["reward/kl_penalty"] = float(kl_penalty.sum() / r.valid.sum().clamp(min=1))
        return rewards, kl_penalty

    def prm_rewards(self, r: Rollouts, rows: torch.Tensor, ref_logp: torch.Tensor | None, metrics: dict[str, float]) -> torch.Tensor:
        """The implicit PRM's token rewards ``[B, T]``, updating it on the outcome labels before
        (PRIME) or after scoring. ``prm/loss`` and ``prm/accuracy`` are its prediction on labels it
        had not seen."""
        t0, prm, mode = time.perf_counter(), self.prm, self.algo.prm.update
        labels = r.passed.float()
        # reuse the policy's reference log-probs only when they are the numbers the PRM reads: scored
        # under a truncated sampler's distribution they carry beta * log Z_t <= 0 into every reward
        s = self.groups.sampling
        shared = self.prm_shares_reference and ref_logp is not None and prm.reads_like(s.temperature, s.top_p, s.top_k, self.cfg.update.pack)
        batch = ScoringBatch(r.batch, rows, r.mask, r.lengths, ref_logp if shared else prm.reference_logp(r.batch, rows, r.lengths))
        if mode == "before":
            metrics |= {f"prm/{k}": v for k, v in prm.update(batch, labels).items()}
        rewards, scored = prm.score(batch, labels)
        if mode != "before":
            metrics |= {f"prm/{k}": v for k, v in scored.items()}
        if mode == "after":
            metrics["prm/grad_norm"] = prm.update(batch, labels).get("grad_norm", float("nan"))
        valid = r.mask.sum(-1) > 0
        metrics["prm/token_reward_mean"] = float(rewards.sum() / r.mask.sum().clamp(min=1))
        metrics["prm/seq_reward_mean"] = float(rewards.sum(-1)[valid].mean()) if valid.any() else 0.0
        metrics["time/prm"] = time.perf_counter() - t0
        return rewards

    def _no_gradient(self, advantages: torch.Tensor, mask: torch.Tensor) -> bool:
        """Whether the policy update would have a zero gradient, so that it can be skipped: every
        advantage is 0 on every process, and no other term moves the policy (no critic or reward
        model to train, no entropy bonus, and no KL term in the loss unless the policy still equals
        its reference, where the KL's gradient is 0). A skipped step also skips the optimizer's
        weight decay and schedule step, as every other skipped step does."""
        algo = self.algo
        if self.critic is not None or self.prm is not None or algo.entropy_coef or (algo.kl_loss_coef and self.policy.updates > 0):
            return False
        signal = self.harness.reduce_sum(torch.tensor([float((advantages * mask).abs().sum())]))
        return float(signal[0]) == 0.0

    def _idle_rows(self, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        """``[B]`` bool: sequences whose policy loss and gradient are exactly 0, so the update need
        not forward them (a group whose rewards are all equal has zero advantages), or None when a
        term other than the advantage reaches every sequence (a KL in the loss, an entropy bonus)."""
        if self.algo.entropy_coef or self.algo.kl_loss_coef:
            return None
        return (advantages * mask).abs().sum(-1) == 0


    def _prescore_reference(self, report: SamplingReport) -> None:
        """The reference's log-probs of a batch's kept groups, as `update` would compute them (run
        in the prefetch thread: the reference is frozen, so they do not depend on when)."""
        if not report.kept:
            return
        r = build_rollouts(report.kept, self.tokenizer.pad_token_id, drop_failed=self.cfg.verify.on_failure == "drop")
        report.prepared["ref_logp"] = self._logp(self.reference, r, r.rows)

    def _logp(self, model: torch.nn.Module, r: Rollouts, rows: torch.Tensor, collective: bool = False) -> torch.Tensor:
        """Log-probs under ``model`` of the sampled tokens, scored as the sampler drew them."""
        micros = self.harness.micro_batches(rows, self.cfg.update.micro_batch_size, self._micro_order(r), collective)
        s = self.groups.sampling
        return frozen_logprobs(model, r.batch, micros, self.harness.device, s.temperature, s.top_p, s.top_k, pack=self.cfg.update.pack)

    def _micro_order(self, r: Rollouts) -> torch.Tensor:
        """What micro-batches are sorted by: packed, a group's sequences stay together (they share
        their prompt); padded, similar lengths go together (less padding)."""
        return r.group_ids if self.cfg.update.pack else r.lengths


def _idle_metrics(idle: torch.Tensor | None, rows: torch.Tensor) -> dict[str, float]:
    """The fraction of the trained rows the update did not need to forward (`PolicyGradient._idle_rows`)."""
    if idle is None:
        return {}
    return {"train/idle_rows_frac": float(idle[rows].float().mean()) if len(rows) else 0.0}


def _policy_metrics(steps: list[dict[str, float]]) -> dict[str, float]:
    """The policy's optimizer-step statistics, merged over the steps, under their logged names."""
    stats = merge_stats([s for s in steps if s])
    names = {"loss": "loss/total", "policy_loss": "loss/policy", "grad_norm": "optim/grad_norm", "lr": "optim/lr",
             "logprob_gap": "rollout/logprob_gap"}
    out = {names.get(k, f"mismatch/{k[len('mismatch_'):]}" if k.startswith("mismatch_") else f"policy/{k}"): v for k, v in stats.items()}
    if "policy/clip_frac_low" in out:
        out["policy/clip_frac"] = out["policy/clip_frac_low"] + out["policy/clip_frac_high"]
    return out


def _critic_metrics(steps: list[dict[str, float]], values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The value model's fit (`value_metrics`) and its optimizer-step statistics as ``critic/NAME``."""
    metrics = value_metrics(values, returns, mask)
    metrics |= {f"critic/{k if k != 'loss' else 'value_loss'}": v for k, v in merge_stats([s for s in steps if s]).items()}
    return metrics


def _advantage_metrics(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    m = mask.bool()
    a = advantages[m]
    if not a.numel():
        return {}
    return {"advantage/mean": float(a.mean()), "advantage/std": float(a.std()) if a.numel() > 1 else 0.0,
            "advantage/abs_mean": float(a.abs().mean())}


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))
