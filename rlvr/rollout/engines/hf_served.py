"""rlvr's Hugging Face engine as the engine of `rlvr rollout serve --engine hf`: token ids in, samples
with their log-probs out, weights taken in chunks, so a trainer with ``rollout.engine=vllm_server``
runs the same topology where vLLM does not (any CPU, any GPU torch supports).

The server owns this model: nothing is shared with a trainer, every update arrives over HTTP and
is counted (``weights_version``) as vLLM's server counts them. Sampling is seeded per request (the
trainer sends a seed with every call), so a batch does not depend on which server drew it.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from rlvr.rollout.base import EngineCapabilities, SamplingParams
from rlvr.rollout.config import HFEngineConfig, RolloutConfig
from rlvr.rollout.engines.token import Sample
from rlvr.rollout.weights import WeightSyncError, refuse_missing


class ServedHFEngine:
    """`rlvr.rollout.engines.hf.HFGenerateEngine` on a model loaded from ``model_path``, with the
    surface `rlvr.rollout.engines.serve.RolloutService` drives (the same as `VLLMEngine`'s).

    Args:
        model_path: Checkpoint directory (or a built-in / hub name) the engine starts from.
        cfg: ``rollout.hf`` settings (decoder, batch size).
        device / dtype: Where and in which precision the model runs (`rlvr.models.device`).
    """

    def __init__(self, model_path: str, cfg: HFEngineConfig, device: str = "auto", dtype: str = "auto"):
        from rlvr.rollout.engines import make_engine

        self.engine = make_engine(RolloutConfig(engine="hf", hf=cfg), model_path=model_path, device=device, dtype=dtype)
        self.engine.model.requires_grad_(False)
        self.tokenizer = self.engine.tokenizer
        self.capabilities = EngineCapabilities(own_weights=True)
        self.weights_version = 0  # weight updates received so far
        self.asleep = False
        model = self.engine.model
        self._targets = model.state_dict(keep_vars=True)  # every name a checkpoint may use, tied aliases included
        self._required = {name: id(p) for name, p in model.named_parameters()}

    @property
    def vocab_size(self) -> int:
        """Rows of the model's input embedding: the token ids it takes are ``0 .. vocab_size - 1``."""
        return self.engine.model.get_input_embeddings().num_embeddings

    @property
    def context_length(self) -> int | None:
        """Longest prompt + completion the model was built for (None: its config does not say)."""
        return self.engine.context_length

    def sample_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        rows: list[list[Sample]] = [[] for _ in prompt_ids]
        for c in self.engine.generate_ids(prompt_ids, n, sampling):
            rows[c.prompt_index].append(Sample(c.token_ids, c.logprobs, c.truncated))
        return rows

    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        with torch.inference_mode():
            return self.engine.score(prompt_ids, completion_ids)

    def load_partial(self, pairs: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy ``(name, tensor)`` pairs into the model in place (a captured decoding step keeps
        reading them where they are); returns the model's parameters they did not cover."""
        covered: set[int] = set()
        with torch.no_grad():
            for name, tensor in pairs:
                target = self._targets.get(name)
                if target is None:
                    raise WeightSyncError(f"the engine has no parameter {name!r}: send the policy's weights with the checkpoint's names")
                if tuple(target.shape) != tuple(tensor.shape):
                    raise WeightSyncError(f"{name}: shape {tuple(tensor.shape)} sent, the engine's is {tuple(target.shape)}")
                target.copy_(tensor)
                covered.add(id(target))
        return {name for name, ident in self._required.items() if ident not in covered}

    def commit_update(self, missing: set[str]) -> None:
        """Finish an update: refuse one that left parameters untouched, count it."""
        refuse_missing(missing)
        self.weights_version += 1

    def sleep(self) -> None:
        """Nothing to free: a Hugging Face server keeps its model (rollout.vllm.sleep_level is vLLM's)."""

    def wake(self) -> None:
        """Nothing to restore (see `sleep`)."""

    def describe(self) -> dict[str, Any]:
        return self.engine.describe()
