"""Rollouts with vLLM in the training process (`rollout.engine=vllm`); `rlvr rollout serve` runs
the same engine behind HTTP.

- Log-probs: vLLM reports raw-logit log-probs by default (``logprobs_mode=raw_logprobs``: before
  temperature and top-k/top-p). Importance ratios need the distribution the tokens were drawn
  from, so the engine runs with ``processed_logprobs`` (after temperature, top-k and top-p,
  renormalised over the kept tokens); the trainer matches it with
  `rlvr.algos.correction.truncated_logprobs`. Without truncation it equals Hugging Face's
  ``log_softmax(logits / temperature)``. Prompt log-probs (`score`) are raw in every mode.
- Weight sync: the engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so
  `load_weights` hands tensors to vLLM's own loader by reference (it fuses q/k/v and gate/up), then
  checks that every engine parameter received a value and clears the prefix cache (cached KV
  blocks were computed with the old weights).
- Sleep/wake (GPU builds): `sleep` frees memory; `wake` pushes the last weights again before
  anything is generated, so a wake-up never resumes from stale or discarded weights.
- Tensor parallelism: ``tensor_parallel_size`` is passed through; colocated with ``> 1`` it uses
  vLLM's ``external_launcher`` backend (each torchrun rank holds one shard, ranks grouped by TP).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from rlvr import UserError
from rlvr.rollout.base import EngineCapabilities, SamplingParams
from rlvr.rollout.config import VLLMConfig
from rlvr.rollout.text import end_ids
from rlvr.rollout.engines.token import Sample, TokenEngine
from rlvr.rollout.weights import Weights, WeightSyncError, named_weights, refuse_missing, reiterable


def configure_environment(cfg: VLLMConfig) -> None:
    """Environment vLLM reads when it starts (a value the user set wins)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process: sync by reference
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.kv_cache_gb))  # CPU build only


def _generation_config(model_path: str | Path) -> object:
    """The checkpoint's generation config (its ``eos_token_id`` may list an end of turn), or None."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(str(model_path))
    except (OSError, ValueError):
        return None


def _whole_prefills_on_cpu(model_path: str | Path, cfg: VLLMConfig) -> dict[str, Any]:
    """Settings that keep vLLM's CPU build from splitting a prompt's prefill across scheduler steps.

    After a partial (chunked) prefill vLLM rewinds a seeded request's generator, which a CPU
    generator cannot do ("RuntimeError: CPU Generator does not use offset", vLLM 0.32): every
    seeded batch whose prompts add up to more than the step's token budget crashed, e.g. 128 chat
    prompts of a real model. Whole prefills need a budget of at least the context length."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    from transformers import AutoConfig

    context = cfg.max_model_len or getattr(AutoConfig.from_pretrained(str(model_path)), "max_position_embeddings", 0) or 8192
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(int(context), 8192)}


