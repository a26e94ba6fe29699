"""Weights on their way from the trainer to an engine: what a sync accepts and how it travels.

A sync takes an ``nn.Module`` (its parameters, by Hugging Face name), a state dict, or any
iterable of ``(name, tensor)`` pairs (e.g. full tensors gathered one by one from a sharded model).
Over HTTP the pairs travel as safetensors blobs of bounded size.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping, Union

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

Weights = Union[torch.nn.Module, Mapping[str, torch.Tensor], Iterable[tuple[str, torch.Tensor]]]

# wrappers that prefix parameter names: DDP / accelerate (module.), torch.compile (_orig_mod.)
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


class WeightSyncError(RuntimeError):
    """The engine does not generate with the trainer's weights; the message says what failed."""


def refuse_missing(missing: set[str]) -> None:
    """Raise `WeightSyncError` naming the engine parameters an update left without new values (if any)."""
    if missing:
        gaps = sorted(missing)
        shown = ", ".join(gaps[:5]) + (f" and {len(gaps) - 5} more" if len(gaps) > 5 else "")
        raise WeightSyncError(f"weight sync left {len(gaps)} engine parameter(s) without new values ({shown}): "
                              "send every parameter of the policy, with the checkpoint's names")


def named_weights(weights: Weights) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs of a module, a state dict or an iterable of pairs, detached, with
    wrapper prefixes removed so that names match the checkpoint the engine was started from."""
    if isinstance(weights, torch.nn.Module):
        pairs: Iterable[tuple[str, torch.Tensor]] = weights.named_parameters()
    elif isinstance(weights, Mapping):
        pairs = weights.items()
    else:
        pairs = weights
    for name, tensor in pairs:
        while name.startswith(_WRAPPER_PREFIXES):
            name = name.split(".", 1)[1]
        yield name, tensor.detach()


def payload_bytes(weights: Weights) -> int | None:
    """Bytes of tensor data a sync of ``weights`` moves (None for a one-shot iterator)."""
    if isinstance(weights, torch.nn.Module):
        return sum(p.numel() * p.element_size() for p in weights.parameters())
    if hasattr(weights, "nbytes"):
        return int(weights.nbytes)
    if isinstance(weights, Mapping):
        return sum(t.numel() * t.element_size() for t in weights.values())
    return None


def reiterable(weights: Weights) -> bool:
    """Whether the same weights can be read again later (a module or a mapping, not a one-shot iterator)."""
    return isinstance(weights, (torch.nn.Module, Mapping))


def layer_key(name: str) -> str:
    """The name up to its first numeric segment (``model.layers.3``): the unit a chunk must not split,
    because an engine fuses a layer's tensors (q/k/v, gate/up) and processes the layer once all arrived."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return name


def to_blobs(pairs: Iterable[tuple[str, torch.Tensor]], max_bytes: int) -> Iterator[bytes]:
    """safetensors blobs of about ``max_bytes`` of tensor data each, cut only between layers
    (a layer larger than ``max_bytes`` travels whole in one blob)."""
    chunk: dict[str, torch.Tensor] = {}
    size, last_key = 0, None
    for name, tensor in pairs:
        key = layer_key(name)
        if chunk and size >= max_bytes and key != last_key:
            yield st_save(chunk)
            chunk, size = {}, 0
        t = tensor.to("cpu").contiguous()
        chunk[name] = t
        size += t.numel() * t.element_size()
        last_key = key
    if chunk:
        yield st_save(chunk)


def from_blob(blob: bytes) -> list[tuple[str, torch.Tensor]]:
    """The pairs of one safetensors blob."""
    return list(st_load(blob).items())
