"""Log-probs of given tokens without the full-vocabulary logits of a whole micro-batch.

A causal LM's forward ends with ``logits = lm_head(hidden)``, ``[B, L, V]`` in float32: on a real
vocabulary (SmolLM2: 49,152 tokens) a micro-batch of 32 sequences of 100 tokens holds 630 MB of
logits, as much again for their gradient, and more for the softmax and entropy intermediates.
Training only needs, per scored position, the log-prob of one token (and the entropy). So the
model runs with ``logits_to_keep=1`` (its head on the last position only), its final hidden states
are taken from the backbone's output, and `HeadLogprobs` applies the head in chunks of positions:
forward keeps only the per-position log-sum-exp, backward recomputes each chunk's logits. Peak
memory then grows with the chunk, not with the micro-batch.

Under top-p/top-k sampling the log-probs are those of the truncated, renormalised distribution
(as `rlvr.algos.correction.truncated_logprobs`), chunk by chunk: forward sorts each chunk once to
find each position's smallest kept logit, and backward keeps the logits at or above it. The
entropy is always the untruncated distribution's.

Used where it is exact: the model's logits are ``lm_head(backbone(...).last_hidden_state)`` with
a bias-free head (checked once per model by `head_path`, which compares with the plain forward),
and no autocast (bf16 runs keep the plain path, whose rounding they were measured with).
"""

from __future__ import annotations

import threading

import math
import weakref
from typing import Any, Callable

import torch
from torch import Tensor

CHUNK_TOKENS = 256  # positions per chunk: 256 x 49k float32 = 50 MB of logits at a time
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # unwrapped model -> usable or not