def _load_into_worker(worker: Any, pairs: Any) -> list[str]:
    """Runs inside each vLLM worker: load ``(name, tensor)`` pairs in place through vLLM's layerwise
    reload (its loader fuses q/k/v and gate/up, then re-runs each layer's post-load processing;
    layers that get no tensors keep theirs) and return the engine parameters that received nothing."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    model = worker.model_runner.get_model()
    with set_current_vllm_config(worker.vllm_config):
        initialize_layerwise_reload(model)
        try:
            loaded = set(model.load_weights(pairs))
        finally:
            finalize_layerwise_reload(model, worker.vllm_config.model_config)
        _reprocess_tied_head(model)
    return sorted(name for name, _ in model.named_parameters() if name not in loaded)


def _reprocess_tied_head(model: Any) -> None:
    """A tied output head receives no tensors of its own, so the layerwise reload skips its post-load
    processing; on CPU that processing packs the weight for the GEMM kernel, and the head would keep
    computing logits from the old embedding (found by the sync probe: a 0.007 mean gap after a sync)."""
    head = getattr(model, "lm_head", None)
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and hasattr(head, "quant_method"):
        head.quant_method.process_weights_after_loading(head)


class VLLMEngine(TokenEngine):
    """`RolloutEngine` over ``vllm.LLM``.

    Args:
        model_path: Hugging Face checkpoint directory (or hub id) the engine starts from.
        tokenizer: The trainer's tokenizer (prompts are tokenized on this side); loaded from
            ``model_path`` when None.
        cfg: `VLLMConfig`.
        seed: Seed of the engine's sampler (calls without their own seed continue it).
        colocated: In the training process (tensor parallelism through ``external_launcher``),
            else a standalone server (vLLM's own workers).
        nccl_weight_transfer: Enable vLLM's NCCL weight-transfer endpoint (server mode on GPUs).
    """

    def __init__(self, model_path: str | Path, tokenizer: PreTrainedTokenizerBase | None, cfg: VLLMConfig, *,
                 seed: int = 0, colocated: bool = True, nccl_weight_transfer: bool = False):
        configure_environment(cfg)
        from vllm import LLM

        self.cfg = cfg
        self.capabilities = EngineCapabilities(own_weights=True, can_sleep=cfg.sleep_level > 0)
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(str(model_path))
        self.end_ids = end_ids(self.tokenizer, _generation_config(model_path))
        kwargs: dict[str, Any] = dict(
            model=str(model_path), dtype=cfg.dtype, seed=seed, enforce_eager=cfg.enforce_eager,
            enable_prefix_caching=cfg.prefix_caching, tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization, logprobs_mode="processed_logprobs",
            max_model_len=cfg.max_model_len or None, enable_sleep_mode=cfg.sleep_level > 0,
        )
        kwargs.update(_whole_prefills_on_cpu(model_path, cfg))
        # the worker runs in this process: weights can be handed over as a lazy iterator, by reference
        self._in_process = os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and (colocated or cfg.tensor_parallel_size == 1)
        if colocated and cfg.tensor_parallel_size > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"
        if nccl_weight_transfer:
            kwargs["weight_transfer_config"] = {"backend": "nccl"}
        try:
            self.llm = LLM(**kwargs)
        except ValueError as e:  # vLLM wraps it in a long pydantic report: keep its sentence
            said = re.search(r"[Ss]leep mode[^.\n]*\.", str(e))
            if cfg.sleep_level > 0 and said:
                raise UserError(f"rollout.vllm.sleep_level={cfg.sleep_level}: vLLM says {said.group(0)!r} "
                                "(set rollout.vllm.sleep_level=0)") from e
            raise
        self.weights_version = 0  # weight updates received so far
        self._source: Weights | None = None  # the last re-readable weights pushed (re-pushed at wake-up)
        self._asleep = False
        self._weights_awake = True
        self._needs_weights = False

    @property
    def vocab_size(self) -> int:
        """Token ids the model takes: ``0 .. vocab_size - 1`` (vLLM's model config)."""
        return int(self._model_config().get_vocab_size())

    @property
    def context_length(self) -> int | None:
        """Longest prompt + completion vLLM takes (``max_model_len``: rollout.vllm.max_model_len or the model's own)."""
        return int(self._model_config().max_model_len)

    def _model_config(self) -> Any:
        """vLLM's ``ModelConfig`` of the served model (on `LLM` in recent releases, on its engine in all)."""
        return getattr(self.llm, "model_config", None) or self.llm.llm_engine.model_config

    # -- generation ---------------------------------------------------------------------------

    def sample_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        self._ready()
        params = [VSampling(
            n=n, temperature=0.0 if sampling.greedy else sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
            max_tokens=sampling.max_new_tokens, logprobs=0,
            # stop strings need vLLM's detokenizer; the stop string's tokens stay in the completion
            detokenize=bool(sampling.stop), stop=list(sampling.stop) or None, include_stop_str_in_output=True,
            stop_token_ids=self.end_ids,  # the chat template's end of turn as well as eos, as the HF engine
            # one seed per prompt: identical prompts in a batch must not get identical samples
            seed=None if sampling.seed is None else sampling.seed * 1_000_003 + i,
        ) for i in range(len(prompt_ids))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], params, use_tqdm=False)
        return [[Sample(list(o.token_ids), [lp[t].logprob for t, lp in zip(o.token_ids, o.logprobs)], o.finish_reason == "length")
                 for o in out.outputs] for out in outs]

    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        self._ready()
        params = VSampling(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p + c) for p, c in zip(prompt_ids, completion_ids)], params, use_tqdm=False)
        return [[out.prompt_logprobs[len(p) + j][t].logprob for j, t in enumerate(c)]
                for out, p, c in zip(outs, prompt_ids, completion_ids)]

    # -- weights ------------------------------------------------------------------------------

    def load_weights(self, model: Weights) -> None:
        """Push the trainer's current weights (a module, a state dict, or ``(name, tensor)`` pairs
        with Hugging Face names) into the engine, in place. Raises `WeightSyncError` when some
        engine parameter received no value (e.g. adapter names that match nothing)."""
        if self._asleep and not self._weights_awake:
            self.llm.wake_up(tags=["weights"])
            self._weights_awake = True
        self.commit_update(self.load_partial(named_weights(model)))
        self._source = model if reiterable(model) else None

    def load_partial(self, pairs: Any) -> set[str]:
        """Load some ``(name, tensor)`` pairs; returns the engine parameters they did not cover.
        A chunked transfer calls this per chunk and `commit_update` with the intersection."""
        try:
            missing = self.llm.collective_rpc(_load_into_worker, args=(pairs if self._in_process else list(pairs),))
        except ValueError as e:  # vLLM's loader names a tensor the model does not have
            raise WeightSyncError(f"the engine refused the weights: {str(e).split('. ')[0]}") from e
        return {name for worker in missing for name in worker}

    def commit_update(self, missing: set[str]) -> None:
        """Finish an update: clear the prefix cache (its KV blocks were computed with the old weights),
        refuse an update that left parameters untouched, count it."""
        self.llm.reset_prefix_cache()
        refuse_missing(missing)
        self.weights_version += 1
        self._needs_weights = False

    # -- sleep / wake ---------------------------------------------------------------------------

    def sleep(self) -> None:
        """Free the engine's memory until `wake` (no-op when ``rollout.vllm.sleep_level`` is 0)."""
        if self.cfg.sleep_level == 0 or self._asleep:
            return
        self.llm.sleep(level=self.cfg.sleep_level)
        self._asleep, self._weights_awake = True, False

    def wake(self) -> None:
        """Take memory back and push the last weights again: level 1 restores the weights saved when
        the engine fell asleep and level 2 kept none, so neither may be trusted after an update."""
        if not self._asleep:
            return
        if not self._weights_awake:
            self.llm.wake_up(tags=["weights"])
            self._weights_awake = True
        if self._source is not None:
            self.commit_update(self.load_partial(named_weights(self._source)))
        elif self.cfg.sleep_level == 2:
            self._needs_weights = True  # the weights were discarded and there is nothing to re-read
        self.llm.wake_up(tags=["kv_cache"])
        self.llm.reset_prefix_cache()
        self._asleep = False

    @property
    def asleep(self) -> bool:
        return self._asleep

    def _ready(self) -> None:
        if self._asleep:
            self.wake()
        if self._needs_weights:
            raise WeightSyncError("the engine woke from level-2 sleep without weights (nothing re-readable was pushed "
                                  "before it slept: no sync yet, or a one-shot iterator): call load_weights(model) first")
