"""Reward shaping and loss masks that depend on how a completion ended (DAPO, Yu et al. 2025).

- `soft_overlong_penalty`: a length penalty that ramps from 0 to ``-factor`` over the last
  ``buffer`` tokens before the length limit, added to the outcome reward;
- `truncation_mask`: leaves completions cut off at the length limit out of the loss ("overlong
  filtering"), so a correct line of reasoning that ran out of room is not punished as wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:
    torch = lazy_module("torch")


def soft_overlong_penalty(lengths: Tensor, max_len: int, buffer: int, factor: float = 1.0) -> Tensor:
    """DAPO's soft overlong punishment, ``[B]`` from completion lengths ``[B]`` in tokens:

    ``0`` if ``len <= max_len - buffer``; ``(max_len - buffer - len) / buffer * factor`` inside the
    buffer; ``-factor`` beyond ``max_len``. ``buffer <= 0`` turns it off (all zeros).
    """
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    lengths = lengths.to(torch.float32)
    start = float(max_len - buffer)
    ramp = (start - lengths) / buffer
    return factor * torch.clamp(ramp, min=-1.0, max=0.0)


def overlong_buffer_tokens(max_len: int, buffer_frac: float) -> int:
    """The buffer in tokens for a fraction of the length limit (DAPO: 4096 of 20480 = 0.2)."""
    return int(round(max_len * buffer_frac))


def truncation_mask(truncated: Tensor, mask: Tensor) -> Tensor:
    """``mask`` ``[B, T]`` with the rows of truncated completions (``truncated`` ``[B]`` bool) zeroed."""
    return mask * (~truncated).to(mask.dtype).unsqueeze(1)
