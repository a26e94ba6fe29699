"""The check a decoder passes on the run's own model before it is used.

rlvr's own decoders drive the model through internals of transformers (a duck-typed cache, custom
4-D masks, explicit positions); a release that changes how a model calls its cache (5.24 renamed the
argument and passed ``kwargs=`` to ``update``), a model class that computes something else, or a
device where capture fails must degrade to another decoder instead of crashing mid-run or, worse,
sampling from wrong log-probs.
"""

from __future__ import annotations

import torch

from rlvr.rollout.decoding.base import Decoder, DecodeRequest
from rlvr.rollout.decoding.forward import full_precision, model_device

PROBE_TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6}  # largest log-prob gap; half precisions: HALF_TOLERANCE
HALF_TOLERANCE = 0.1


def probe_decoder(decoder: Decoder, model: torch.nn.Module) -> str | None:
    """Greedy-decode three tokens after two left-padded prompts of different lengths with
    ``decoder`` and compare each token's log-prob with a plain forward over the whole sequence (no
    cache, no custom mask). Returns None when they agree, else what went wrong (the reason the
    decoder cannot run the model, an exception, or the gap). Leaves the random state as it was."""
    reason = decoder.unsupported(model)
    if reason is not None:
        return reason
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    if vocab < 8:
        return f"vocab_size {vocab} is too small to probe"
    prompts = [[(3 + 5 * i) % vocab for i in range(6)], [(7 + 11 * i) % vocab for i in range(3)]]
    was_training = model.training
    model.eval()
    device = model_device(model)
    rng = torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)
    try:
        out = decoder.decode(model, DecodeRequest(prompts, max_new_tokens=3, eos_ids=(), pad_id=0, greedy=True))
        with torch.inference_mode():
            gaps = []
            for row, prompt in enumerate(prompts):
                seq = torch.tensor([prompt + out.tokens[row].tolist()], device=device)
                logits = full_precision(model)(input_ids=seq).logits[0, len(prompt) - 1: -1].float()
                expected = torch.log_softmax(logits, -1).gather(-1, seq[0, len(prompt):].unsqueeze(-1)).squeeze(-1)
                gaps.append(float((expected.cpu() - out.logprobs[row]).abs().max()))
    except Exception as e:  # noqa: BLE001 - any failure means: do not use this decoder
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    finally:
        model.train(was_training)
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state(rng[1], device)
    dtype = next(model.parameters()).dtype
    tolerance = PROBE_TOLERANCE.get(dtype, HALF_TOLERANCE)
    gap = max(gaps)
    return None if gap <= tolerance else f"its log-probs differ from a plain forward's by {gap:.3g} (tolerance {tolerance:g})"
