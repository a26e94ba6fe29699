"""The RL training loop, the same for every algorithm:

    sample prompts -> generate groups -> verify -> (filter, refill) -> advantages -> policy update -> log

Each arrow is one call into the module that owns it; the algorithm is a resolved table of parts
(`rlvr.algos.presets`), so nothing here branches on an algorithm's name. Streaming group
sampling (DAPO's dynamic sampling, PRIME's accuracy band) is `rlvr.train.sampling`; PRIME's
implicit process reward model is `rlvr.train.prm`. Built on accelerate: one process by default,
many through ``accelerate launch`` on GPUs or ``torchrun --nproc_per_node N`` (gloo) on CPUs.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import itertools
import math
import signal
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm import tqdm

from envs.pool import VerifierPool
from envs.types import Problem, Status, Verdict
from rlvr import UserError
from rlvr.algos.advantages import ADVANTAGES, AdvantageInputs
from rlvr.algos.aggregation import AGGREGATIONS, Normalizer
from rlvr.algos.filters import zero_variance_groups
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.losses import PolicyLossInputs, clipped_surrogate
from rlvr.algos.presets import AlgoConfig, Algorithm, resolve_algorithm
from rlvr.algos.ratio import RATIOS
from rlvr.algos.shaping import overlong_buffer_tokens, soft_overlong_penalty, truncation_mask
from rlvr.config import help_field
from rlvr.models.loading import load_model
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.hf import HFGenerateEngine
from rlvr.runs import RunDir
from rlvr.train.batch import TokenBatch, build_token_batch, scatter_completion_values, token_logprobs
from rlvr.train.checkpoint import list_checkpoints, load_trainer_state, prune_checkpoints, save_checkpoint
from rlvr.train.common import ModelConfig, OptimConfig, TaskConfig, make_optimizer, seed_everything, set_threads
from rlvr.train.prm import ImplicitPRM
from rlvr.train.sampling import GroupSampler, SamplingReport


PRM_DIR = "prm"  # the implicit PRM inside a checkpoint


class TrainingError(RuntimeError):
    """Training cannot continue; the run directory holds everything written so far."""


@dataclass
class VerifyConfig:
    """Reward computation."""

    workers: int = help_field(1, "Verifier workers (0 = inline in the training thread)")
    kind: Literal["inline", "thread", "process"] = help_field("thread", "thread for fast verifiers, process for slow or unsafe ones")
    timeout_s: float = help_field(30.0, "Per-completion verification budget; over it the verdict is 'timeout'")
    on_failure: Literal["drop", "zero"] = help_field("drop", "Verdicts with status error/timeout: drop the sample from the update, or score it 0")
    max_failed_steps: int = help_field(3, "Stop (after saving) when every verdict of this many consecutive steps failed")


@dataclass
class UpdateConfig:
    """How each rollout batch is turned into optimizer steps."""

    steps: int = help_field(100, "Training steps (rollout batches)")
    epochs_per_batch: int = help_field(1, "Passes over each rollout batch (PPO epochs, mu)")
    minibatches: int = help_field(1, "Optimizer steps per pass (the batch is split into this many minibatches)")
    micro_batch_size: int = help_field(64, "Sequences per forward/backward (gradient accumulation inside a minibatch)")
    max_len_norm: int | None = help_field(None, "Constant length for seq_mean_token_sum_norm (default: rollout.max_new_tokens)")


@dataclass
class EvalConfig:
    """Periodic evaluation on a held-out split during training."""

    every: int = help_field(0, "Evaluate every this many steps (0 = never during training)")
    split: str = help_field("validation", "Split to evaluate (never the training split)")
    limit: int | None = help_field(None, "Evaluate the first this many problems (None = all)")
    at_start: bool = help_field(False, "Also evaluate before the first step")


@dataclass
class LogConfig:
    samples_per_step: int = help_field(4, "Completions (with verdicts) written to samples.jsonl each step")
    tensorboard: bool = help_field(True, "Write TensorBoard events to tb/")
    plot: bool = help_field(True, "Write curves.png at the end (and at each checkpoint)")
    checkpoint_every: int = help_field(0, "Save a checkpoint every this many steps (0 = only at the end)")
    keep_checkpoints: int = help_field(2, "Checkpoints kept (older ones are deleted)")
    progress: bool = help_field(True, "Show a progress bar")


@dataclass
class TrainConfig:
    """An RL training run (`rlvr train CONFIG key=value ...`)."""

    name: str = help_field("run", "Run name: the run directory is output_dir/name")
    output_dir: str = help_field("runs", "Parent folder of run directories")
    seed: int = help_field(0, "Seed for sampling, shuffling and initialisation")
    threads: int = help_field(0, "Torch CPU threads per process (0 = OMP_NUM_THREADS or torch's default)")
    resume: bool = help_field(False, "Continue from the latest checkpoint in the run directory")
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


@dataclass
class Rollouts:
    """One step's generated and verified groups (B = prompts x group size sequences)."""

    problems: list[Problem]
    completions: list[Completion]
    verdicts: list[Verdict]
    group_ids: torch.Tensor  # [B] long
    rewards: torch.Tensor  # [B] float
    passed: torch.Tensor  # [B] bool: the verifier's outcome label
    valid: torch.Tensor  # [B] bool: verdict usable for the update
    truncated: torch.Tensor  # [B] bool: generation hit rollout.max_new_tokens
    batch: TokenBatch
    rollout_logp: torch.Tensor  # [B, L-1] the engine's log-probs of the sampled tokens
    step_rewards: torch.Tensor  # [B, L-1] process rewards at the last token of each step
    step_mask: torch.Tensor  # [B, L-1] bool


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_model: Path | None
    status: str


