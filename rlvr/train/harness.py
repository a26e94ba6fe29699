"""The training harness: everything a recipe needs that is not its algorithm.

One `Harness` per run owns

- the **run directory** (refusing to write over an existing run unless asked to resume or
  overwrite) and the resolved config;
- **accelerate** (one process, DDP over many GPUs, or ``torchrun`` with gloo on CPUs), threads,
  seeds, and the collectives recipes need (`reduce_sum`, `gather_counts`);
- **model loading** (recording every model's parameters, and every optimizer's state, in
  ``resources.json`` with the peak memory of the process);
- the **one gradient-accumulation routine**, `Harness.optimizer_step`: micro-batches, ``no_sync``,
  the zero-weight row that keeps a process without data in the gradient all-reduce, the
  process-count scaling, clipping, the optimizer and scheduler steps;
- **checkpoints** of every registered component by name (``checkpoints/step-N/NAME/``), the RNG
  of every process and the recipe's own state, and resuming from them (`Harness.source` says
  where a component's weights come from);
- the **loop** (`Harness.run`): progress bar, periodic evaluation, logging, periodic and final
  checkpoints, SIGINT/SIGTERM (finish the step, save, stop), and a checkpoint on failure.

A recipe (`rlvr.train.recipes`) only says what one step does.
"""

from __future__ import annotations

import functools
import math
import resource
import shutil
import signal
import sys
import threading
import time
import weakref
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import MethodType
from typing import Any, Callable, Protocol

import torch
from tqdm import tqdm

from envs import faults
from rlvr import TrainingError, UserError
from rlvr.models.loading import load_model
from rlvr.models.lora import adapters_of, apply_lora, check_mergeable, is_adapter_folder, load_adapters, parameter_counts, save_adapters, save_merged
from rlvr.runs import RunDir
from rlvr.train.checkpoint import (PARTIAL_SUFFIX, STATE_FILE, folder_bytes, free_bytes, is_out_of_space, list_checkpoints, out_of_space_message,
                                   prune_checkpoints, remove_partial_checkpoints)
from rlvr.train.common import make_optimizer, rng_state, seed_everything, set_rng_state, set_threads
from rlvr.train.config import OptimConfig, RunConfig
from rlvr.rollout.verification_tally import VerificationTally

RUN_MARKERS = ("config.yaml", "metrics.jsonl", "checkpoints", "final", "run_state.json")


