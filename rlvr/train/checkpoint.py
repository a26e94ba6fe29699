"""Checkpoint folders of a run: ``checkpoints/step-N/`` holds one sub-folder per component and
``trainer_state.pt`` (step, recipe state, what the run has spent); `HarnessCheckpoints` (part of
`rlvr.train.harness.Harness`) writes and reads them. A checkpoint is written as ``step-N.tmp``
and renamed when complete, so a ``.tmp`` folder is always a partial write (a kill or a full disk)
and is removed."""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from envs import faults
from rlvr import TrainingError, UserError
from rlvr.train.budget import Spent
from rlvr.train.common import rng_state, seed_everything, set_rng_state
from rlvr.train.trainable import Component, TrainableModel
from tasks.base import stable_hash

if TYPE_CHECKING:
    from rlvr.train.config import RunConfig
    from rlvr.train.harness import Recipe

STATE_FILE = "trainer_state.pt"
PARTIAL_SUFFIX = ".tmp"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``root`` as (step, path), oldest first."""
    found = []
    for p in root.glob("step-*"):
        m = re.fullmatch(r"step-(\d+)", p.name)
        if m and (p / STATE_FILE).exists():
            found.append((int(m.group(1)), p))
    return sorted(found)


def prune_checkpoints(root: Path, keep: int) -> None:
    for _, path in list_checkpoints(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)


def remove_partial_checkpoints(root: Path) -> list[Path]:
    """Delete the partial ``step-N.tmp`` folders under ``root`` (they can never be resumed and may
    hold the space the next checkpoint needs); returns what was removed."""
    partial = [p for p in root.glob(f"step-*{PARTIAL_SUFFIX}") if p.is_dir()]
    for p in partial:
        shutil.rmtree(p, ignore_errors=True)
    return partial


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def is_out_of_space(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) is a full disk or quota. torch and
    safetensors wrap the OSError in their own exceptions, hence the walk along the chain."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return True
        if "No space left on device" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds ``path`` (or its nearest existing parent)."""
    return shutil.disk_usage(next((p for p in [path, *path.parents] if p.exists()), Path("."))).free


def out_of_space_message(path: Path, needed_bytes: int | None = None) -> str:
    """One line naming ``path``, the space it needs (when known) and what is free there."""
    free = free_bytes(path)
    need = f"about {_human(needed_bytes)} needed, " if needed_bytes else ""
    return f"no space left on device writing {path} ({need}{_human(free)} free there)"


def _human(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            break
        size /= 1024
    return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"


class CheckpointError(TrainingError):
    """A checkpoint could not be written (its partial folder is removed; earlier ones stay)."""


class HarnessCheckpoints:
    """Checkpoints of every registered component, mixed into `rlvr.train.harness.Harness` (which
    sets the attributes below): writing ``step-N`` (with the recipe's state and every process's
    RNG) and restoring from the checkpoint being resumed, also by another number of processes
    (a sharded optimizer state is read into the new layout; what cannot be is refused first)."""

    cfg: RunConfig
    accel: Any
    run_dir: Path
    checkpoint_dir: Path
    resume_from: Path | None
    components: dict[str, Component]
    spent: Spent

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
                        "recipe": recipe_state, "spent": self.spent.state_dict()}, tmp / STATE_FILE)
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
        saved_world = int(state.get("processes", 1))
        if saved_world != self.num_processes:
            self._check_reshardable(saved_world)
        unused = sorted(set(state.get("components", [])) - set(self.components))
        if unused:
            self.print(f"note: checkpoint {self.resume_from} holds {', '.join(unused)}, which this config does not use")
        for name, component in self.components.items():
            component.load(self.resume_from / name)
        recipe.load_state_dict(state["recipe"])
        self.spent = Spent.from_state(state.get("spent"))  # (a checkpoint written before budgets: nothing counted yet)
        self._restore_rng(int(state["step"]), saved_world)
        self.print(f"resumed from {self.resume_from} (step {state['step']})")
        return int(state["step"])

    def _check_reshardable(self, saved_world: int) -> None:
        """Refuse, before anything loads, a checkpoint whose optimizer state cannot be read at this
        process count: a replicated one (distributed=ddp, ``optimizer.pt``) loads at any count
        unsharded, a sharded one (``optimizer_shards/``) at any count with distributed=fsdp."""
        change = f"checkpoint {self.resume_from} was written by {saved_world} process{'es' * (saved_world != 1)}, this run has {self.num_processes}"
        for name, component in self.components.items():
            if not isinstance(component, TrainableModel):
                continue
            folder = self.resume_from / name
            if (folder / TrainableModel.SHARDED_OPTIM_DIR).is_dir() and not component.resharded_optimizer:
                raise UserError(f"{change}: its {name} optimizer state is sharded (distributed=fsdp) and reshards only into "
                                "distributed=fsdp; resume with distributed=fsdp")
            if not (folder / TrainableModel.SHARDED_OPTIM_DIR).is_dir() and component.sharded:
                raise UserError(f"{change}: its {name} optimizer state is replicated (distributed=ddp) and cannot be sharded "
                                "into distributed=fsdp; resume with distributed=ddp")
        grown = f"; ranks from {saved_world} on have no saved RNG and start from new seeds" if self.num_processes > saved_world else ""
        self.print(f"note: {change}: the optimizer state is resharded{grown}; batch sizes (rollout.prompts_per_step, SFT's "
                   f"batch_size) count per process, so each step's global batch is now {self.num_processes}/{saved_world} of what "
                   f"it was (to keep it, scale them by {saved_world}/{self.num_processes} on the command line)")

    def _restore_rng(self, step: int, saved_world: int) -> None:
        """This process's RNG as saved; a process the checkpoint did not have (more processes than
        wrote it) is seeded from (seed, step, rank) instead: its samples cannot continue a stream
        that never existed."""
        saved = self.resume_from / f"rng-{self.rank}.pt"
        if self.rank < saved_world and saved.exists():
            set_rng_state(torch.load(saved, weights_only=False))
        else:
            seed_everything(stable_hash("resume-rng", self.cfg.seed, step, self.rank) % 2**31)


__all__ = ["CheckpointError", "HarnessCheckpoints", "folder_bytes", "free_bytes", "is_out_of_space", "list_checkpoints", "out_of_space_message",
           "prune_checkpoints", "remove_partial_checkpoints"]
