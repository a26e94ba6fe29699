"""Config sections shared by every training recipe, and the RL run config.

`RunConfig` is the header every run has (name, folder, seed, threads, resume/overwrite, model,
task, optimizer, logging); a recipe's config extends it with what only that recipe reads
(`rlvr.train.sft.SFTConfig`, `TrainConfig` below for the policy-gradient recipe, extended with the
offline pairs by `rlvr.train.preference.PreferenceTrainConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlvr.algos.config import AlgoConfig
from rlvr.config import help_field
from rlvr.eval.settings import MAX_THREADS, MAX_VERIFY_WORKERS
from rlvr.models.lora_settings import LoraSettings
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.prompts import PromptConfig
from rlvr.train.budget import BudgetConfig


@dataclass
class ModelConfig:
    """The policy to train."""

    name_or_path: str = help_field("tiny", "A model directory, a .gguf file, a built-in name (`rlvr models list`: smollm2-135m-instruct) or a Hugging Face id; 'tiny' builds the embedded model from `tiny` (SFT only)")
    dtype: Literal["float32", "bfloat16", "float16"] = help_field("float32", "Parameter dtype")
    precision: Literal["fp32", "bf16"] = help_field("fp32", "Compute precision of training: bf16 runs the forwards and backward under bf16 autocast "
                                                    "with float32 weights and optimizer (accelerate's mixed precision; rlvr's decoding loop stays "
                                                    "float32); measured faster on a CPU with AVX512-BF16 (`lscpu | grep bf16`); CPUs without bf16 instructions emulate it")
    attn_implementation: str = help_field("auto", "Attention kernel (transformers' attn_implementation: sdpa, eager, flash_attention_2, ...); "
                                          "auto: eager under bf16 on a CPU (sdpa's CPU backward is slower in bf16), else transformers' default")
    trust_remote_code: bool = help_field(False, "Allow model code from the hub (only for models you trust)")
    lora: LoraSettings = field(default_factory=LoraSettings)


@dataclass
class TaskConfig:
    """The task to train on."""

    id: str = help_field("arithmetic-v1", "Registered task id (see `rlvr tasks list`), or file:PATH for your own rows (a JSONL/CSV/Parquet file or folder; task.config maps its columns)")
    config: dict[str, Any] = help_field({}, "Task configuration overriding its defaults (belongs to task.id: dropped when an override changes the task)",
                                        belongs_to="id")
    split: str = help_field("train", "Split to train on (held-out splits are refused)")
    env: str | None = help_field(None, "Environment id replacing the task's own verifier (None = the task's)")
    env_kwargs: dict[str, Any] = help_field({}, "Settings of the environment: of task.env when set (belongs to it), else merged over the task's own, e.g. {extraction: lenient}", belongs_to="env")
    leakage: Literal["warn", "refuse", "off"] = help_field("warn", "Before training, compare the training split's questions with the task's held-out splits "
                                                           "(a prefix of an unbounded stream: what the run can draw): warn on a shared question, refuse "
                                                           "to train (refuse), or skip the check (off)")
    heldout: list[str] = help_field([], "Other tasks held out for evaluation, as ID or ID:SPLIT (default split: test; a hub's or file's id, which holds a colon, as file:rows.jsonl or file:rows.jsonl:SPLIT); training refuses a split that may share problems with any (e.g. hendrycks-math-v1:test with math500-v1)")

    def make(self):
        """The configured task, with its environment changed by ``env``/``env_kwargs`` (`Task.set_env`); refuses a
        training split that may share problems with a held-out one (`tasks.assert_disjoint`)."""
        import tasks

        task = tasks.make(self.id, **self.config)
        task.set_env(self.env, self.env_kwargs)  # as rlvr eval's --env/--env-kwargs: a bad setting fails here
        if self.split not in task.splits:
            raise tasks.TaskError(f"task.split={self.split!r}: task {task.id} has no such split (its splits: {', '.join(task.splits)})")
        tasks.assert_disjoint((task, self.split), self.heldout_pairs())
        return task

    def heldout_pairs(self) -> list[tuple[str, str]]:
        """``heldout`` as (task id, split) pairs: ``ID`` (split test) or ``ID:SPLIT``; a hub's or file's id holds a colon of
        its own (``file:rows/qa.jsonl``, ``verifiers:NAME``), so its split, if any, follows one more
        (``file:rows/qa.jsonl:validation``)."""
        from tasks import hubs

        pairs = []
        for entry in self.heldout:
            head, _, tail = entry.rpartition(":")
            if hubs.is_hub_id(entry):
                pairs.append((head, tail) if hubs.is_hub_id(head) else (entry, "test"))
            else:
                pairs.append((entry.split(":", 1)[0], entry.split(":", 1)[1]) if ":" in entry else (entry, "test"))
        return pairs


@dataclass
class OptimConfig:
    """AdamW and the learning-rate schedule."""

    lr: float = help_field(1e-5, "Peak learning rate", gt=0, le=1.0)  # above 1 every step diverges
    weight_decay: float = help_field(0.0, "AdamW weight decay", ge=0)
    betas: list[float] = help_field([0.9, 0.999], "AdamW betas: two numbers in [0, 1)")
    schedule: Literal["cosine", "linear", "constant"] = help_field("cosine", "Decay after warm-up")
    warmup_steps: int = help_field(0, "Optimizer steps of linear warm-up", ge=0)
    max_grad_norm: float = help_field(1.0, "Gradient clipping by global norm (0 = off)", ge=0)

    def __post_init__(self) -> None:
        betas = self.betas
        if not (isinstance(betas, (list, tuple)) and len(betas) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool)
                                                                    and 0 <= b < 1 for b in betas)):
            raise ValueError(f"optim.betas must be two numbers in [0, 1) (AdamW's beta1, beta2), got {betas!r}")


@dataclass
class LogConfig:
    """What the run directory receives, and how often."""

    samples_per_step: int = help_field(4, "Completions (with verdicts) written to samples.jsonl each step", ge=0)
    report_to: list[str] | str = help_field(["tensorboard"], "Experiment trackers that receive every metric, the resolved config, the run's provenance "
                                                       "and the evaluation reports: any of tensorboard (events in tb/), wandb, mlflow, trackio "
                                                       "(`rlvr.trackers`; [] = metrics.jsonl only). Each reads its own settings from its environment "
                                                       "variables (WANDB_MODE, MLFLOW_TRACKING_URI, TRACKIO_DIR, ...); one that cannot start refuses the run "
                                                       "before any model loads")
    project: str = help_field("rlvr", "Project the run is filed under in wandb and trackio, and the mlflow experiment (the run is named by name)")
    tensorboard: bool = help_field(True, "False leaves tensorboard out of report_to (the older spelling, kept for existing configs)")
    plot: bool = help_field(True, "Write curves.png at the end (and at each checkpoint)")
    checkpoint_every: int = help_field(0, "Save a checkpoint every this many steps (0 = only at the end)", ge=0)
    keep_checkpoints: int = help_field(2, "Checkpoints kept (older ones are deleted)", gt=0)
    progress: bool = help_field(True, "Show a progress bar")

    def __post_init__(self) -> None:
        from rlvr.trackers import check_names

        if isinstance(self.report_to, str):  # log.report_to=wandb on a command line: one tracker
            self.report_to = [self.report_to]
        check_names(self.report_to)

    @property
    def trackers(self) -> list[str]:
        """The trackers this run reports to: `report_to`, less tensorboard when `tensorboard` is false."""
        return [name for name in self.report_to if self.tensorboard or name != "tensorboard"]


@dataclass
class EvalConfig:
    """Greedy accuracy on a held-out split during training."""

    every: int = help_field(0, "Evaluate every this many steps (0 = only where a recipe evaluates at the end)", ge=0)
    split: str = help_field("validation", "Split to evaluate (never the training split)")
    limit: int | None = help_field(None, "Evaluate the first this many problems (None = all)", gt=0)
    at_start: bool = help_field(False, "Also evaluate before the first step")
    max_new_tokens: int | None = help_field(None, "Longest completion when evaluating (None = rollout.max_new_tokens, or 128 for SFT)", gt=0,
                                        le=2**20)


@dataclass
class RunConfig:
    """The header of every run: where it lives, how it starts, what it trains, what it may spend."""

    name: str = help_field("run", "Run name: the run directory is output_dir/name")
    recipe: str | None = help_field(None, "Training recipe (`rlvr.train.recipes`): None = the one algo.preset names (policy_gradient, or preference for dpo/online_dpo/kto); sft for supervised warm-up")
    output_dir: str = help_field("runs", "Parent folder of run directories")
    seed: int = help_field(0, "Seed for sampling, shuffling and initialisation", ge=0, le=2**32 - 1)
    threads: int = help_field(0, "Torch CPU threads per process (0 = OMP_NUM_THREADS or torch's default)", ge=0, le=MAX_THREADS)
    device: str = help_field("auto", "Where the run's models train and generate: auto (the GPU when torch sees one, else the CPU), cpu, "
                                     "cuda or cuda:N (one process; under accelerate launch/torchrun each process takes its local GPU). "
                                     "Refused before anything is written when it cannot be honoured")
    distributed: Literal["ddp", "fsdp"] = help_field("ddp", "With several processes: replicate trainable models (ddp) or shard them (fsdp: accelerate's FSDP2, also on CPUs under torchrun)")
    resume: bool = help_field(False, "Continue the run in output_dir/name from its latest checkpoint, with the run's own config.yaml (command-line overrides apply on top)")
    overwrite: bool = help_field(False, "Delete an existing run directory output_dir/name and start again (without it, an existing run is refused; a new run "
                                           "never starts in a folder that holds other files or lies inside another run)")
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)

    def __post_init__(self) -> None:
        # the run directory is output_dir/name, and overwrite=true deletes it: a name that is empty, absolute or climbs with
        # '..' would make it output_dir itself, its parent or a folder elsewhere, and deleting that would take other runs
        # with it (folders below output_dir are fine: `quickstart/grpo`)
        parts = self.name.replace("\\", "/").split("/") if isinstance(self.name, str) else []
        if not parts or self.name.startswith(("/", "\\")) or any(p.strip() in ("", ".", "..") for p in parts) or "\0" in self.name:
            raise ValueError(f"name must name a folder below output_dir (the run directory is output_dir/name): not empty, "
                             f"not absolute, no empty, '.' or '..' parts; got {self.name!r}")
        if any(len(p.encode()) > 255 for p in parts):  # a folder name longer than file systems allow
            raise ValueError(f"name: a folder name of at most 255 bytes, got one of {max(len(p.encode()) for p in parts)} ({self.name[:40]!r}...)")

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


@dataclass
class VerifyConfig:
    """Reward computation."""

    workers: int = help_field(1, "Verifier workers (0 = one item at a time in a supervised thread; every kind is bounded by timeout_s)", ge=0, le=MAX_VERIFY_WORKERS)
    kind: Literal["inline", "thread", "process"] = help_field("thread", "thread for fast verifiers, process for slow or unsafe ones")
    timeout_s: float = help_field(30.0, "Per-completion verification budget; over it the verdict is 'timeout'", gt=0, le=86400)
    on_failure: Literal["drop", "zero"] = help_field("drop", "Verdicts with status error/timeout: drop the sample from the update, or score it 0")
    max_failed_steps: int = help_field(3, "Stop when every verdict of this many consecutive steps failed (keeping the checkpoint from before them)", gt=0)
    reward: str = help_field("correctness", "What training is rewarded for: correctness (the verifier's reward), or format "
                                            "(a format-only control: 1 for any well-formed answer, right or wrong; its held-out gain is "
                                            "the part of a real run's gain that format alone explains)")


@dataclass
class UpdateConfig:
    """How each rollout batch is turned into optimizer steps."""

    steps: int = help_field(100, "Training steps (rollout batches); a budget (budget.*) may stop the run earlier", ge=0)
    epochs_per_batch: int | None = help_field(None, "Passes over each rollout batch (PPO's epochs; None = the preset's: 2 for ppo, 1 otherwise)", gt=0)
    minibatches: int | None = help_field(None, "Optimizer steps per pass: the batch is split into this many minibatches (None = the preset's: 2 for ppo, 1 otherwise)", gt=0)
    micro_batch_size: int = help_field(64, "Sequences per forward/backward (gradient accumulation inside a minibatch)", gt=0)
    max_len_norm: int | None = help_field(None, "Constant length for seq_mean_token_sum_norm (default: rollout.max_new_tokens)", gt=0)
    pack: bool = help_field(True, "Policy and reference forwards on shared-prefix packed sequences: each group's prompt once, "
                                  "no padding, same log-probs up to rounding (off for models on flash-attention kernels, automatically)")


@dataclass
class TrainConfig(RunConfig):
    """An RL training run (`rlvr train CONFIG key=value ...`): the preset picks the recipe."""

    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig.from_config)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
