"""PPO's critic: a value head on a language-model backbone, as a learned scorer.

`ValueModel` is the backbone of a causal LM (`AutoModel`, i.e. without its LM head) with a linear
head giving one value per position; it starts from the policy's weights or from a saved critic and
keeps separate weights. The `Critic` **scores** a batch (the value of the state before each
completion token, in the trainer's target space) and is **updated** by (clipped) regression on the
GAE returns (`rlvr.algos.value`), with its own optimizer and learning rate through the harness.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from rlvr import UserError
from rlvr.algos.value import clipped_value_loss, explained_variance, value_clip_fraction
from rlvr.models.batch import TokenBatch
from rlvr.train.harness import Harness
from rlvr.train.scorers import ScoringBatch
from rlvr.train.trainable import TrainableModel

HEAD_FILE = "value_head.safetensors"
MARKER_FILE = "rlvr_value_model.json"


class ValueModel(nn.Module):
    """``values = head(backbone(input_ids).last_hidden_state)``: ``[B, L]`` one value per position."""

    def __init__(self, backbone: nn.Module, head: nn.Linear):
        super().__init__()
        self.backbone, self.head = backbone, head
        self._no_split_modules = getattr(backbone, "_no_split_modules", None)  # FSDP shards the backbone's blocks

    @classmethod
    def from_pretrained(cls, path: str, dtype: torch.dtype = torch.float32, trust_remote_code: bool = False, key: str = "algo.critic.init",
                        attn_implementation: str | None = None) -> ValueModel:
        """A saved critic (a folder written by `save_pretrained`), or a fresh zero-initialised
        head on the backbone of the causal LM at ``path`` (on ``attn_implementation``, None:
        transformers' default). Errors name ``key``."""
        from transformers import AutoModel

        from rlvr.models.paths import resolve_model

        path = path if Path(path).is_dir() else resolve_model(path)  # a built-in name or a .gguf file: its converted folder
        try:
            backbone = AutoModel.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation=attn_implementation)
        except (OSError, ValueError) as e:
            raise UserError(f"{key}: cannot load a backbone for the critic from {path!r}: {e}") from e
        hidden = getattr(backbone.config, "hidden_size", None)
        if not isinstance(hidden, int):
            raise UserError(f"{key}: the model at {path!r} ({type(backbone).__name__}) exposes no hidden_size, so it has no hidden states to put a value head on")
        head = nn.Linear(hidden, 1, dtype=dtype)
        saved = Path(path) / HEAD_FILE
        if saved.exists():
            head.load_state_dict(load_file(saved))
        else:  # values start at 0: the first advantages are the plain returns, nothing a random head invents
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)
        return cls(backbone, head)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask)
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None:
            raise UserError(f"algo.critic.init: {type(self.backbone).__name__} returns no last_hidden_state; choose a transformer backbone")
        return self.head(hidden).squeeze(-1).float()

    def save_pretrained(self, directory: Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """The backbone in Hugging Face format plus the head, loadable by `from_pretrained`."""
        directory = Path(directory)
        state_dict = state_dict if state_dict is not None else self.state_dict()
        backbone = {k[len("backbone."):]: v for k, v in state_dict.items() if k.startswith("backbone.")}
        self.backbone.save_pretrained(directory, state_dict=backbone)
        save_file({k[len("head."):]: v.contiguous() for k, v in state_dict.items() if k.startswith("head.")}, directory / HEAD_FILE)
        (directory / MARKER_FILE).write_text(json.dumps({"kind": "rlvr value model", "hidden_size": self.head.in_features}))


def check_tokenizer(critic_source: str, policy_tokenizer, key: str = "algo.critic.init") -> None:
    """A critic must read the policy's tokens: refuse one whose tokenizer has another vocabulary."""
    from transformers import AutoTokenizer

    from rlvr.models.paths import resolve_model

    try:
        theirs = AutoTokenizer.from_pretrained(critic_source if Path(critic_source).is_dir() else resolve_model(critic_source))
    except (OSError, ValueError):
        raise UserError(f"{key}: {critic_source!r} has no tokenizer to compare with the policy's; save it beside the weights") from None
    if theirs.get_vocab() != policy_tokenizer.get_vocab():
        raise UserError(f"{key}: the tokenizer at {critic_source!r} differs from the policy's ({len(theirs)} vs {len(policy_tokenizer)} tokens): "
                        f"the critic would read other tokens than the policy writes; start it from the policy (leave {key} unset)")


@dataclass
class ValueObjective:
    """Token-mean (clipped) value loss over the whole minibatch."""

    model: nn.Module
    batch: TokenBatch
    mask: torch.Tensor  # [B, T]
    old_values: torch.Tensor  # [B, T]
    returns: torch.Tensor  # [B, T]
    clip: float | None
    device: torch.device

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        return self.mask[rows].sum().reshape(1)

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        sub = self.batch.select(rows).to(self.device)
        width = sub.completion_mask.shape[1]
        values = self.model(sub.input_ids, sub.attention_mask)[:, :-1]
        m = self.mask[rows, :width].to(self.device)
        old, ret = self.old_values[rows, :width].to(self.device), self.returns[rows, :width].to(self.device)
        per_token = clipped_value_loss(values, old, ret, self.clip)
        loss = (per_token * m).sum() / totals[0].clamp(min=1)
        n = float(m.sum())
        return loss, {"clip_frac": value_clip_fraction(values.detach(), old, m, self.clip)}, n


class Critic:
    """A `rlvr.train.scorers.LearnedScorer`: scores are values, targets the returns ``[B, T]``.

    Args:
        part: The value model with its optimizer (registered with the harness as ``critic``).
        harness: The run's harness.
        value_clip: PPO's value clipping (None = off).
        micro_batch_size: Sequences per forward/backward.
    """

    def __init__(self, part: TrainableModel, harness: Harness, value_clip: float | None, micro_batch_size: int):
        self.part, self.harness = part, harness
        self.value_clip, self.micro_batch_size = value_clip, micro_batch_size

    @torch.no_grad()
    def score(self, batch: ScoringBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Values ``[B, T]`` of ``batch.rows`` (0 elsewhere): at target position t, the value of the
        state after token t, before the token it predicts."""
        tokens, rows = batch.tokens, batch.rows
        out = torch.zeros_like(tokens.completion_mask)
        model = self.part.model
        was_training = model.training
        model.eval()
        for micro, real in self.harness.micro_batches(rows, self.micro_batch_size, batch.lengths, collective=self.harness.sharded):
            sub = tokens.select(micro).to(self.harness.device)
            values = model(sub.input_ids, sub.attention_mask)[:, :-1]
            if real:
                out[micro, : values.shape[1]] = values.float().cpu()
        model.train(was_training)
        return out, {}

    def update(self, batch: ScoringBatch, targets: torch.Tensor, scores: torch.Tensor | None = None) -> dict[str, float] | None:
        """One optimizer step of the value regression towards the returns ``targets`` (new values
        clipped around ``scores``, the values before the update); ``loss``, ``clip_frac``, ``grad_norm``."""
        old = scores if scores is not None else self.score(batch)[0]
        objective = ValueObjective(self.part.model, batch.tokens, batch.mask, old, targets, self.value_clip, self.harness.device)
        return self.harness.optimizer_step(self.part, batch.rows, objective, self.micro_batch_size, batch.lengths)


def value_metrics(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The critic's quality on a batch, before its update: explained variance and value/return statistics."""
    m = mask.bool()
    v, r = values[m], returns[m]
    if not v.numel():
        return {}
    return {"critic/explained_variance": explained_variance(values, returns, mask),
            "critic/value_mean": float(v.mean()), "critic/return_mean": float(r.mean()),
            "critic/return_std": float(r.std()) if r.numel() > 1 else 0.0,
            "critic/value_error": float((v - r).abs().mean())}