class HeadLogprobs(torch.autograd.Function):
    """``(logp [N], entropy [N])`` of ``targets`` under ``softmax(hidden @ weight.T / temperature)``
    for ``hidden`` ``[N, H]``, ``weight`` ``[V, H]``, in chunks of ``chunk`` positions; with
    ``top_p < 1`` or ``top_k > 0`` the log-probs are under that distribution truncated and
    renormalised (the target always kept), the entropy still the untruncated one's. The entropy is
    differentiable only when ``entropy_grad`` (else returned detached); None when not asked for."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, chunk: int, entropy: bool,
                entropy_grad: bool, top_p: float = 1.0, top_k: int = 0) -> tuple[Tensor, Tensor]:
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        lse = hidden.new_empty(n, dtype=torch.float32)  # of the full distribution
        lse_kept = lse  # of the truncated one (the same tensor when nothing truncates)
        truncating = top_p < 1 or 0 < top_k < weight.shape[0]  # a top_k of the vocabulary or more keeps every token
        cut = lse  # per position, the smallest kept logit (backward then needs no sort)
        if truncating:
            lse_kept, cut = hidden.new_empty(n, dtype=torch.float32), hidden.new_empty(n, dtype=torch.float32)
        ent = hidden.new_zeros(n, dtype=torch.float32)
        for s in range(0, n, chunk):
            z = _chunk_logits(hidden[s: s + chunk], weight, temperature)
            lse[s: s + chunk] = torch.logsumexp(z, -1)
            if truncating:
                cut[s: s + chunk] = _cut(z, top_p, top_k)
                keep = _kept(z, targets[s: s + chunk], cut[s: s + chunk])
                lse_kept[s: s + chunk] = torch.logsumexp(z.masked_fill(~keep, -math.inf), -1)
                del keep
            logp[s: s + chunk] = z.gather(-1, targets[s: s + chunk, None]).squeeze(-1) - lse_kept[s: s + chunk]
            if entropy:
                p = torch.softmax(z, -1)
                ent[s: s + chunk] = lse[s: s + chunk] - (p * z).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse, ent, lse_kept, cut)
        ctx.temperature, ctx.chunk, ctx.entropy_grad = temperature, chunk, entropy and entropy_grad
        ctx.top_p, ctx.top_k = top_p, top_k
        if not ctx.entropy_grad:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx: Any, g_logp: Tensor, g_ent: Tensor | None):
        hidden, weight, targets, lse, ent, lse_kept, cut = ctx.saved_tensors
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        truncating = ctx.top_p < 1 or ctx.top_k > 0
        for s in range(0, hidden.shape[0], ctx.chunk):
            h, rows = hidden[s: s + ctx.chunk], slice(s, s + ctx.chunk)
            if truncating:
                g = _truncated_grad(_chunk_logits(h, weight, ctx.temperature), targets[rows], lse[rows], lse_kept[rows], ent[rows],
                                    g_logp[rows], g_ent[rows] if ctx.entropy_grad and g_ent is not None else None, cut[rows])
            else:
                logp_all = _chunk_logits(h, weight, ctx.temperature).sub_(lse[rows, None])  # in place: two [chunk, V] buffers at most
                g = logp_all.exp()  # p
                if ctx.entropy_grad and g_ent is not None:  # dH/dz = -p (log p + H)
                    logp_all.add_(ent[rows, None]).mul_(g).mul_(g_ent[rows, None])
                    g.mul_(-g_logp[rows, None]).sub_(logp_all)
                else:
                    g.mul_(-g_logp[rows, None])
                del logp_all
                g.scatter_add_(-1, targets[rows, None], g_logp[rows, None])  # d logp_t / dz = onehot(t) - p
            if ctx.temperature not in (0, 1):
                g.div_(ctx.temperature)  # z = logits / temperature
            if grad_hidden is not None:
                grad_hidden[rows] = (g @ weight.float()).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight += g.T @ h.float()
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None, None, None, None, None


def _cut(z: Tensor, top_p: float, top_k: int) -> Tensor:
    """``[n]``: the smallest logit a top-p/top-k sampler may draw from tempered ``z`` ``[n, V]``
    (`rlvr.algos.correction.truncation_keep`; the kept set is every logit at or above it, which
    differs from the sort's choice only between exactly tied logits at the boundary)."""
    from rlvr.algos.correction import truncation_keep

    with torch.no_grad():
        return z.masked_fill(~truncation_keep(z, top_p, top_k, ranked=True), math.inf).amin(-1)  # eager: ranked


def _kept(z: Tensor, targets: Tensor, cut: Tensor) -> Tensor:
    """Bool ``[n, V]``: the logits at or above each position's ``cut``, and each target (it was drawn);
    every logit where the cut is NaN (a NaN logit: the NaN then reaches the log-prob, as untruncated)."""
    return ((z >= cut[:, None]) | cut.isnan()[:, None]).scatter_(-1, targets[:, None], True)


def _truncated_grad(z: Tensor, targets: Tensor, lse: Tensor, lse_kept: Tensor, ent: Tensor, g_logp: Tensor, g_ent: Tensor | None,
                    cut: Tensor) -> Tensor:
    """d/dz of ``g_logp * logp_kept(target) + g_ent * H(full)`` for one chunk ``z`` ``[n, V]``:
    ``onehot(t) - p_kept`` (0 outside the kept set) and ``-p (log p + H)``."""
    keep = _kept(z, targets, cut)
    g = (z - lse_kept[:, None]).exp_().masked_fill_(~keep, 0.0).mul_(-g_logp[:, None])  # -g * p_kept
    del keep
    g.scatter_add_(-1, targets[:, None], g_logp[:, None])
    if g_ent is not None:
        logp_all = z - lse[:, None]
        g.sub_(logp_all.exp() * (logp_all + ent[:, None]) * g_ent[:, None])
    return g


def _chunk_logits(hidden: Tensor, weight: Tensor, temperature: float) -> Tensor:
    z = (hidden @ weight.T).float()
    return z / temperature if temperature not in (0, 1) else z


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


def _parts(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(backbone, head) of a Hugging Face causal LM whose head is a bias-free linear layer."""
    inner = _unwrap(model)
    get_head, get_backbone = getattr(inner, "get_output_embeddings", None), getattr(inner, "get_decoder", None)
    if get_head is None or get_backbone is None:
        return None
    try:
        head, backbone = get_head(), get_backbone()
    except (AttributeError, NotImplementedError):
        return None
    if not isinstance(head, torch.nn.Linear) or head.bias is not None or backbone is None:
        return None
    return backbone, head


def hidden_states(model: torch.nn.Module, **inputs: Any) -> Tensor:
    """The backbone's last hidden states ``[B, L, H]`` from a forward through ``model`` itself (so
    DDP and autocast wrappers run as usual) with its head on the last position only."""
    backbone, _ = _parts(model)  # type: ignore[misc]
    captured: list[Tensor] = []
    me = threading.get_ident()  # another thread's forward through the same backbone (a generation thread) is not ours

    def keep(module: torch.nn.Module, args: Any, out: Any) -> None:
        if threading.get_ident() == me:
            captured.append(out[0] if isinstance(out, tuple) else out.last_hidden_state)

    hook = backbone.register_forward_hook(keep)
    try:
        model(**inputs, logits_to_keep=1)
    finally:
        hook.remove()
    return captured[-1]


def head_path(model: torch.nn.Module, plain: Callable[[], Tensor], chunked: Callable[[], Tensor]) -> bool:
    """Whether `HeadLogprobs` may stand in for ``model``'s plain forward: the model has the parts
    and, the first time, ``chunked()`` equals ``plain()`` (log-probs of the same batch) to 1e-4."""
    inner = _unwrap(model)
    # under autocast (here, or in a forward that mixed precision wrapped) the plain head rounds in bf16
    if any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda")) or hasattr(inner, "_original_forward") or _parts(model) is None:
        return False
    if inner not in _CHECKED:
        try:
            with torch.no_grad():
                _CHECKED[inner] = bool(torch.allclose(plain(), chunked(), atol=1e-4, rtol=0))
        except (TypeError, ValueError, RuntimeError, IndexError):  # a forward without logits_to_keep, an unusual output
            _CHECKED[inner] = False
    return _CHECKED[inner]


def head_logprobs(model: torch.nn.Module, hidden: Tensor, targets: Tensor, temperature: float = 1.0, entropy: bool = False,
                  entropy_grad: bool = False, chunk: int = CHUNK_TOKENS, top_p: float = 1.0, top_k: int = 0) -> tuple[Tensor, Tensor | None]:
    """`HeadLogprobs` with ``model``'s head: ``(logp [N], entropy [N] or None)`` for ``hidden`` ``[N, H]``."""
    _, head = _parts(model)  # type: ignore[misc]
    logp, ent = HeadLogprobs.apply(hidden, head.weight, targets, float(temperature), chunk, entropy, entropy_grad, float(top_p), int(top_k))
    return logp, ent if entropy else None


__all__ = ["CHUNK_TOKENS", "HeadLogprobs", "head_logprobs", "head_path", "hidden_states"]