class CheckpointError(TrainingError):
    """A checkpoint could not be written (its partial folder is removed; earlier ones stay)."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_model: Path | None
    status: str


class Component(Protocol):
    """Anything the harness checkpoints: it writes its state into a folder and reads it back."""

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...


class Objective(Protocol):
    """What `Harness.optimizer_step` minimises over a minibatch of rows.

    ``totals(rows)`` are this process's normalising counts for the rows (e.g. sequences and
    tokens); the harness sums them over processes. ``loss(rows, totals)`` is the loss of one
    micro-batch already divided by those whole-minibatch totals (so the gradient does not depend on
    how the minibatch is split), with statistics and the weight they carry (e.g. its token count).
    """

    def totals(self, rows: torch.Tensor) -> torch.Tensor: ...

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]: ...


@dataclass
class TrainableModel:
    """A model with its optimizer and schedule, prepared by accelerate; a checkpointed component.

    Its weights are saved in Hugging Face format (with the tokenizer when given), so a checkpoint's
    ``policy/`` folder loads with ``from_pretrained``; the optimizer and scheduler beside them.
    ``updates`` counts optimizer steps (a rollout engine with its own weights syncs when it moves).
    """

    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    accel: Any
    max_grad_norm: float
    tokenizer: Any = None
    sharded: bool = False  # FSDP: the weights and optimizer state are split across processes
    updates: int = 0

    OPTIM_FILE = "optimizer.pt"
    SHARDED_OPTIM_DIR = "optimizer_shards"

    @property
    def unwrapped(self) -> torch.nn.Module:
        return self.accel.unwrap_model(self.model)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight in full, on every process (gathers a sharded model: a collective)."""
        from torch.distributed.tensor import DTensor

        state_dict = self.accel.get_state_dict(self.model)
        # on CPUs torch's full state dict can still hold DTensors: gather them here
        full = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in state_dict.items()}
        # gathered copies of tied weights (an LM head sharing the embedding) no longer share storage: keep one name
        seen: dict[int, str] = {}
        for name, param in self.unwrapped.named_parameters(remove_duplicate=False):
            if id(param) in seen and name in full:
                del full[name]
            seen.setdefault(id(param), name)
        return full

    def save(self, directory: Path) -> None:
        lora = adapters_of(self.model) is not None  # LoRA: the adapters, not the frozen base
        state_dict = None if lora else self.full_state_dict()
        if self.sharded:  # every process writes its shard of the optimizer state (torch.distributed.checkpoint)
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            dcp.save({"optimizer": get_optimizer_state_dict(self.model, self.optimizer)}, checkpoint_id=str(directory / self.SHARDED_OPTIM_DIR))
        if self.accel.is_main_process:
            if lora:
                save_adapters(self.unwrapped, directory)
            else:
                self.unwrapped.save_pretrained(directory, state_dict=state_dict)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(directory)
            optimizer = None if self.sharded else self.optimizer.state_dict()
            torch.save({"optimizer": optimizer, "scheduler": self.scheduler.state_dict(), "updates": self.updates}, directory / self.OPTIM_FILE)

    def load(self, directory: Path) -> None:
        """Optimizer, scheduler and update count (the weights were loaded from `Harness.source`)."""
        state = torch.load(directory / self.OPTIM_FILE, weights_only=False)
        if self.sharded:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

            if not (directory / self.SHARDED_OPTIM_DIR).is_dir():
                raise UserError(f"{directory} was saved without sharding (distributed=ddp); resume it with distributed=ddp")
            sharded = {"optimizer": get_optimizer_state_dict(self.model, self.optimizer)}  # the layout to read into
            dcp.load(sharded, checkpoint_id=str(directory / self.SHARDED_OPTIM_DIR))
            set_optimizer_state_dict(self.model, self.optimizer, sharded["optimizer"])
        elif state["optimizer"] is None:
            raise UserError(f"{directory} was saved sharded (distributed=fsdp); resume it with distributed=fsdp and as many processes")
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.updates = state.get("updates", 0)

    def optimizer_state_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for s in self.optimizer.state.values() for t in s.values() if torch.is_tensor(t))


@dataclass
class FrozenModel:
    """A model that is not trained but whose weights may change (a reference refreshed from the
    policy); checkpointed so a resumed run reads against the same weights."""

    name: str
    model: torch.nn.Module
    accel: Any

    def save(self, directory: Path) -> None:
        if self.accel.is_main_process:
            self.model.save_pretrained(directory)

    def load(self, directory: Path) -> None:
        """Nothing: the weights were loaded from `Harness.source`."""


class StatsAccumulator:
    """Weighted means of micro-batch statistics; keys ending in ``_min``/``_max`` keep the extreme,
    keys ending in ``_sum`` add up (a micro-batch's share of a whole-batch loss)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.extremes: dict[str, float] = {}

    def add(self, stats: dict[str, float], weight: float) -> None:
        for k, v in stats.items():
            if k.endswith("_min"):
                self.extremes[k] = min(self.extremes.get(k, math.inf), v)
            elif k.endswith("_max"):
                self.extremes[k] = max(self.extremes.get(k, -math.inf), v)
            elif k.endswith("_sum"):
                self.extremes[k] = self.extremes.get(k, 0.0) + v
            else:
                self.sums[k] = self.sums.get(k, 0.0) + v * weight
                self.weights[k] = self.weights.get(k, 0.0) + weight

    def result(self) -> dict[str, float]:
        out = {k: s / self.weights[k] if self.weights[k] else 0.0 for k, s in self.sums.items()}
        return out | self.extremes


def _fsdp_plugin():
    """Accelerate's FSDP2: every transformer block a shard unit, full state dicts for checkpoints and engine syncs."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=True, auto_wrap_policy="transformer_based_wrap",
                                          state_dict_type="FULL_STATE_DICT", cpu_ram_efficient_loading=False)


