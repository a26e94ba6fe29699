"""Load any causal LM and its tokenizer by Hugging Face id or local path (the embedded model too)."""

from __future__ import annotations

import warnings

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlvr import UserError
from rlvr.models.lora import adapter_base, is_adapter_folder, merged_from_folder
from rlvr.models.paths import resolve_model

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

_PAD_NOTED: set[str] = set()
"""Models whose missing pad token was already reported in this process."""


def load_model(name_or_path: str, dtype: str = "float32", trust_remote_code: bool = False,
               attn_implementation: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` from a local directory, a ``.gguf`` file, a built-in name (both
    converted once, `rlvr.models.sources`) or a hub id (hub only when online), on
    ``attn_implementation`` (None: transformers' default). A folder of LoRA adapters (a LoRA run's
    ``final/``) loads as its base model with the adapters merged, and the folder's tokenizer. A
    tokenizer without a pad token pads with its eos token (said once per model and process)."""
    if dtype not in DTYPES:
        raise UserError(f"model.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if is_adapter_folder(name_or_path):
        model, _ = load_model(adapter_base(name_or_path), dtype, trust_remote_code, attn_implementation)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        if tokenizer.pad_token_id is None:
            use_eos_for_padding(tokenizer, name_or_path)
        return merged_from_folder(model, name_or_path), tokenizer
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
        use_eos_for_padding(tokenizer, name_or_path)
    return model, tokenizer


def use_eos_for_padding(tokenizer: PreTrainedTokenizerBase, name: str) -> None:
    """Pad with the eos token when the tokenizer has no pad token, and say so once per model:
    padding is masked out of every loss and log-prob, so the choice of token does not change
    results, but a reader comparing token ids should know. `UserError` when there is no eos either."""
    if tokenizer.eos_token is None:
        raise UserError(f"the tokenizer of {name!r} has neither a pad nor an eos token: rlvr needs one to pad batches "
                        "and end completions; add an eos_token to its tokenizer_config.json")
    tokenizer.pad_token = tokenizer.eos_token
    if name not in _PAD_NOTED:
        _PAD_NOTED.add(name)
        warnings.warn(f"the tokenizer of {name!r} has no pad token: padding with its eos token {tokenizer.eos_token!r} "
                      f"(id {tokenizer.eos_token_id})", UserWarning, stacklevel=3)
