"""Custom 4-D attention masks in the form each Hugging Face attention implementation reads.

Shared-prefix packing (`rlvr.models.packing`) and rlvr's decoders (`rlvr.rollout.decoding`)
pass their own ``[B, 1, Q, K]`` masks, which transformers hands to the attention kernel as they
are: the sdpa kernel reads a bool mask (True = attend), while the eager one *adds* the mask to the
scores, so a bool mask there silently adds 1 to visible scores and 0 to hidden ones.
"""

from __future__ import annotations

import torch
from torch import Tensor

CUSTOM_MASK_KERNELS = ("sdpa", "eager")  # flash-attention kernels ignore a 4-D mask


def attention_kernel(model: torch.nn.Module) -> str | None:
    """The attention implementation of ``model`` (through DDP / accelerate wrappers)."""
    inner = getattr(model, "module", model)
    return getattr(getattr(inner, "config", None), "_attn_implementation", None)


def takes_custom_mask(model: torch.nn.Module) -> bool:
    """Whether ``model``'s attention applies a custom 4-D mask (see `model_mask`)."""
    return attention_kernel(model) in CUSTOM_MASK_KERNELS


def model_mask(model: torch.nn.Module, allowed: Tensor) -> Tensor:
    """``allowed`` (bool ``[B, 1, Q, K]``, True where a query may attend to a key) as ``model``'s
    attention reads it: unchanged for sdpa, additive float32 (0 or the most negative float) for
    eager. Every query row must allow at least one key."""
    if attention_kernel(model) == "eager":
        return torch.zeros(allowed.shape, device=allowed.device).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    return allowed


__all__ = ["CUSTOM_MASK_KERNELS", "attention_kernel", "model_mask", "takes_custom_mask"]