def merge_stats(many: list[dict[str, float]]) -> dict[str, float]:
    """Statistics of several optimizer steps: means (also of ``_sum`` keys: each step's total),
    extremes for ``_min``/``_max`` keys."""
    acc = StatsAccumulator()
    for stats in many:
        acc.add({(k[:-4] if k.endswith("_sum") else k): v for k, v in stats.items()}, 1.0)
    return acc.result()


class Recipe(Protocol):
    """A training procedure run by `Harness.run`. ``step(n)`` trains step ``n`` (1-based) and
    returns its metrics; ``state_dict``/``load_state_dict`` carry what a resume needs beyond the
    registered components (data position, counters)."""

    total_steps: int
    title: str

    def step(self, step: int) -> dict[str, float]: ...

    def evaluate(self) -> dict[str, float]: ...

    def save_final(self) -> Path: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def verification(self) -> VerificationTally | None:
        """Failed verifications so far (None: the recipe verifies nothing)."""

    def close(self) -> None: ...


class Harness:
    """The infrastructure of one run configured by ``cfg`` (see the module docstring)."""

    def __init__(self, cfg: RunConfig):
        from accelerate import Accelerator

        self.cfg = cfg
        set_threads(cfg.threads)
        self.accel = Accelerator(cpu=not torch.cuda.is_available(), fsdp_plugin=_fsdp_plugin() if cfg.distributed == "fsdp" else None)
        self.sharded = cfg.distributed == "fsdp" and self.accel.num_processes > 1
        if self.sharded and cfg.model.precision != "fp32":
            raise UserError("model.precision=bf16 has not been run with distributed=fsdp (FSDP applies its own precision policy): "
                            "use distributed=ddp, or model.precision=fp32")
        self._route_fsdp()
        seed_everything(cfg.seed + self.accel.process_index)
        self.run_dir = cfg.run_dir
        self.checkpoint_dir = self.run_dir / "checkpoints"
        self.created_run_dir = not self.run_dir.exists()
        self._prepare_run_dir()
        self.rundir = RunDir(self.run_dir, tensorboard=cfg.log.tensorboard, enabled=self.accel.is_main_process)
        if self.is_main:
            for partial in remove_partial_checkpoints(self.checkpoint_dir):
                self.print(f"note: removed the partial checkpoint {partial} (an interrupted write)")
        if cfg.distributed == "fsdp" and self.accel.num_processes == 1:
            self.print("note: distributed=fsdp has no effect in a single process (FSDP is off); launch several processes "
                       "(accelerate launch / torchrun) to shard")
        self.resume_from = self._latest_checkpoint() if cfg.resume else None
        if cfg.resume and self.resume_from is None:
            self.print(f"resume requested but {self.checkpoint_dir} has no checkpoint: starting from scratch")
        self.components: dict[str, Component] = {}
        self.models: list[dict[str, Any]] = []
        self._recorded: list[weakref.ref] = []
        self.start_step = 0
        self.stop_requested = False

    # -- run directory --------------------------------------------------------------------------

    def _route_fsdp(self) -> None:
        """accelerate routes FSDP only on accelerators; on CPUs (torchrun, gloo) the same FSDP2 code
        path runs when the state says FSDP (re-asserted after each ``prepare``, which resets it there)."""
        if self.sharded and self.accel.distributed_type.value != "FSDP":
            from accelerate.utils import DistributedType

            self.accel.state.distributed_type = DistributedType.FSDP
            if getattr(self.accel.state, "fsdp_plugin", None) is None:
                self.accel.state.fsdp_plugin = _fsdp_plugin()

    def _prepare_run_dir(self) -> None:
        """Refuse to write into an existing run unless it is resumed or overwritten (every process
        decides before the main one touches anything)."""
        existing = [m for m in RUN_MARKERS if (self.run_dir / m).exists()]
        self.accel.wait_for_everyone()
        if existing and not self.cfg.resume:
            if not self.cfg.overwrite:
                raise UserError(f"run directory {self.run_dir} already holds a run ({', '.join(existing)}): "
                                f"continue it with resume=true (or `rlvr train {self.run_dir} --resume`), "
                                f"start it again with overwrite=true, or choose another name=")
            if self.accel.is_main_process:
                shutil.rmtree(self.run_dir)
            self.created_run_dir = True
        self.accel.wait_for_everyone()

    def discard_failed_start(self) -> None:
        """After a failure before the first step of a new run: remove the run directory this run
        created (nothing in it can be resumed), so the corrected command runs as typed."""
        self.rundir.close()
        if self.created_run_dir and self.is_main and not list_checkpoints(self.checkpoint_dir):
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _latest_checkpoint(self) -> Path | None:
        found = list_checkpoints(self.checkpoint_dir)
        return found[-1][1] if found else None

    # -- processes ------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.accel.device

    @property
    def num_processes(self) -> int:
        return self.accel.num_processes

    @property
    def rank(self) -> int:
        return self.accel.process_index

    @property
    def is_main(self) -> bool:
        return self.accel.is_main_process

    def reduce_sum(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over processes (itself on one process), on the CPU."""
        if self.num_processes == 1:
            return x
        return self.accel.reduce(x.to(self.device), reduction="sum").cpu()

    def gather_counts(self, n: int) -> list[int]:
        """Every process's ``n``, by rank."""
        if self.num_processes == 1:
            return [n]
        return [int(v) for v in self.accel.gather(torch.tensor([n], device=self.device)).cpu()]

    def print(self, msg: str) -> None:
        if self.is_main:
            tqdm.write(msg)

    # -- models and components ------------------------------------------------------------------

    def source(self, name: str, default: str) -> str:
        """Where component ``name``'s weights come from: the checkpoint being resumed (which must
        hold it), else ``default``."""
        if self.resume_from is None:
            return default
        saved = self.resume_from / name
        if not saved.is_dir():
            held = sorted(p.name for p in self.resume_from.iterdir() if p.is_dir())
            raise UserError(f"checkpoint {self.resume_from} has no '{name}' (it holds: {', '.join(held) or 'nothing'}), "
                            f"but this config needs one: resume with the run's own settings, or start a new run (overwrite=true or another name=)")
        return str(saved)

    def load_policy(self, init: str) -> tuple[torch.nn.Module, Any]:
        """The policy to train and its tokenizer, recorded as ``policy``: ``init`` in full (or the
        checkpoint being resumed), or with ``model.lora`` the base ``init`` with new adapters (or
        the checkpoint's: a LoRA checkpoint holds only the adapters)."""
        lora = self.cfg.model.lora
        saved = self.source("policy", init)
        if self.resume_from is not None and is_adapter_folder(saved) != lora.enabled:
            held = "a full model" if lora.enabled else "LoRA adapters"
            raise UserError(f"checkpoint {self.resume_from} holds {held} but this config has model.lora.r={lora.r}: "
                            "resume with the run's own model.lora settings")
        if not lora.enabled:
            return self.load_model(saved, "policy")
        if self.cfg.distributed == "fsdp":
            raise UserError("model.lora with distributed=fsdp is not supported (rlvr's FSDP checkpoints and engine syncs gather "
                            "full weights; a frozen sharded base with adapters is untested): use distributed=ddp")
        model, tokenizer = load_model(init, self.cfg.model.dtype, self.cfg.model.trust_remote_code, self.attn_implementation)
        if lora.merge_on_save:
            check_mergeable(model, init)  # before training, not at the end of it
        base = str(Path(init).resolve()) if Path(init).exists() else init
        if self.resume_from is None:
            model = apply_lora(model, lora, base=base)
        else:
            model = load_adapters(model, saved)
            r = adapters_of(model).peft_config["default"].r
            if r != lora.r:
                raise UserError(f"checkpoint {self.resume_from} holds adapters of rank {r} but model.lora.r={lora.r}: "
                                "resume with the run's own model.lora settings")
        self.record_model("policy", init, model)
        return model, tokenizer

    def load_model(self, path: str, role: str) -> tuple[torch.nn.Module, Any]:
        """A causal LM and its tokenizer (`rlvr.models.loading.load_model`), recorded under ``role``."""
        model, tokenizer = load_model(path, self.cfg.model.dtype, self.cfg.model.trust_remote_code, self.attn_implementation)
        self.record_model(role, path, model)
        return model, tokenizer

    @property
    def attn_implementation(self) -> str | None:
        """``model.attn_implementation`` resolved: ``auto`` is eager under bf16 on a CPU (measured on
        the embedded model: sdpa's CPU kernel takes longer backward in bf16 than in float32, eager's
        matrix products gain), else transformers' default (None)."""
        chosen = self.cfg.model.attn_implementation
        if chosen != "auto":
            return chosen
        return "eager" if self.cfg.model.precision == "bf16" and self.device.type == "cpu" else None

    def record_model(self, role: str, path: str, model: torch.nn.Module) -> None:
        self.models.append({"role": role, "source": str(path), "parameters": sum(p.numel() for p in model.parameters()),
                            **parameter_counts(model), "bytes": sum(p.numel() * p.element_size() for p in model.parameters())})
        self._recorded.append(weakref.ref(model))  # trainable counts are read again at the end: a reference is frozen after loading

    def frozen(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` in eval mode, without gradients, on the run's device, its forward under the
        run's mixed precision (`autocast_forward`)."""
        return self.autocast_forward(model.eval().requires_grad_(False).to(self.device))

    def autocast_forward(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` with its forward run under bf16 autocast and float32 outputs when
        ``model.precision=bf16`` (unchanged otherwise, or when already wrapped). Every model of the
        run gets it: the trained ones before accelerate wraps them (`trainable`), the frozen ones
        (`frozen`), so a reference computes in the precision of the policy it is compared with.
        This is what accelerate's ``mixed_precision`` does to the models it prepares, kept per run:
        accelerate's setting is process-wide and fixed by the first run in the process."""
        if self.cfg.model.precision != "bf16" or hasattr(model, "_original_forward"):  # accelerate's name for the unwrapped forward
            return model
        from accelerate.utils import convert_outputs_to_fp32

        func, device_type = model.forward.__func__, self.device.type

        @functools.wraps(func)
        def autocast_forward(module, *args, **kwargs):
            with torch.autocast(device_type, dtype=torch.bfloat16):
                return func(module, *args, **kwargs)

        model._original_forward = model.forward
        model.forward = MethodType(convert_outputs_to_fp32(autocast_forward), model)  # bound: a deep copy calls its own weights
        return model

    def trainable(self, name: str, model: torch.nn.Module, optim: OptimConfig, total_steps: int, tokenizer: Any = None) -> TrainableModel:
        """``model`` with an AdamW optimizer and schedule over ``total_steps`` optimizer steps,
        prepared by accelerate and registered for checkpoints under ``name``."""
        optimizer, scheduler = make_optimizer(model, optim, total_steps)
        model, optimizer, scheduler = self.accel.prepare(self.autocast_forward(model), optimizer, scheduler)
        self._route_fsdp()
        part = TrainableModel(name, model, optimizer, scheduler, self.accel, optim.max_grad_norm, tokenizer, sharded=self.sharded)
        self.register(name, part)
        return part

    def register(self, name: str, component: Component) -> None:
        if name in self.components:
            raise ValueError(f"a component named {name!r} is already registered")
        self.components[name] = component

    # -- the accumulation routine ---------------------------------------------------------------

    def optimizer_step(self, part: TrainableModel, rows: torch.Tensor, objective: Objective, micro_batch_size: int,
                       lengths: torch.Tensor | None = None, idle: torch.Tensor | None = None) -> dict[str, float] | None:
        """One optimizer step of ``part`` on ``rows`` (this process's share of a minibatch).

        Micro-batches of ``micro_batch_size`` rows (sorted by ``lengths`` when given: see
        `micro_batches`) accumulate gradients; only the last one syncs them across processes. A process
        with no rows while others have some joins with one row of weight 0 (DDP needs every process
        in every all-reduce); with one process an empty minibatch is no step (returns None). The
        loss is scaled by the process count because DDP averages gradients while the objective is
        already normalised by totals over all processes. Returns the weighted statistics of the
        objective, ``grad_norm`` (before clipping) and ``lr``.

        ``idle`` ``[len(rows)]`` (bool) marks rows whose loss and gradient are exactly 0 (e.g. a zero
        advantage with no KL or entropy term): they count in the objective's totals, so the loss is
        the same, but are not forwarded. Statistics then cover the forwarded rows.
        """
        accel = self.accel
        weight = 1.0
        if len(rows) == 0:
            if self.num_processes == 1:
                return None
            rows, weight = torch.zeros(1, dtype=torch.long), 0.0
        totals = self.reduce_sum(objective.totals(rows).float() * weight)
        if idle is not None and weight and not bool(idle.all()):  # all idle: forward them (the step still happens)
            rows = rows[~idle]
        micros = self.micro_batches(rows, micro_batch_size, lengths, collective=self.sharded)
        part.model.train()
        stats, loss_sum = StatsAccumulator(), 0.0
        for i, (micro, real) in enumerate(micros):
            w = weight if real else 0.0
            sync = accel.no_sync(part.model) if i < len(micros) - 1 and self.num_processes > 1 else nullcontext()
            with sync:
                loss, micro_stats, micro_weight = objective.loss(micro, totals)
                accel.backward(loss * (w * self.num_processes))
            loss_sum += float(loss.detach()) * w
            if w:
                stats.add(micro_stats, micro_weight)
        out = stats.result() | {"loss": loss_sum}
        if part.max_grad_norm > 0:
            out["grad_norm"] = float(accel.clip_grad_norm_(part.model.parameters(), part.max_grad_norm))
        faults.reached("optimizer_step")
        part.optimizer.step()
        part.scheduler.step()
        part.optimizer.zero_grad(set_to_none=True)
        part.updates += 1
        out["lr"] = part.scheduler.get_last_lr()[0]
        return out

    def micro_batches(self, rows: torch.Tensor, size: int, lengths: torch.Tensor | None = None,
                      collective: bool = False) -> list[tuple[torch.Tensor, bool]]:
        """``rows`` in micro-batches of ``size`` (sorted by ``lengths`` when given: sequence
        lengths cut padding, group ids keep the sequences that share a prompt together for
        packing), each with whether it is real. With ``collective`` (a sharded model: every
        forward is a collective) every process gets as many micro-batches as the busiest one, the
        extra ones a placeholder row to be given weight 0."""
        if lengths is not None and len(rows):
            rows = rows[torch.argsort(lengths[rows], stable=True)]
        micros = [(m, True) for m in rows.split(size)]
        if collective and self.num_processes > 1:
            most = max(self.gather_counts(len(micros)))
            micros += [(torch.zeros(1, dtype=torch.long), False)] * (most - len(micros))
        return micros

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self, step: int, recipe: Recipe) -> Path:
        """Save every component, the recipe's state and each process's RNG as ``step-N``
        (written under a temporary name and renamed, so a kill never leaves half a checkpoint)."""
        final = self.checkpoint_dir / f"step-{step}"
        tmp = final.with_name(final.name + PARTIAL_SUFFIX)
        recipe_state = recipe.state_dict()  # first: a recipe may finish work in flight (which moves the RNG) before it is saved
        try:
            self._write_checkpoint(step, final, tmp, recipe_state)
        except Exception as e:
            needed = self._checkpoint_bytes()
            # torch's writer can lose the OSError ("unexpected pos ..."): a disk without room for a checkpoint is the cause then
            full = is_out_of_space(e) or free_bytes(self.checkpoint_dir) < needed
            if self.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            if full:
                raise CheckpointError(f"{out_of_space_message(final, needed)}: the checkpoint was not saved; "
                                      f"free space there and continue with `rlvr train {self.run_dir} --resume`") from e
            raise
        return final

    def _write_checkpoint(self, step: int, final: Path, tmp: Path, recipe_state: dict[str, Any]) -> None:
        if self.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for name in self.components:
                (tmp / name).mkdir()
        self.accel.wait_for_everyone()
        for name, component in self.components.items():
            component.save(tmp / name)
        torch.save(rng_state(), tmp / f"rng-{self.rank}.pt")
        faults.reached("checkpoint_write")
        self.accel.wait_for_everyone()
        if self.is_main:
            torch.save({"step": step, "components": list(self.components), "processes": self.num_processes,
                        "recipe": recipe_state}, tmp / STATE_FILE)
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
            prune_checkpoints(self.checkpoint_dir, self.cfg.log.keep_checkpoints)
        self.accel.wait_for_everyone()

    def _checkpoint_bytes(self) -> int:
        """About what one checkpoint takes: the latest complete one's size, else every component's
        weights plus the optimizer state."""
        done = list_checkpoints(self.checkpoint_dir)
        if done:
            return folder_bytes(done[-1][1])
        total = 0
        for component in self.components.values():
            model = getattr(component, "model", None)
            if model is not None:
                total += sum(p.numel() * p.element_size() for p in model.parameters())
            if isinstance(component, TrainableModel):
                total += component.optimizer_state_bytes()
        return total

    def resumed_state(self) -> dict[str, Any] | None:
        """The training state saved with the checkpoint being resumed (``step``, the recipe's
        ``state_dict`` under ``recipe``), or None on a fresh run: for a recipe whose set-up depends
        on where the run resumes (offline DPO scores the reference of the pairs still to come)."""
        if self.resume_from is None:
            return None
        return torch.load(self.resume_from / STATE_FILE, weights_only=False)

    def restore(self, recipe: Recipe) -> int:
        """Load every component's state, the recipe's and this process's RNG from the checkpoint
        being resumed; returns its step (0 when not resuming). Call after every component exists."""
        if self.resume_from is None:
            return 0
        state = torch.load(self.resume_from / STATE_FILE, weights_only=False)
        if state.get("processes", 1) != self.num_processes:
            raise UserError(f"checkpoint {self.resume_from} was written by {state['processes']} processes; resume it with as many")
        unused = sorted(set(state.get("components", [])) - set(self.components))
        if unused:
            self.print(f"note: checkpoint {self.resume_from} holds {', '.join(unused)}, which this config does not use")
        for name, component in self.components.items():
            component.load(self.resume_from / name)
        recipe.load_state_dict(state["recipe"])
        set_rng_state(torch.load(self.resume_from / f"rng-{self.rank}.pt", weights_only=False))
        self.print(f"resumed from {self.resume_from} (step {state['step']})")
        return int(state["step"])

    # -- the loop -------------------------------------------------------------------------------

    def run(self, recipe: Recipe) -> TrainResult:
        """Train ``recipe`` from its restored step to ``recipe.total_steps``: log every step,
        evaluate every ``eval.every`` steps, checkpoint every ``log.checkpoint_every`` steps and at
        the end (also after a failure or a signal), save the final model when complete. A new run
        that fails before its first step leaves no run directory behind."""
        self.steps_done = 0
        try:
            return self._run(recipe)
        except BaseException:
            if self.steps_done == 0 and self.resume_from is None:
                self.discard_failed_start()
            raise

    def _run(self, recipe: Recipe) -> TrainResult:
        cfg = self.cfg
        step = self.start_step = self.restore(recipe)
        self.rundir.start(step)
        self.rundir.write_config(cfg)
        status = "running"
        self.rundir.write_state(status=status, step=step)
        restore_signals = self._install_signal_handlers()
        bar = tqdm(total=recipe.total_steps, initial=step, desc=recipe.title, unit="step",
                   disable=not (cfg.log.progress and self.is_main), dynamic_ncols=True)
        try:
            if cfg.eval.at_start and step == 0:
                self.log(0, recipe.evaluate())
            while step < recipe.total_steps and not self.stop_requested:
                t0 = time.perf_counter()
                metrics = recipe.step(step + 1)
                step += 1
                self.steps_done += 1
                metrics["time/step"] = time.perf_counter() - t0
                if cfg.eval.every and step % cfg.eval.every == 0:
                    metrics |= recipe.evaluate()
                self.log(step, metrics)
                bar.set_postfix({k.split("/")[-1]: f"{metrics[k]:.3f}" for k in ("reward/mean", "reward/accuracy", "sft/loss") if k in metrics})
                bar.update(1)
                if cfg.log.checkpoint_every and step % cfg.log.checkpoint_every == 0 and step < recipe.total_steps:
                    self._checkpoint_and_plot(step, recipe)
            status = "completed" if step >= recipe.total_steps else "interrupted"
            self._checkpoint_and_plot(step, recipe)
            final = recipe.save_final() if status == "completed" else None
            tally = recipe.verification()
            if tally is not None and tally.failed:
                self.print(f"{'error' if tally.all_failed else 'warning'}: {tally.summary()}")
                if tally.all_failed:  # no reward reached the policy: this is not a completed run
                    status = "failed: every verification of the run failed; fix the environment (`rlvr envs check ID`)"
            return TrainResult(self.run_dir, step, final, status)
        except BaseException as e:
            status = f"failed: {type(e).__name__}: {e}"
            if step > self.start_step and not isinstance(e, CheckpointError):
                try:  # keep what was learned; the run can resume from here
                    self.checkpoint(step, recipe)
                except Exception as save_error:
                    self.print(f"could not save a checkpoint after the failure: {save_error}")
            raise
        finally:
            bar.close()
            restore_signals()
            recipe.close()
            try:  # on a full disk these fail too: the error that stopped the run is the one to report
                self.rundir.write_state(status=status, step=step)
                self.rundir.write_json("resources.json", self.resources())
                if cfg.log.plot:
                    self.rundir.plot(title=recipe.title)
            except OSError as e:
                self.print(f"could not write the run's summary files: {e}")
            self.rundir.close()

    def _checkpoint_and_plot(self, step: int, recipe: Recipe) -> None:
        self.checkpoint(step, recipe)
        if self.cfg.log.plot and self.is_main:
            self.rundir.plot(title=recipe.title)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.rundir.log_metrics(step, metrics)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.rundir.log_samples(step, rows)

    def save_model(self, part: TrainableModel, directory: Path) -> Path:
        """``part``'s weights (and tokenizer) in Hugging Face format, without optimizer state. A LoRA
        model: its adapters (an adapter folder, which `rlvr.models.loading.load_model` loads merged),
        and with ``model.lora.merge_on_save`` also the merged model in ``directory/merged``."""
        if adapters_of(part.model) is not None:
            if self.is_main:
                save_adapters(part.unwrapped, directory)
                folders = [directory]
                if self.cfg.model.lora.merge_on_save:
                    save_merged(part.unwrapped, directory / "merged")
                    folders.append(directory / "merged")
                for folder in folders if part.tokenizer is not None else []:
                    part.tokenizer.save_pretrained(folder)
            self.accel.wait_for_everyone()
            return directory
        state_dict = part.full_state_dict()
        if self.is_main:
            part.unwrapped.save_pretrained(directory, state_dict=state_dict)
            if part.tokenizer is not None:
                part.tokenizer.save_pretrained(directory)
        self.accel.wait_for_everyone()
        return directory

    def resources(self) -> dict[str, Any]:
        """What this process held: models by role with parameter counts, optimizer state, peak memory."""
        optim = {name: c.optimizer_state_bytes() for name, c in self.components.items() if isinstance(c, TrainableModel)}
        for record, ref in zip(self.models, self._recorded):
            if ref() is not None:  # still held (a released model keeps its counts from loading)
                record.update(parameter_counts(ref()))
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        out: dict[str, Any] = {"models": self.models, "models_in_memory": len(self.models),
                               "parameters_total": sum(m["parameters"] for m in self.models),
                               "optimizer_state_bytes": optim, "peak_rss_bytes": peak_rss}
        if torch.cuda.is_available():
            out["peak_cuda_bytes"] = torch.cuda.max_memory_allocated()
        return out

    def _install_signal_handlers(self) -> Callable[[], None]:
        """SIGINT/SIGTERM finish the current step, checkpoint and stop (a second signal aborts)."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum, frame):
            if self.stop_requested:
                raise KeyboardInterrupt
            self.stop_requested = True
            self.print(f"\n{signal.Signals(signum).name}: stopping after this step and saving a checkpoint (again to abort)")

        for s in previous:
            signal.signal(s, handler)
        return lambda: [signal.signal(s, h) for s, h in previous.items()]


__all__ = ["CheckpointError", "Component", "FrozenModel", "Harness", "Objective", "Recipe", "StatsAccumulator", "TrainResult",
           "TrainableModel", "TrainingError", "merge_stats"]
