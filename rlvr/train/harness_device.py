"""The harness's device rule and what a failure leaves (`HarnessDevice`, a part of `rlvr.train.harness.Harness`).

- **The device**: ``device`` (``auto | cpu | cuda | cuda:N``) resolved before anything is written
  (`rlvr.models.device.resolve_device`); an explicit ``cuda:N`` with several processes refused;
  weights that cannot fit in the free GPU memory refused (`rlvr.models.device.check_fits`).
- **FSDP on CPUs**: accelerate routes FSDP only on accelerators; on CPUs (torchrun, gloo) the same
  FSDP2 code path runs when the state says so (`HarnessDevice._route_fsdp`).
- **A failure** (`HarnessDevice.fail`): a checkpoint of what was learned when the state is
  consistent; CUDA running out of memory becomes a `TrainingError` naming the settings to lower; a
  collective broken by a lost process names the ranks that did not answer a roll call and keeps the
  last checkpoint (no collective can run, so none is written).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from rlvr import TrainingError, UserError
from rlvr.models.device import OOM_HINT, is_out_of_memory
from rlvr.train.checkpoint import CheckpointError
from rlvr.train.lost_process import first_line, is_lost_process, roll_call

if TYPE_CHECKING:
    from rlvr.train.harness import Recipe

ROLL_CALL_DIR = "roll_call"  # where survivors answer when a process of the run is lost


def fsdp_plugin():
    """Accelerate's FSDP2: every transformer block a shard unit, full state dicts for checkpoints and engine syncs."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=True, auto_wrap_policy="transformer_based_wrap",
                                          state_dict_type="FULL_STATE_DICT", cpu_ram_efficient_loading=False)


class HarnessDevice:
    """The device rule, FSDP routing and failure handling of `rlvr.train.harness.Harness` (which
    provides ``cfg``, ``accel``, ``sharded``, ``device``, ``rank``, ``num_processes``, ``run_dir``,
    ``start_step``, ``print``, ``checkpoint`` and ``_latest_checkpoint``)."""

    cfg: Any
    accel: Any
    sharded: bool
    run_dir: Any
    start_step: int

    def _resolve_device(self) -> torch.device:
        """``device`` resolved (`rlvr.models.device.resolve_device`), before anything is written; an
        explicit ``cuda:N`` becomes the current CUDA device of this (single) process."""
        from rlvr.models.device import resolve_device

        device = resolve_device(self.cfg.device)
        explicit = self.cfg.device.strip().lower().startswith("cuda:")
        if explicit and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise UserError(f"device={self.cfg.device} with {os.environ['WORLD_SIZE']} processes: each process takes its local GPU "
                            "(LOCAL_RANK); use device=cuda or device=auto, and CUDA_VISIBLE_DEVICES to choose the GPUs")
        if explicit:
            torch.cuda.set_device(device)
        return device

    def _check_model_fits(self) -> None:
        """On a GPU: refuse a policy whose weights exceed the free memory, warn when full fine-tuning
        will not fit (`rlvr.models.device.check_fits`), before the run directory is touched."""
        from rlvr.models.device import check_fits
        from rlvr.models.paths import resolve_model

        name = self.cfg.model.name_or_path
        if self.device.type != "cuda" or name == "tiny" or self.cfg.resume:
            return
        try:
            folder = resolve_model(name)
        except UserError:
            return  # loading reports it, with its own message
        warning = check_fits(folder, self.device, self.cfg.model.dtype, training=not self.cfg.model.lora.enabled, what="model.name_or_path")
        if warning:
            self.print(f"warning: {warning}")

    def _route_fsdp(self) -> None:
        """accelerate routes FSDP only on accelerators; on CPUs (torchrun, gloo) the same FSDP2 code
        path runs when the state says FSDP (re-asserted after each ``prepare``, which resets it there)."""
        if self.sharded and self.accel.distributed_type.value != "FSDP":
            from accelerate.utils import DistributedType

            self.accel.state.distributed_type = DistributedType.FSDP
            if getattr(self.accel.state, "fsdp_plugin", None) is None:
                self.accel.state.fsdp_plugin = fsdp_plugin()

    def fail(self, error: BaseException, step: int, recipe: Recipe) -> tuple[str, TrainingError | None]:
        """What a failure at ``step`` leaves: the run's status, and the error to report in place of
        ``error`` where there is a better one (a lost process, CUDA out of memory), else None."""
        if self.num_processes > 1 and is_lost_process(error):  # no collective can run now: the last checkpoint stays
            lost = self._lost_process_error(error, step)
            return f"failed: {lost}", lost
        consistent = getattr(recipe, "can_checkpoint", lambda: True)()
        if step > self.start_step and not isinstance(error, CheckpointError) and consistent and self.worth_saving(recipe):
            if is_out_of_memory(error):
                torch.cuda.empty_cache()  # room to write the checkpoint
            try:  # keep what was learned; the run can resume from here
                self.checkpoint(step, recipe)
            except Exception as save_error:
                self.print(f"could not save a checkpoint after the failure: {save_error}")
        if is_out_of_memory(error):
            return f"failed: {OOM_HINT}", TrainingError(f"step {step + 1}: {OOM_HINT}")
        if isinstance(error, KeyboardInterrupt):  # stopped from outside, not failed: a second signal, or Ctrl-C before the handlers
            return f"aborted: {str(error) or 'interrupted'}", None
        return f"failed: {type(error).__name__}: {error}", None

    def _lost_process_error(self, error: BaseException, step: int) -> TrainingError:
        """The one-line error of a collective broken by a process that went away, naming the ranks
        that did not answer the roll call (`rlvr.train.lost_process`) and the checkpoint kept."""
        missing = roll_call(self.run_dir / ROLL_CALL_DIR / f"step-{step + 1}", self.rank, self.num_processes)
        gone = (f"process{'es' * (len(missing) > 1)} {', '.join(map(str, missing))} of {self.num_processes} stopped answering"
                if missing else "every process answered the roll call after a transport error")
        last = self._latest_checkpoint()
        kept = f"the last checkpoint, {last.name}, is kept" if last is not None else "no checkpoint had been written"
        return TrainingError(f"after step {step}: {gone} (process {self.rank} saw: {first_line(error)}); {kept}: continue with "
                             f"`rlvr train {self.run_dir} --resume`, with the surviving or a new number of processes")
