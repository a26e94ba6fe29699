"""The frozen reference model a recipe reads against: the policy's starting weights."""

from __future__ import annotations

import copy

import torch

from rlvr import UserError
from rlvr.models.lora import adapters_of, base_view
from rlvr.train.harness import Harness
from rlvr.train.trainable import FrozenModel


def frozen_reference(harness: Harness, policy: torch.nn.Module, path: str, *, refreshed: bool, needed_for: str) -> torch.nn.Module:
    """The policy's starting weights (``path``, i.e. ``model.name_or_path``), frozen: a copy of
    ``policy`` (the loaded model, before it is wrapped or sharded) when the run starts, loaded from
    ``path`` when it resumes. A reference that is
    ``refreshed`` from the policy during the run is a checkpointed component (``reference``), so
    a resumed run reads against the same weights. ``needed_for`` names the setting that needs the
    reference, for the error when it cannot be loaded.

    With LoRA (``policy`` holds adapters) the reference is the policy's own module with its adapters
    disabled (`rlvr.models.lora.BaseView`): the base weights, no second copy."""
    if adapters_of(policy) is not None:
        if refreshed:
            raise UserError("algo.ref_update_every refreshes the reference from the policy, which model.lora does not support "
                            "(its reference is the frozen base under the adapters): set algo.ref_update_every=0 or drop model.lora")
        return base_view(policy)
    if refreshed:
        model, _ = harness.load_model(harness.source("reference", path), "reference")
        harness.register("reference", FrozenModel("reference", model, harness.accel))
    elif harness.resume_from is None:
        model = copy.deepcopy(policy)
        harness.record_model("reference", path, model)
    else:
        try:
            model, _ = harness.load_model(path, "reference")
        except UserError as e:
            raise UserError(f"the reference model {path!r} (model.name_or_path, the policy's starting weights) cannot be loaded, "
                            f"and {needed_for} needs it: {e}") from None
    return harness.frozen(model)


__all__ = ["frozen_reference"]
