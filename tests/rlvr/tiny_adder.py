"""A tiny Llama taught for two seconds to write sums and stop: what engine tests generate with. A
fresh init only repeats one token, which would leave eos, stop strings and rows ending at different
steps untested."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from rlvr.models.loading import load_model
from rlvr.models.tiny import TinyModelConfig, build_tiny_model

PROMPTS = ["Compute 4+8.\n", "Compute 12+95.\n", "Compute 60+18.\n", "Compute 7+"]


def train_adder(out: Path, *, heads: int = 4, steps: int = 120, save: bool = False):
    """``(model, tokenizer)`` after ``steps`` Adam steps on ``Compute a+b.\\na+b=c</s>``; with
    ``save`` the trained weights are written back to ``out`` (for engines that load a path)."""
    torch.manual_seed(0)
    path = build_tiny_model(TinyModelConfig(hidden_size=64, layers=2, heads=heads, intermediate_size=128, seed=5), out)
    model, tok = load_model(str(path))
    rng = random.Random(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        sums = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(32)]
        enc = tok([f"Compute {a}+{b}.\n{a}+{b}={a + b}{tok.eos_token}" for a, b in sums], return_tensors="pt", padding=True)
        model(**enc, labels=enc.input_ids.masked_fill(enc.attention_mask == 0, -100)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if save:
        model.save_pretrained(path)
        tok.save_pretrained(path)
    return model.eval(), tok
