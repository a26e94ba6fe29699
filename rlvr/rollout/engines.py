"""Rollout engines by name (``rollout.engine``) and the one factory every caller uses:

    engine = make_engine(cfg.rollout, model, tokenizer, model_path=cfg.model.name_or_path)

- ``hf``: the trainer's own model object (nothing to sync), decoded by rlvr's loop or ``generate``
  (``rollout.hf_decode``).
- ``vllm``: vLLM in this process (`rlvr.rollout.vllm_engine`); needs the ``vllm`` package.
- ``vllm_server``: a client of ``rlvr rollout serve`` (`rlvr.rollout.vllm_client`).

Every engine implements `rlvr.rollout.base.RolloutEngine`; the ones with their own copy of the
weights must get ``engine.load_weights(model)`` after every optimizer step, and
`rlvr.rollout.sync.SyncProbe` proves that they did.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from envs.registry import Registry
from rlvr import UserError
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.config import RolloutConfig

ENGINES: Registry = Registry("rollout engine", versioned=False)

def make_engine(cfg: RolloutConfig, model: Any = None, tokenizer: Any = None, *, model_path: str | Path | None = None,
                seed: int = 0, synced: bool = False, private: bool = False) -> RolloutEngine:
    """The engine ``cfg.engine`` names.

    Args:
        cfg: `RolloutConfig` (``engine`` and ``vllm.*``).
        model / tokenizer: The trainer's policy and tokenizer; ``hf`` generates with this very
            model, the vLLM engines start from ``model_path`` (or from a copy of ``model`` saved to
            a temporary directory when there is no path). Either may be None when ``model_path``
            is given: it is then loaded from there.
        model_path: Checkpoint directory (or hub id) of the policy's initial weights.
        seed: Seed of the engine's sampler.
        synced: ``hf`` only: the model is sharded across processes (FSDP), so generation steps in
            lockstep (see `HFGenerateEngine`).
        private: ``hf`` only: generate with a copy of ``model`` that `load_weights` updates, so
            generation may run while the trainer updates ``model`` (the vLLM engines always have
            their own weights).
    """
    if model is None and tokenizer is None and model_path is None:
        raise UserError("make_engine needs a model or a model_path")
    return ENGINES.get(cfg.engine)(cfg, model, tokenizer, None if model_path is None else str(model_path), seed, synced, private)


def has_own_weights(engine: RolloutEngine) -> bool:
    """Whether ``engine`` generates from its own copy of the weights (so it must be synced, and the
    sync can be checked), rather than from the trainer's model object."""
    return getattr(engine, "private", True)


@ENGINES.register("hf")
def _hf(cfg: RolloutConfig, model: Any, tokenizer: Any, model_path: str | None, seed: int, synced: bool, private: bool) -> RolloutEngine:
    """Hugging Face generate on the trainer's model object."""
    from rlvr.models.loading import load_model
    from rlvr.rollout.hf import HFGenerateEngine

    if model is None or tokenizer is None:
        loaded, loaded_tok = load_model(model_path)  # type: ignore[arg-type]
        model = loaded if model is None else model
        tokenizer = loaded_tok if tokenizer is None else tokenizer
    return HFGenerateEngine(model, tokenizer, cfg.max_batch_sequences, synced=synced, private=private, decode=cfg.hf_decode)


@ENGINES.register("vllm")
def _vllm(cfg: RolloutConfig, model: Any, tokenizer: Any, model_path: str | None, seed: int, synced: bool, private: bool) -> RolloutEngine:
    """vLLM in the training process; weights pushed in place."""
    try:
        from rlvr.rollout.vllm_engine import VLLMEngine
        import vllm  # noqa: F401
    except ImportError as e:
        raise UserError(f"rollout.engine=vllm needs the vllm package ({e}): scripts/setup_vllm_env.sh on CPUs, "
                        "pip install -e '.[gpu]' on GPUs") from e
    return VLLMEngine(model_path or _saved_copy(model, tokenizer), tokenizer, cfg.vllm, seed=seed)


@ENGINES.register("vllm_server")
def _vllm_server(cfg: RolloutConfig, model: Any, tokenizer: Any, model_path: str | None, seed: int, synced: bool, private: bool) -> RolloutEngine:
    """Client of `rlvr rollout serve`; weights sent over HTTP or NCCL."""
    from transformers import AutoTokenizer

    from rlvr.rollout.vllm_client import VLLMServerEngine

    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    return VLLMServerEngine(cfg.vllm, tokenizer)


def _saved_copy(model: Any, tokenizer: Any) -> str:
    """A checkpoint directory for an in-memory model (e.g. one built from scratch) that vLLM can start from."""
    if model is None or tokenizer is None:
        raise UserError("rollout.engine=vllm needs model.name_or_path, or the model and tokenizer to save a copy")
    path = tempfile.mkdtemp(prefix="rlvr-vllm-init-")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
