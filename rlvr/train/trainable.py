"""The models of a run: trained ones with their optimizer (`TrainableModel`), frozen ones whose
weights may still change (`FrozenModel`), both checkpointed components, and `HarnessModels`, the
part of `rlvr.train.harness.Harness` that loads, records, wraps and saves them."""

from __future__ import annotations

import functools
import resource
import sys
import warnings
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MethodType
from typing import Any, Protocol

import torch

from rlvr import UserError
from rlvr.models.loading import load_model
from rlvr.models.lora import adapters_of, apply_lora, check_mergeable, is_adapter_folder, load_adapters, parameter_counts, save_adapters, save_merged
from rlvr.train.common import make_optimizer
from rlvr.train.config import OptimConfig, RunConfig


class Component(Protocol):
    """Anything the harness checkpoints: it writes its state into a folder and reads it back."""

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...


@contextmanager
def _one_process_is_intended():
    """torch.distributed.checkpoint in one process warns that it assumes one process: rlvr means it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized", category=UserWarning)
        yield


@dataclass
class TrainableModel:
    """A model with its optimizer and schedule, prepared by accelerate; a checkpointed component.

    Its weights are saved in Hugging Face format (with the tokenizer when given), so a checkpoint's
    ``policy/`` folder loads with ``from_pretrained``; the optimizer and scheduler beside them.
    With ``distributed=fsdp`` the optimizer state goes through torch.distributed.checkpoint
    (``optimizer_shards/``: each process writes its own shard, keyed by parameter name), also in a
    single process, so the checkpoint loads at any process count (each process reads its new shard).
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
    resharded_optimizer: bool = False  # distributed=fsdp (any process count): the optimizer state is saved with torch.distributed.checkpoint
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
        if self.resharded_optimizer:  # every process writes its shard of the optimizer state (one file per process)
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            with _one_process_is_intended():
                dcp.save({"optimizer": get_optimizer_state_dict(self.model, self.optimizer)}, checkpoint_id=str(directory / self.SHARDED_OPTIM_DIR),
                         no_dist=self.accel.num_processes == 1)
        if self.accel.is_main_process:
            if lora:
                save_adapters(self.unwrapped, directory)
            else:
                self.unwrapped.save_pretrained(directory, state_dict=state_dict)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(directory)
            optimizer = None if self.resharded_optimizer else self.optimizer.state_dict()
            torch.save({"optimizer": optimizer, "scheduler": self.scheduler.state_dict(), "updates": self.updates}, directory / self.OPTIM_FILE)

    def load(self, directory: Path) -> None:
        """Optimizer, scheduler and update count (the weights were loaded from `Harness.source`). A
        sharded optimizer state is read into this run's layout, whatever the process count that wrote it."""
        state = torch.load(directory / self.OPTIM_FILE, weights_only=False)
        if (directory / self.SHARDED_OPTIM_DIR).is_dir():
            if not self.resharded_optimizer:
                raise UserError(f"{directory} was saved with distributed=fsdp (a sharded optimizer state); resume it with distributed=fsdp")
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

            layout = {"optimizer": get_optimizer_state_dict(self.model, self.optimizer)}  # this run's shards, read in place
            with _one_process_is_intended():
                dcp.load(layout, checkpoint_id=str(directory / self.SHARDED_OPTIM_DIR), no_dist=self.accel.num_processes == 1)
            set_optimizer_state_dict(self.model, self.optimizer, layout["optimizer"])
        elif state["optimizer"] is None:
            raise UserError(f"{directory} has neither {self.OPTIM_FILE}'s optimizer state nor {self.SHARDED_OPTIM_DIR}/: the checkpoint is incomplete")
        elif self.sharded:
            raise UserError(f"{directory} was saved without sharding (distributed=ddp); resume it with distributed=ddp")
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


class HarnessModels:
    """Models and components of a run, mixed into `rlvr.train.harness.Harness` (which sets the
    attributes below): where a component's weights come from, loading and recording every model,
    the run's mixed precision, accelerate's preparation of a trained one, saving one for good and
    what the process held (``resources.json``)."""

    cfg: RunConfig
    accel: Any
    sharded: bool
    resume_from: Path | None
    components: dict[str, Component]
    models: list[dict[str, Any]]
    _recorded: list[weakref.ref]

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
        from rlvr.models.attention import attention_kernel

        self.models.append({"role": role, "source": str(path), "parameters": sum(p.numel() for p in model.parameters()),
                            **parameter_counts(model), "bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                            "attention": attention_kernel(model)})
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
        part = TrainableModel(name, model, optimizer, scheduler, self.accel, optim.max_grad_norm, tokenizer, sharded=self.sharded,
                              resharded_optimizer=self.cfg.distributed == "fsdp" and adapters_of(model) is None)
        self.register(name, part)
        return part

    def register(self, name: str, component: Component) -> None:
        if name in self.components:
            raise ValueError(f"a component named {name!r} is already registered")
        self.components[name] = component

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
        from rlvr.models.device import describe_device

        out: dict[str, Any] = {"device": describe_device(self.device), "models": self.models, "models_in_memory": len(self.models),
                               "parameters_total": sum(m["parameters"] for m in self.models),
                               "optimizer_state_bytes": optim, "peak_rss_bytes": peak_rss}
        if self.device.type == "cuda":
            out["peak_cuda_bytes"] = torch.cuda.max_memory_allocated(self.device)
        return out | getattr(self, "notes", {})


__all__ = ["Component", "FrozenModel", "HarnessModels", "TrainableModel"]
