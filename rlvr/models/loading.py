"""Load any causal LM and its tokenizer by Hugging Face id or local path (the embedded model too)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlvr import UserError
from rlvr.models.paths import resolve_model

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model(name_or_path: str, dtype: str = "float32", trust_remote_code: bool = False,
               attn_implementation: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` from a local directory or a hub id (hub only when online), on
    ``attn_implementation`` (None: transformers' default)."""
    if dtype not in DTYPES:
        raise UserError(f"model.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    source = resolve_model(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code,
                                                     attn_implementation=attn_implementation)
    except (ValueError, ImportError) as e:  # an unknown kernel, or one whose package is missing
        if attn_implementation is None or (isinstance(e, ValueError) and "attn_implementation" not in str(e)):
            raise
        raise UserError(f"model.attn_implementation={attn_implementation!r} cannot be used with {name_or_path!r}: {str(e).strip().splitlines()[0]}") from None
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"could not load model {name_or_path!r}: {first}") from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


