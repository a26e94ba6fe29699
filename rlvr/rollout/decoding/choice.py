"""``rollout.hf.decode=auto``: the decoder picked by measurement, on the run's own model and shapes.

Which decoder is fastest depends on where it runs: on a CPU the compacting ``kv`` loop (few, large
host-side steps) wins; on a GPU a small model's step is bound by kernel launches and host
synchronisation, and the static decoder replayed as a CUDA graph wins. Rather than guess, the engine
measures: at its first generation, each candidate for the model's device that passes its probe
(`rlvr.rollout.decoding.probe.probe_decoder`) decodes the first batch's prompts for a few tokens
(after an untimed warm-up that captures or compiles what it needs), and the fastest is used from then
on. Where the device has one candidate (a CPU: kv) there is nothing to choose: it is probed, not
timed (timing it would cost a prefill of the first batch, about 12 s for a 135M model on one CPU
core, to print a number). rlvr's own decoders (kv, static, cuda_graph, compiled) draw with one counter-based sampler
(`rlvr.rollout.decoding.sampler`): they sample the same tokens from the same logits, so the fastest
of them is taken, whatever the machine's load made it. Hugging Face's ``generate`` samples a
different random stream, so it is chosen only when it is at least `MARGIN` times faster than the
best of them. The random state is restored after measuring: a run samples the same tokens as with
the chosen decoder named outright.
"""

from __future__ import annotations

import math
import reprlib
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from rlvr.rollout.decoding.base import Decoder, DecodeRequest
from rlvr.rollout.decoding.forward import model_device
from rlvr.rollout.decoding.probe import probe_decoder

CANDIDATES: dict[str, tuple[str, ...]] = {
    "cpu": ("kv",),
    "cuda": ("cuda_graph", "static", "kv", "generate"),
}
"""Decoders measured by ``auto``, by device type, the default first. Left out, to be named when
wanted: ``compiled`` (its compilation takes longer than most runs gain from it), ``continuous``
(transformers builds and tears down its scheduler on every call: 12-20 s of overhead per call on a
CPU, measured on a two-layer model), and on a CPU ``generate``: slower there than kv (about half its
tokens/s on the embedded model), and drawing from another random stream, so a measurement that
picked it on a busy machine would change a seeded run's samples. On a CPU ``static`` is left out too:
kv was the faster in most measurements, but not all (a loaded machine measured static 5,793 tokens/s
against kv's 4,941 where the same run idle measured kv 6,451 against 4,534), and although the two
sample the same tokens their log-probs differ in the last bits (other shapes, other summation
order), so a choice that follows the load would make a seeded CPU run's numbers depend on it."""

FALLBACK = ("kv", "generate")
"""Candidates on a device not listed in `CANDIDATES`."""

MARGIN = 1.15
"""How much faster than the best of rlvr's own decoders ``generate`` must be measured to be chosen."""

MEASURE_TOKENS = 16
"""Tokens each candidate decodes in the timed run."""


@dataclass
class DecoderChoice:
    """What ``auto`` measured and chose.

    Attributes:
        name: The chosen decoder.
        device: Where it runs (``cpu``, ``cuda``).
        tokens_per_s: Measured completion tokens per second, by decoder.
        rejected: Decoders that could not run here, with the reason (their probe's).
        shape: ``(rows, prompt tokens of the longest prompt, tokens decoded)`` of the measurement.
        seconds: What probing and measuring took.
        timed: False where the device had one candidate: probed (and taken, if it passed), not timed.
        restored: Chosen by the run before a resume (from its checkpoint), not by this process.
    """

    name: str
    device: str
    tokens_per_s: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    shape: tuple[int, int, int] = (0, 0, 0)
    seconds: float = 0.0
    timed: bool = True
    restored: bool = False

    @classmethod
    def from_dict(cls, saved: Any) -> "DecoderChoice":
        """The choice `as_dict` wrote (a checkpoint, a rollout worker's answer); ValueError, in one line,
        naming the field, for anything else (a damaged or hand-edited checkpoint)."""
        if not isinstance(saved, dict):
            raise ValueError(f"decoder_choice is {type(saved).__name__}, not a mapping")
        name, device = saved.get("name"), saved.get("device")
        if not isinstance(device, str) or not device:
            raise ValueError(f"decoder_choice.device is {_shown(device)}, not a device type such as 'cpu' or 'cuda'")
        candidates = CANDIDATES.get(device, FALLBACK)
        if not isinstance(name, str) or name not in (*candidates, "generate"):  # generate: where every candidate failed its probe
            raise ValueError(f"decoder_choice.name is {_shown(name)}, not a decoder auto chooses on {device[:20]!r} "
                             f"({', '.join(dict.fromkeys((*candidates, 'generate')))})")
        speed, rejected = saved.get("tokens_per_s", {}), saved.get("rejected", {})
        if not isinstance(speed, dict) or not all(k in candidates and _number(v) for k, v in speed.items()):
            raise ValueError(f"decoder_choice.tokens_per_s is {_shown(speed)}, not {device[:20]!r} candidates to numbers")
        if not isinstance(rejected, dict) or not all(k in candidates and _reason(v) for k, v in rejected.items()):
            raise ValueError(f"decoder_choice.rejected is {_shown(rejected)}, not {device[:20]!r} candidates to one-line reasons")
        shape, seconds = saved.get("shape", [0, 0, 0]), saved.get("seconds", 0.0)
        if not isinstance(shape, (list, tuple)) or len(shape) != 3 or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"decoder_choice.shape is {_shown(shape)}, not three counts (rows, prompt tokens, tokens decoded)")
        if not _number(seconds):
            raise ValueError(f"decoder_choice.seconds is {_shown(seconds)}, not a number")
        flags = {key: saved.get(key, default) for key, default in (("timed", True), ("restored", False))}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise ValueError(f"decoder_choice.{key} is {_shown(value)}, not true or false")
        return cls(name, device, {k: float(v) for k, v in speed.items()}, dict(rejected), tuple(shape), float(seconds), **flags)

    @property
    def usable(self) -> list[str]:
        """The candidates whose probe passed."""
        if self.timed:
            return list(self.tokens_per_s)
        return [] if self.rejected else [self.name]  # a rejection: the only candidate failed, `name` is the fallback

    def summary(self) -> str:
        measured = ", ".join(f"{n} {v:,.0f}" for n, v in sorted(self.tokens_per_s.items(), key=lambda kv: -kv[1]))
        rows, width, tokens = self.shape
        chosen = f"decoder: {self.name} on {self.device}" + (", chosen before the resume" if self.restored else "")
        if not self.timed:
            text = chosen if self.rejected else f"{chosen} (the only candidate there: not timed)"
        else:
            text = f"{chosen} (tokens/s over {rows} rows x {tokens} tokens after prompts of up to {width}: {measured})"
        if self.rejected:
            text += "; not usable here: " + "; ".join(f"{n} ({why})" for n, why in self.rejected.items())
        return text

    def as_dict(self) -> dict:
        return {"name": self.name, "device": self.device, "tokens_per_s": dict(self.tokens_per_s), "rejected": dict(self.rejected),
                "shape": list(self.shape), "seconds": self.seconds, "timed": self.timed, "restored": self.restored}