class RLTrainer:
    """Runs a `TrainConfig`. `run()` trains, checkpoints and returns a `TrainResult`."""

    def __init__(self, cfg: TrainConfig):
        from accelerate import Accelerator

        self.cfg = cfg
        self.algo: Algorithm = resolve_algorithm(cfg.algo)
        set_threads(cfg.threads)
        self.accel = Accelerator(cpu=not torch.cuda.is_available())
        seed_everything(cfg.seed + self.accel.process_index)
        self.task = cfg.task.make()
        if cfg.task.split in self.task.heldout_splits:
            raise UserError(f"task.split {cfg.task.split!r} is a held-out split of {self.task.id}; train on a training split")
        if cfg.eval.every and cfg.eval.split == cfg.task.split:
            raise UserError(f"eval.split equals task.split ({cfg.task.split!r}): evaluation must use held-out data")
        self.run = RunDir(cfg.run_dir, tensorboard=cfg.log.tensorboard, enabled=self.accel.is_main_process)
        self.checkpoint_dir = cfg.run_dir / "checkpoints"
        self.stop_requested = False

    # -- setup --------------------------------------------------------------------------------

    def _setup(self) -> int:
        cfg = self.cfg
        resume_from = list_checkpoints(self.checkpoint_dir)[-1][1] if cfg.resume and list_checkpoints(self.checkpoint_dir) else None
        if cfg.resume and resume_from is None:
            self._print(f"resume requested but {self.checkpoint_dir} has no checkpoint: starting from scratch")
        model, self.tokenizer = load_model(str(resume_from or cfg.model.name_or_path), cfg.model.dtype, cfg.model.trust_remote_code)
        if self.algo.needs_reference:
            ref, _ = load_model(cfg.model.name_or_path, cfg.model.dtype, cfg.model.trust_remote_code) if resume_from else (copy.deepcopy(model), None)
            self.ref_model = ref.eval().requires_grad_(False).to(self.accel.device)
        else:
            self.ref_model = None  # no reference model loaded at all when KL is off
        total_opt_steps = cfg.update.steps * cfg.update.epochs_per_batch * cfg.update.minibatches
        optimizer, scheduler = make_optimizer(model, cfg.optim, total_opt_steps)
        self.model, self.optimizer, self.scheduler = self.accel.prepare(model, optimizer, scheduler)
        self.prm = self._make_prm(resume_from) if self.algo.implicit_prm else None
        self.engine = HFGenerateEngine(self.accel.unwrap_model(self.model), self.tokenizer, cfg.rollout.max_batch_sequences)
        self.pool = VerifierPool(self.task.env, workers=cfg.verify.workers, kind=cfg.verify.kind, timeout_s=cfg.verify.timeout_s)
        self.sampling = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k, cfg.rollout.max_new_tokens)
        self.sampler = GroupSampler(
            generate=lambda problems: self.engine.generate([self.task.env.format_prompt(p) for p in problems], cfg.rollout.group_size, self.sampling),
            submit=lambda problems, completions: self.pool.submit(problems, [c.text for c in completions]),
            group_size=cfg.rollout.group_size, chunk_prompts=cfg.rollout.chunk_prompts,
            group_filter=self.algo.group_filter, budget_factor=self.algo.sampling_budget,
            on_failure_valid=cfg.verify.on_failure == "zero", rank=self.accel.process_index, world=self.accel.num_processes,
            gather_counts=self._gather_counts)
        start_step, self.position = 0, 0
        if resume_from is not None:
            state = load_trainer_state(resume_from, self.optimizer, self.scheduler)
            start_step, self.position = state["step"], state["position"]
            self.run.truncate_after(start_step)
            self.sampler.yield_estimate = state.get("yield_estimate", 1.0)
            self._print(f"resumed from {resume_from} (step {start_step}, data position {self.position})")
        self.stream = self.task.stream(cfg.task.split, start=self.position, seed=cfg.seed)
        self.run.write_config(cfg)
        return start_step

    def _make_prm(self, resume_from: Path | None) -> ImplicitPRM:
        """PRIME's implicit PRM and its frozen reference, both from ``algo.prm_init`` (default: the
        policy's starting weights, whose frozen copy is then shared with the policy's reference)."""
        cfg, algo = self.cfg, self.algo
        init = algo.prm_init or cfg.model.name_or_path
        saved = resume_from / PRM_DIR if resume_from is not None and (resume_from / PRM_DIR).exists() else None
        model, _ = load_model(str(saved or init), cfg.model.dtype, cfg.model.trust_remote_code)
        if init == cfg.model.name_or_path and self.ref_model is not None:
            ref = self.ref_model
        else:
            ref, _ = load_model(init, cfg.model.dtype, cfg.model.trust_remote_code)
            ref = ref.eval().requires_grad_(False).to(self.accel.device)
        # PRIME trains the PRM at a constant rate (1e-6 beside the policy's 5e-7)
        prm_optim = dataclasses.replace(cfg.optim, lr=cfg.optim.lr * algo.prm_lr_scale, schedule="constant", warmup_steps=0)
        optimizer, _ = make_optimizer(model, prm_optim, cfg.update.steps)
        model, optimizer = self.accel.prepare(model, optimizer)
        prm = ImplicitPRM(model, ref, optimizer, self.accel, beta=algo.prm_beta, update=algo.prm_update,
                          micro_batch_size=cfg.update.micro_batch_size, max_grad_norm=cfg.optim.max_grad_norm,
                          reduce_sum=self._reduce_sum)
        self.prm_shares_reference = ref is self.ref_model
        if saved is not None:
            prm.load_optimizer(saved)
            self._print(f"implicit PRM restored from {saved}")
        return prm

    def _reduce_sum(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over processes (itself on one process)."""
        if self.accel.num_processes == 1:
            return x
        return self.accel.reduce(x.to(self.accel.device), reduction="sum").cpu()

    def _gather_counts(self, n: int) -> list[int]:
        """Every process's ``n``, by rank."""
        if self.accel.num_processes == 1:
            return [n]
        return [int(v) for v in self.accel.gather(torch.tensor([n], device=self.accel.device)).cpu()]

    # -- the loop -----------------------------------------------------------------------------

    def train(self) -> TrainResult:
        cfg = self.cfg
        step = self._setup()
        status, failed_steps = "running", 0
        self.run.write_state(status=status, step=step, algorithm=self.algo.__dict__)
        restore = self._install_signal_handlers()
        bar = tqdm(total=cfg.update.steps, initial=step, desc=f"train {cfg.name}", unit="step",
                   disable=not (cfg.log.progress and self.accel.is_main_process), dynamic_ncols=True)
        try:
            if cfg.eval.at_start and step == 0:
                self.run.log_metrics(0, self._evaluate())
            while step < cfg.update.steps and not self.stop_requested:
                t0 = time.perf_counter()
                report, rollouts, metrics = self.collect()
                generated = [v for g in report.generated for v in g.verdicts]
                # one decision for all processes: every one must take the same branch (collectives follow)
                n_generated, n_failed, n_valid = self._reduce_sum(torch.tensor([
                    float(len(generated)), float(sum(v.status.is_failure for v in generated)),
                    float(rollouts.valid.sum()) if rollouts is not None else 0.0])).tolist()
                if n_generated and n_failed == n_generated:
                    failed_steps += 1
                    metrics["train/skipped"] = 1.0
                    if failed_steps >= cfg.verify.max_failed_steps:
                        first = next((v.info.get("error") for v in generated if v.status is Status.ERROR), "timeouts")
                        raise TrainingError(f"every verification failed for {failed_steps} consecutive steps (e.g. {first}); fix the environment and resume with resume=true")
                elif n_valid == 0:
                    # dynamic sampling spent its budget without keeping a group: nothing to learn from
                    failed_steps = 0
                    metrics["train/skipped"] = 1.0
                else:
                    failed_steps = 0
                    metrics |= self.update(rollouts)
                step += 1
                metrics["time/step"] = time.perf_counter() - t0
                metrics["throughput/tokens_per_s"] = metrics.get("rollout/tokens", 0.0) / metrics["time/step"]
                if cfg.eval.every and step % cfg.eval.every == 0:
                    metrics |= self._evaluate()
                self.run.log_metrics(step, metrics)
                self.run.log_samples(step, self._sample_rows(report))
                bar.set_postfix(reward=f"{metrics.get('reward/mean', float('nan')):.3f}", acc=f"{metrics.get('reward/accuracy', float('nan')):.3f}")
                bar.update(1)
                if cfg.log.checkpoint_every and step % cfg.log.checkpoint_every == 0 and step < cfg.update.steps:
                    self._checkpoint(step)
            status = "completed" if step >= cfg.update.steps else "interrupted"
            self._checkpoint(step)
            final = self._save_final() if status == "completed" else None
            return TrainResult(cfg.run_dir, step, final, status)
        except BaseException as e:
            status = f"failed: {type(e).__name__}: {e}"
            if step > 0:
                try:  # keep what was learned; the run can resume from here
                    self._checkpoint(step)
                except Exception as save_error:
                    self._print(f"could not save a checkpoint after the failure: {save_error}")
            raise
        finally:
            bar.close()
            restore()
            self.pool.close()
            self.run.write_state(status=status, step=step, algorithm=self.algo.__dict__)
            if cfg.log.plot:
                self.run.plot(title=f"{cfg.name}: {self.algo.preset} on {self.task.id}")
            self.run.close()

    # -- rollouts -----------------------------------------------------------------------------

    def _take_prompts(self, n: int) -> list[Problem]:
        """This process's share of the next ``n x processes`` prompts (every process reads the same stream)."""
        world, rank = self.accel.num_processes, self.accel.process_index
        batch = [next(self.stream) for _ in range(n * world)]
        self.position += n * world
        return batch[rank * n: (rank + 1) * n]

    def collect(self) -> tuple[SamplingReport, Rollouts | None, dict[str, float]]:
        """Generate and verify groups until the training batch is full (see `GroupSampler`); return
        the sampling report, the kept groups as tensors (None when none was kept) and metrics.

        Rewards, accuracy and lengths are logged over every generated group (what the policy does);
        the ``batch/`` and ``sampling/`` metrics describe what the step trains on and what it cost."""
        cfg, G = self.cfg, self.cfg.rollout.group_size
        report = self.sampler.collect(self._take_prompts, cfg.rollout.prompts_per_step)
        metrics = _generation_metrics(report, G) | {"data/position": float(self.position)}
        groups = report.kept
        if not groups:
            if self.accel.num_processes == 1 or not report.generated:
                return report, None, metrics
            # another process kept groups: this one joins the update with one group of weight 0
            groups = report.generated[:1]

        problems = [g.problem for g in groups]
        completions = [c for g in groups for c in g.completions]
        verdicts = [v for g in groups for v in g.verdicts]
        failed = torch.tensor([v.status.is_failure for v in verdicts])
        rewards = torch.tensor([v.reward for v in verdicts], dtype=torch.float32)
        passed = torch.tensor([v.passed for v in verdicts])
        valid = ~failed if cfg.verify.on_failure == "drop" else torch.ones_like(failed)
        if not report.kept:
            valid = torch.zeros_like(valid)
        group_ids = torch.arange(len(problems)).repeat_interleave(G)
        batch = build_token_batch([c.prompt_ids for c in completions], [c.token_ids for c in completions], self.tokenizer.pad_token_id)
        rollout_logp = scatter_completion_values([c.logprobs for c in completions], batch)
        step_rewards, step_mask = place_step_rewards(completions, verdicts, batch.completion_mask.shape[1])
        truncated = torch.tensor([c.truncated for c in completions])
        rollouts = Rollouts([p for p in problems for _ in range(G)], completions, verdicts, group_ids, rewards, passed, valid,
                            truncated, batch, rollout_logp, step_rewards, step_mask)
        metrics |= {
            "batch/groups": float(len(problems)),
            "batch/reward_mean": float(rewards.mean()),
            "batch/zero_variance_frac": _zero_variance_frac(rewards, G),
            "verify/dropped": float((~valid).sum()),
        }
        return report, rollouts, metrics

    # -- policy update ------------------------------------------------------------------------

    def _logp(self, model: torch.nn.Module, batch: TokenBatch, entropy: bool = False, entropy_grad: bool = False):
        return token_logprobs(model, batch.to(self.accel.device), self.cfg.rollout.temperature, entropy=entropy, entropy_grad=entropy_grad)

    @torch.no_grad()
    def _frozen_logp(self, model: torch.nn.Module, r: Rollouts, idx: torch.Tensor) -> torch.Tensor:
        """Log-probs ``[B, L-1]`` of all sequences under a model that is not being trained now."""
        out = torch.zeros_like(r.batch.completion_mask)
        for micro in self._micro_batches(r, idx):
            sub = r.batch.select(micro)
            logp, _ = self._logp(model, sub)
            out[micro, : logp.shape[1]] = logp.float().cpu()
        return out

    def update(self, r: Rollouts) -> dict[str, float]:
        cfg, algo, accel = self.cfg, self.algo, self.accel
        t0 = time.perf_counter()
        idx = torch.nonzero(r.valid).squeeze(1)
        mask = r.batch.completion_mask * r.valid.float().unsqueeze(1)
        metrics: dict[str, float] = {}

        ref_logp = self._frozen_logp(self.ref_model, r, idx) if self.ref_model is not None else None
        rewards = r.rewards.clone()
        buffer = overlong_buffer_tokens(cfg.rollout.max_new_tokens, algo.overlong_buffer_frac)
        if buffer > 0:  # DAPO's soft overlong penalty, on the reward the advantages see
            lengths = torch.tensor([len(c.token_ids) for c in r.completions])
            penalty = soft_overlong_penalty(lengths, cfg.rollout.max_new_tokens, buffer, algo.overlong_penalty)
            rewards = rewards + penalty
            metrics["reward/overlong_penalty"] = float(penalty[r.valid].mean()) if r.valid.any() else 0.0
        kl_penalty = None
        if ref_logp is not None and algo.kl_active and algo.kl_mode == "reward":  # beta * KL_t per token, taken from the reward
            kl_penalty = algo.kl_coef * KL_ESTIMATORS.get(algo.kl_estimator)(r.rollout_logp, ref_logp) * mask
        token_rewards = None
        if self.prm is not None:
            # the PRM reads log-probs at temperature 1; reuse the reference's when they are the same numbers
            shared = ref_logp if self.prm_shares_reference and cfg.rollout.temperature in (0, 1) else None
            token_rewards, prm_metrics = self.prm.process_rewards(r.batch, idx, mask, r.passed.float(), shared)
            metrics |= prm_metrics
        advantages = ADVANTAGES.get(algo.advantage)(
            AdvantageInputs(rewards=rewards, group_ids=r.group_ids, mask=mask, valid=r.valid,
                            step_rewards=r.step_rewards, step_mask=r.step_mask, kl_penalty=kl_penalty,
                            token_rewards=token_rewards, reduce_sum=self._reduce_sum), **algo.advantage_kwargs)
        if algo.mask_truncated:  # truncated completions shape their groups' baselines but get no gradient
            mask = truncation_mask(r.truncated, mask)
            metrics["batch/masked_truncated"] = float((r.truncated & r.valid).sum())
            idx = torch.nonzero(mask.sum(-1) > 0).squeeze(1)

        # On-policy with a single optimizer step per batch: pi_old == pi_theta, no extra forward.
        reuse = cfg.update.epochs_per_batch == 1 and cfg.update.minibatches == 1
        old_logp = None if reuse else self._frozen_logp(accel.unwrap_model(self.model), r, idx)
        if old_logp is not None:
            metrics["rollout/logprob_gap"] = _masked_mean((old_logp - r.rollout_logp).abs(), mask)

        aggregate = AGGREGATIONS.get(algo.loss_agg)
        ratio_fn = RATIOS.get(algo.ratio)
        kl_fn = KL_ESTIMATORS.get(algo.kl_estimator)
        token_stats: dict[str, list[tuple[float, float]]] = {}  # name -> [(value, tokens)]
        ratio_min, ratio_max = float("inf"), float("-inf")
        mb_losses, mb_policy_losses, grad_norms = [], [], []

        self.model.train()
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.position)
        for epoch in range(cfg.update.epochs_per_batch):
            order = idx[torch.randperm(len(idx), generator=gen)]
            for mb in order.tensor_split(cfg.update.minibatches):
                weight = 1.0
                if len(mb) == 0:
                    if accel.num_processes == 1:
                        continue
                    # other processes train on this minibatch: join the gradient sync with a row of weight 0
                    mb, weight = torch.zeros(1, dtype=torch.long), 0.0
                norm = self._normalizer(mask[mb] * weight)
                micros = self._micro_batches(r, mb)
                mb_loss = mb_policy = 0.0
                for i, micro in enumerate(micros):
                    sub = r.batch.select(micro)
                    width = sub.completion_mask.shape[1]
                    m = mask[micro, :width].to(accel.device) * weight
                    ntok = float(m.sum())
                    sync = accel.no_sync(self.model) if i < len(micros) - 1 and accel.num_processes > 1 else nullcontext()
                    with sync:
                        logp, ent = self._logp(self.model, sub, entropy=True, entropy_grad=algo.entropy_coef != 0)
                        old = logp.detach() if old_logp is None else old_logp[micro, :width].to(accel.device)
                        if old_logp is None and epoch == 0:  # the trainer's log-probs beside the engine's, same weights
                            gap = (logp.detach().cpu() - r.rollout_logp[micro, :width]).abs()
                            token_stats.setdefault("rollout/logprob_gap", []).append((_masked_mean(gap, m.cpu()), ntok))
                        inp = PolicyLossInputs(logp, old, advantages[micro, :width].to(accel.device), m)
                        loss_tok, stats = clipped_surrogate(ratio_fn(logp, old, m), inp, algo.clip_low, algo.clip_high, algo.dual_clip)
                        total = loss_tok
                        if ref_logp is not None:
                            kl_tok = kl_fn(logp, ref_logp[micro, :width].to(accel.device))
                            token_stats.setdefault("policy/kl", []).append((_masked_mean(kl_tok, m), ntok))
                            if algo.kl_mode == "loss":
                                total = total + algo.kl_coef * kl_tok
                        if algo.entropy_coef:
                            total = total - algo.entropy_coef * ent
                        loss = aggregate(total, m, norm)
                        # DDP averages gradients over processes; the normaliser already covers all of them
                        accel.backward(loss * accel.num_processes)
                    mb_loss += float(loss.detach())
                    mb_policy += float(aggregate(loss_tok.detach(), m, norm))
                    token_stats.setdefault("policy/entropy", []).append((_masked_mean(ent, m), ntok))
                    for k, v in stats.items():
                        if k == "ratio_min":
                            ratio_min = min(ratio_min, v)
                        elif k == "ratio_max":
                            ratio_max = max(ratio_max, v)
                        else:
                            token_stats.setdefault(f"policy/{k}", []).append((v, ntok))
                if cfg.optim.max_grad_norm > 0:
                    grad_norms.append(float(accel.clip_grad_norm_(self.model.parameters(), cfg.optim.max_grad_norm)))
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                mb_losses.append(mb_loss)
                mb_policy_losses.append(mb_policy)
        for k, pairs in token_stats.items():
            metrics[k] = sum(v * w for v, w in pairs) / max(sum(w for _, w in pairs), 1.0)
        if math.isfinite(ratio_min):
            metrics["policy/ratio_min"], metrics["policy/ratio_max"] = ratio_min, ratio_max
        metrics["policy/clip_frac"] = metrics.get("policy/clip_frac_low", 0.0) + metrics.get("policy/clip_frac_high", 0.0)
        metrics["loss/total"] = _mean(mb_losses)
        metrics["loss/policy"] = _mean(mb_policy_losses)
        if grad_norms:
            metrics["optim/grad_norm"] = _mean(grad_norms)
        metrics["optim/lr"] = self.scheduler.get_last_lr()[0]
        metrics["advantage/abs_mean"] = float((advantages.abs() * mask).sum() / mask.sum().clamp(min=1))
        metrics["time/train"] = time.perf_counter() - t0
        return metrics

    def _micro_batches(self, r: Rollouts, idx: torch.Tensor) -> list[torch.Tensor]:
        """``idx`` split into micro-batches of similar lengths (less padding). The gradient does not
        depend on the split: every loss is normalised by whole-minibatch totals."""
        lengths = r.batch.attention_mask[idx].sum(-1)
        return list(idx[torch.argsort(lengths, stable=True)].split(self.cfg.update.micro_batch_size))

    def _normalizer(self, mask: torch.Tensor) -> Normalizer:
        """Totals of one optimizer minibatch, summed over processes."""
        totals = torch.tensor([float((mask.sum(-1) > 0).sum()), float(mask.sum())], device=self.accel.device)
        if self.accel.num_processes > 1:
            totals = self.accel.reduce(totals, reduction="sum")
        max_len = self.cfg.update.max_len_norm or self.cfg.rollout.max_new_tokens
        return Normalizer(sequences=float(totals[0]), tokens=float(totals[1]), max_len=float(max_len))

    # -- evaluation, checkpoints, logging -----------------------------------------------------

    def _evaluate(self) -> dict[str, float]:
        from rlvr.eval.runner import EvalSettings, evaluate

        cfg = self.cfg
        settings = EvalSettings(split=cfg.eval.split, greedy=True, n=0, max_new_tokens=cfg.rollout.max_new_tokens,
                                limit=cfg.eval.limit, chunk_prompts=max(cfg.rollout.max_batch_sequences, 1))
        report = evaluate(self.engine, self.task, settings, progress=False)
        return {"eval/accuracy": report["greedy"]["accuracy"], "eval/no_answer_rate": report["greedy"]["no_answer_rate"]}

    def _checkpoint(self, step: int) -> None:
        self.accel.wait_for_everyone()
        if self.accel.is_main_process:
            extra = {PRM_DIR: self._save_prm} if self.prm is not None else {}
            save_checkpoint(self.checkpoint_dir / f"step-{step}", self.accel.unwrap_model(self.model), self.tokenizer,
                            self.optimizer, self.scheduler,
                            {"step": step, "position": self.position, "yield_estimate": self.sampler.yield_estimate}, extra)
            prune_checkpoints(self.checkpoint_dir, self.cfg.log.keep_checkpoints)
            if self.cfg.log.plot:
                self.run.plot(title=f"{self.cfg.name}: {self.algo.preset} on {self.task.id}")

    def _save_prm(self, directory: Path) -> None:
        """The implicit PRM as a loadable Hugging Face model directory (with the tokenizer) plus its optimizer."""
        self.prm.save(directory)
        self.tokenizer.save_pretrained(directory)

    def _save_final(self) -> Path:
        final = self.cfg.run_dir / "final"
        if self.accel.is_main_process:
            self.accel.unwrap_model(self.model).save_pretrained(final)
            self.tokenizer.save_pretrained(final)
        return final

    def _sample_rows(self, report: SamplingReport) -> list[dict[str, Any]]:
        """The first ``log.samples_per_step`` generated completions, marked with whether their group was kept."""
        kept = {id(g) for g in report.kept}
        rows = ({"problem": g.problem.id, "prompt": g.problem.prompt, "completion": c.text, "reference": g.problem.reference,
                 "kept": id(g) in kept, **_verdict_row(v)}
                for g in report.generated for c, v in zip(g.completions, g.verdicts))
        return list(itertools.islice(rows, self.cfg.log.samples_per_step))

    def _install_signal_handlers(self):
        """SIGINT/SIGTERM finish the current step, checkpoint and stop (a second signal aborts)."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum, frame):
            if self.stop_requested:
                raise KeyboardInterrupt
            self.stop_requested = True
            self._print(f"\n{signal.Signals(signum).name}: stopping after this step and saving a checkpoint (again to abort)")

        for s in previous:
            signal.signal(s, handler)
        return lambda: [signal.signal(s, h) for s, h in previous.items()]

    def _print(self, msg: str) -> None:
        if self.accel.is_main_process:
            tqdm.write(msg)


def place_step_rewards(completions: list[Completion], verdicts: list[Verdict], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Process rewards in target space ``[B, width]``: each step's reward at the token where its
    character span ends (see `TokenBatch` for the target-space convention)."""
    rewards = torch.zeros(len(completions), width)
    mask = torch.zeros(len(completions), width, dtype=torch.bool)
    for b, (c, v) in enumerate(zip(completions, verdicts)):
        if not v.steps or not c.char_ends:
            continue
        offset = len(c.prompt_ids) - 1  # target index of the first completion token
        for step in v.steps:
            k = bisect.bisect_left(c.char_ends, step.end)
            if k < len(c.char_ends):
                rewards[b, offset + k] = step.reward
                mask[b, offset + k] = True
    return rewards, mask


