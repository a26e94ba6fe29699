"""The embedded base model: a tiny Llama-architecture causal LM built from a config, no download.

It is an ordinary transformers model: it saves with ``save_pretrained`` and reloads with
``AutoModelForCausalLM.from_pretrained``, so every code path that runs on it runs on any Hugging
Face model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlvr.config import help_field


@dataclass
class TinyModelConfig:
    """Architecture of the embedded model.

    Attributes:
        hidden_size: Width of the residual stream.
        layers: Number of transformer blocks.
        heads: Attention heads (head size = hidden_size / heads).
        intermediate_size: Width of the MLP.
        max_positions: Longest sequence (prompt + completion) in tokens.
        seed: Initialisation seed.
    """

    hidden_size: int = help_field(256, "Width of the residual stream (a multiple of heads)", gt=0)
    layers: int = help_field(4, "Number of transformer blocks", gt=0)
    heads: int = help_field(4, "Attention heads (head size = hidden_size / heads)", gt=0)
    intermediate_size: int = help_field(768, "Width of the MLP", gt=0)
    max_positions: int = help_field(256, "Longest sequence (prompt + completion) in tokens", gt=0)
    seed: int = help_field(0, "Initialisation seed", ge=0, le=2**32 - 1)

    def __post_init__(self) -> None:
        if isinstance(self.hidden_size, int) and isinstance(self.heads, int) and self.heads > 0 and self.hidden_size % self.heads:
            raise ValueError(f"tiny.hidden_size ({self.hidden_size}) must be a multiple of tiny.heads ({self.heads})")


def build_tiny_model(cfg: TinyModelConfig, out_dir: str | Path) -> Path:
    """Create a randomly initialised tiny model and its tokenizer in ``out_dir`` (HF format)."""
    import torch  # here, not above: TinyModelConfig is part of the sft config, read without torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.models.tokenizer import build_byte_tokenizer

    tokenizer = build_byte_tokenizer()
    torch.manual_seed(cfg.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