def _shown(value: Any) -> str:
    """A damaged value, short and on one line (reprlib: bounded depth and length, whatever it holds)."""
    text = reprlib.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _reason(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 500 and "\n" not in value and "\r" not in value


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(decoder: Decoder, model: torch.nn.Module, request: DecodeRequest) -> float:
    """Completion tokens per second of ``decoder`` on ``request`` (after an untimed warm-up of the
    same shape for a decoder that captures or compiles: that is paid once per run, not per batch)."""
    device = model_device(model)
    if decoder.warms_up:
        decoder.decode(model, request)
    _synchronize(device)
    t0 = time.perf_counter()
    out = decoder.decode(model, request)
    _synchronize(device)
    wall = time.perf_counter() - t0
    return float(out.lengths.sum()) / max(wall, 1e-9)


def choose_decoder(get: Callable[[str], Decoder], model: torch.nn.Module, request: DecodeRequest,
                   candidates: tuple[str, ...] | None = None) -> DecoderChoice:
    """Probe and time each candidate for ``model``'s device on ``request``'s prompts (decoding
    `MEASURE_TOKENS` tokens) and choose (module docstring); a sole candidate is probed only. ``get(name)`` is the engine's instance
    of a decoder. The random state is left as it was."""
    started = time.perf_counter()
    device = model_device(model)
    names = candidates or CANDIDATES.get(device.type, FALLBACK)
    choice = DecoderChoice(name="generate", device=device.type,
                           shape=(len(request.prompts), max(len(p) for p in request.prompts), min(request.max_new_tokens, MEASURE_TOKENS)))
    timed = replace(request, max_new_tokens=min(request.max_new_tokens, MEASURE_TOKENS))
    saved = torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)
    was_training = model.training
    model.eval()
    try:
        for name in names:
            decoder = get(name)
            problem = probe_decoder(decoder, model)
            if len(names) == 1:  # nothing to choose between: probed, not timed
                choice.timed = False
                if problem is None:
                    choice.name = name
            elif problem is None:
                try:
                    choice.tokens_per_s[name] = measure(decoder, model, timed)
                except Exception as e:  # noqa: BLE001 - a decoder that fails here is not chosen
                    problem = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            if problem is not None:
                choice.rejected[name] = problem[:300]  # one line, short: it is printed, and checkpointed
                decoder.release()
    finally:
        model.train(was_training)
        torch.set_rng_state(saved[0])
        if saved[1] is not None:
            torch.cuda.set_rng_state(saved[1], device)
    if choice.tokens_per_s:
        speed = choice.tokens_per_s
        fastest = max(speed, key=speed.__getitem__)
        own = [n for n in speed if get(n).rlvr_sampler]
        best_own = max(own, key=speed.__getitem__) if own else None
        choice.name = fastest if best_own is None or speed[fastest] >= MARGIN * speed[best_own] else best_own
    for name in choice.tokens_per_s:
        if name != choice.name:
            get(name).release()  # graphs and buffers of decoders not chosen
    choice.seconds = time.perf_counter() - started
    return choice