def _generation_metrics(report: SamplingReport, group_size: int) -> dict[str, float]:
    """What the policy generated this step (every group, kept or not) and what sampling cost."""
    verdicts = [v for g in report.generated for v in g.verdicts]
    completions = [c for g in report.generated for c in g.completions]
    if not verdicts:
        return {"sampling/prompts": 0.0, "sampling/budget_exhausted": float(report.budget_exhausted)}
    rewards = torch.tensor([v.reward for v in verdicts], dtype=torch.float32)
    passed = torch.tensor([v.passed for v in verdicts], dtype=torch.float32)
    lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)
    return {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "reward/accuracy": float(passed.mean()),
        "groups/zero_variance_frac": _zero_variance_frac(rewards, group_size),
        "groups/all_correct_frac": float(passed.view(-1, group_size).all(1).float().mean()),
        "rollout/response_len": float(lengths.mean()),
        "rollout/truncated_frac": float(sum(c.truncated for c in completions) / len(completions)),
        "rollout/tokens": float(lengths.sum() + sum(len(c.prompt_ids) for c in completions)),
        "verify/no_answer_frac": sum(v.status is Status.NO_ANSWER for v in verdicts) / len(verdicts),
        "verify/errors": float(sum(v.status is Status.ERROR for v in verdicts)),
        "verify/timeouts": float(sum(v.status is Status.TIMEOUT for v in verdicts)),
        "sampling/prompts": float(report.prompts_generated),
        "sampling/extra_prompts": float(max(0, report.prompts_generated - report.target)),  # the cost of refilling
        "sampling/kept_groups": float(len(report.kept)),
        "sampling/yield": report.yield_,
        "sampling/rounds": float(report.rounds),
        "sampling/budget_prompts": float(report.budget_prompts),
        "sampling/budget_exhausted": float(report.budget_exhausted),
        "time/generate": report.generate_s,
        "time/verify_wait": report.verify_wait_s,
    }


def _zero_variance_frac(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups (consecutive runs of ``group_size`` in ``rewards`` ``[B]``) whose rewards are all equal."""
    grouped = rewards.view(-1, group_size)
    return float(zero_variance_groups(grouped, torch.ones_like(grouped, dtype=torch.bool)).float().mean())


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x.detach() * mask).sum() / mask.sum().clamp(min=1))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _verdict_row(v: Verdict) -> dict[str, Any]:
    return {"reward": v.reward, "passed": v.passed, "status": v.status.value, "extracted": v.extracted,
            **({"error": v.info["error"]} if "error" in v.info else {})}


def train(cfg: TrainConfig) -> TrainResult:
    """Run an RL training run end to end."""
    return RLTrainer(cfg).train()


__all__ = ["RLTrainer", "TrainConfig", "TrainResult", "TrainingError", "train"]
