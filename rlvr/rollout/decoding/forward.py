"""What rlvr's own decoders share: calling a Hugging Face causal LM's forward with explicit
positions, a custom 4-D mask and a cache of rlvr's, and prefilling each distinct prompt once."""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor

from rlvr.models.attention import model_mask, takes_custom_mask


def full_precision(model: torch.nn.Module) -> Callable:
    """``model``'s forward without the autocast that mixed precision wraps around it (accelerate's
    ``prepare`` and `rlvr.train.harness.Harness.autocast_forward` keep the original as
    ``_original_forward``)."""
    return getattr(model, "_original_forward", model)


@contextmanager
def weights_precision(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s own forward runs without the mixed-precision autocast a run put
    around it (`full_precision`), so Hugging Face's ``generate``, which calls ``model(...)``, decodes
    in the weights' precision as rlvr's decoders do (a sharded model keeps its wrapper)."""
    original = getattr(model, "_original_forward", None)
    if original is None or "forward" not in vars(model):
        yield
        return
    wrapped = model.forward
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped


def cache_keyword(model: torch.nn.Module) -> str:
    """The name under which ``model``'s forward takes a cache: ``cache`` from transformers 5.24
    (``past_key_values`` still accepted there, with a deprecation warning), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def supports_own_decoding(model: torch.nn.Module) -> bool:
    """Hugging Face decoder models on the sdpa or eager attention whose forward takes explicit
    positions and ``logits_to_keep`` accept the 4-D masks and duck-typed caches rlvr's decoders rely on."""
    if not takes_custom_mask(model) or not hasattr(getattr(model, "config", None), "num_hidden_layers"):
        return False
    params = inspect.signature(model.forward).parameters
    return "position_ids" in params and "logits_to_keep" in params


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@dataclass
class Prefill:
    """Each distinct prompt run once through the model.

    Attributes:
        logits: ``[B, V]`` next-token logits of every row (rows of the same prompt share them).
        first_of: ``[B]`` the distinct prompt of each row (an index into the prefilled rows).
        real: ``[U, W]`` bool, the prefilled columns that hold a prompt token (prompts are
            left-padded to the width ``W`` of the longest).
        prompt_len: ``[B]`` each row's prompt length (the position of its first generated token).
    """

    logits: Tensor
    first_of: Tensor
    real: Tensor
    prompt_len: Tensor

    @property
    def width(self) -> int:
        return self.real.shape[1]


def prefill(model: torch.nn.Module, prompts: Sequence[list[int]], pad_id: int, cache: Any) -> Prefill:
    """Run each distinct prompt of ``prompts`` once, left-padded (every prompt's last token in the
    same column), filling ``cache`` (any object the model's forward takes as its cache)."""
    device = model_device(model)
    distinct: dict[tuple[int, ...], int] = {}
    first_of = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts], device=device)
    unique = list(distinct)
    width = max(len(p) for p in unique)
    ids = torch.full((len(unique), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(unique), width), dtype=torch.bool)
    for u, p in enumerate(unique):
        ids[u, width - len(p):] = torch.tensor(p, dtype=torch.long)
        real[u, width - len(p):] = True
    ids, real = ids.to(device), real.to(device)
    eye = torch.eye(width, dtype=torch.bool, device=device)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    mask = (causal & real.unsqueeze(1)) | eye  # left padding attends to itself only
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    out = full_precision(model)(input_ids=ids, attention_mask=model_mask(model, mask.unsqueeze(1)), position_ids=positions,
                                **{cache_keyword(model): cache}, use_cache=True, logits_to_keep=1)
    prompt_len = torch.tensor([len(p) for p in prompts], device=device)
    return Prefill(out.logits[:, -1].index_select(0, first_of), first_of, real, prompt_len)


def end_ids_tensor(eos_ids: Sequence[int], device: torch.device) -> Tensor | None:
    return torch.tensor(list(eos_ids), dtype=torch.long, device=device) if eos_ids else None
