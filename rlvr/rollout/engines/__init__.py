"""Rollout engines by name (``rollout.engine``) and the one factory every caller uses:

    engine = make_engine(cfg.rollout, model, tokenizer, model_path=cfg.model.name_or_path)

- ``hf``: the trainer's own model object (nothing to sync), decoded by one of rlvr's decoders or
  ``generate`` (``rollout.hf.decode``, `rlvr.rollout.decoding`); settings in ``rollout.hf``.
- ``vllm``: vLLM in this process (`rlvr.rollout.engines.vllm`); needs the ``vllm`` package;
  settings in ``rollout.vllm``.
- ``vllm_server``: a client of ``rlvr rollout serve`` (`rlvr.rollout.engines.vllm_server`); settings in
  ``rollout.vllm``.

Every engine is a `rlvr.rollout.base.RolloutEngine` and declares its `EngineCapabilities`; one
with its own copy of the weights gets ``engine.load_weights(model)`` after every optimizer step,
and `rlvr.rollout.sync.SyncProbe` proves that it arrived.

Another package adds an engine by registering an `EngineSpec` under the ``rlvr.engines`` entry-point
group (the entry point is a function that calls ``ENGINES.register(name, EngineSpec(...))``, or the
module that does it on import); ``rollout.engine=NAME`` then builds it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from envs.registry import Registry, RegistryError
from rlvr import UserError
from rlvr.models.paths import resolve_model
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.config import ENGINE_SECTIONS, RolloutConfig


@dataclass(frozen=True)
class EngineRequest:
    """What a factory gets to build an engine.

    Attributes:
        cfg: The run's `RolloutConfig` (the engine reads its own section of it).
        model / tokenizer: The trainer's policy and tokenizer (either may be None when
            ``model_path`` is given: load from there).
        model_path: Checkpoint directory (or hub id) of the policy's initial weights.
        seed: Seed of the engine's sampler.
        sharded: The trainer's model is sharded across processes (FSDP): a forward is a collective.
        concurrent_updates: The trainer updates the weights while the engine generates (overlap):
            an engine that would share the model object must keep its own copy instead.
        device: Where a model loaded from ``model_path`` runs (`rlvr.models.device`: auto, cpu,
            cuda, cuda:N); a model passed in stays where it is.
        dtype: Its precision: auto (the checkpoint's on CUDA, float32 on a CPU), float32, bfloat16, float16.
    """

    cfg: RolloutConfig
    model: Any = None
    tokenizer: Any = None
    model_path: str | None = None
    seed: int = 0
    sharded: bool = False
    concurrent_updates: bool = False
    device: str = "auto"
    dtype: str = "auto"


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine.

    Attributes:
        build: ``build(request) -> RolloutEngine``.
        settings: The section of `RolloutConfig` the engine reads (``"hf"``, ``"vllm"``), or None;
            settings given in another engine's section are refused.
        preflight: ``preflight(cfg)`` checks what the engine needs from outside (e.g. its servers
            answer) before the trainer loads a model; a problem is a one-line `UserError`.
    """

    build: Callable[[EngineRequest], RolloutEngine]
    settings: str | None = None
    preflight: Callable[[RolloutConfig], None] | None = None


ENGINES: Registry = Registry("rollout engine", entry_point_group="rlvr.engines", versioned=False)


def engine_spec(name: str) -> EngineSpec:
    """The `EngineSpec` registered as ``name``; an unknown name is a `UserError` listing the registered ones."""
    try:
        spec = ENGINES.get(name)
    except RegistryError:
        raise UserError(f"rollout.engine={name!r} is not a registered engine; registered: {', '.join(ENGINES.ids())}") from None
    if not isinstance(spec, EngineSpec):
        raise UserError(f"rollout engine {name!r} is registered as {type(spec).__name__}, not an EngineSpec (rlvr.rollout.engines)")
    return spec


def check_engine_settings(cfg: RolloutConfig) -> None:
    """Refuse an unknown ``rollout.engine`` and settings given in another engine's section (e.g.
    ``rollout.vllm.gpu_memory_utilization`` with ``rollout.engine=hf``), naming both."""
    own = engine_spec(cfg.engine).settings
    for section in ENGINE_SECTIONS:
        if section == own:
            continue
        given, default = getattr(cfg, section), type(getattr(cfg, section))()
        changed = [f.name for f in dataclasses.fields(given) if getattr(given, f.name) != getattr(default, f.name)]
        if changed:
            raise UserError(f"rollout.{section}.{changed[0]} is a setting of the {section} engine, but rollout.engine={cfg.engine!r} "
                            f"reads {'rollout.' + own if own else 'no section'}: remove it or set rollout.engine")


def preflight_engine(cfg: RolloutConfig) -> None:
    """The engine's checks of what it needs from outside, before a model is loaded (`EngineSpec.preflight`)."""
    spec = engine_spec(cfg.engine)
    if spec.preflight is not None:
        spec.preflight(cfg)


def make_engine(cfg: RolloutConfig, model: Any = None, tokenizer: Any = None, *, model_path: str | Path | None = None,
                seed: int = 0, sharded: bool = False, concurrent_updates: bool = False, device: str = "auto",
                dtype: str = "auto") -> RolloutEngine:
    """The engine ``cfg.engine`` names (fields as `EngineRequest`)."""
    if model is None and tokenizer is None and model_path is None:
        raise UserError("make_engine needs a model or a model_path")
    check_engine_settings(cfg)
    request = EngineRequest(cfg, model, tokenizer, None if model_path is None else str(model_path), seed, sharded, concurrent_updates,
                            device, dtype)
    return engine_spec(cfg.engine).build(request)


def _hf(request: EngineRequest) -> RolloutEngine:
    from rlvr.models.device import check_fits, inference_dtype, resolve_device
    from rlvr.models.lora import adapter_base, is_adapter_folder
    from rlvr.models.loading import load_model
    from rlvr.rollout.engines.hf import HFGenerateEngine

    model, tokenizer = request.model, request.tokenizer
    if model is None or tokenizer is None:
        device = resolve_device(request.device)
        folder = resolve_model(request.model_path)  # type: ignore[arg-type]
        weights = resolve_model(adapter_base(folder)) if is_adapter_folder(folder) else folder
        dtype = inference_dtype(request.dtype, device, weights)
        check_fits(weights, device, dtype)
        loaded, loaded_tok = load_model(request.model_path, dtype)  # type: ignore[arg-type]
        model = loaded.to(device) if model is None else model
        tokenizer = loaded_tok if tokenizer is None else tokenizer
    hf = request.cfg.hf
    return HFGenerateEngine(model, tokenizer, hf.max_batch_sequences, synced=request.sharded, private=request.concurrent_updates,
                            decode=hf.decode, sync_every=hf.sync_every)


def _vllm(request: EngineRequest) -> RolloutEngine:
    from rlvr.models.lora import is_adapter_folder  # here: checking a config (check_engine_settings) imports no torch

    if request.model_path and is_adapter_folder(request.model_path):  # vLLM loads full weights by name
        raise UserError(f"{request.model_path} holds LoRA adapters, which rollout.engine=vllm cannot load: evaluate the merged model "
                        "(a LoRA run with model.lora.merge_on_save=true writes final/merged/) or use the hf engine")
    try:
        from rlvr.rollout.engines.vllm import VLLMEngine
        import vllm  # noqa: F401
    except ImportError as e:
        raise UserError(f"rollout.engine=vllm needs the vllm package ({e}): scripts/setup_vllm_env.sh on CPUs, "
                        "pip install -e '.[gpu]' on GPUs") from e
    _vllm_device(request.device)
    path = resolve_model(request.model_path) if request.model_path else _saved_copy(request.model, request.tokenizer)
    return VLLMEngine(path, request.tokenizer, request.cfg.vllm, seed=request.seed)


def _vllm_device(device: str) -> None:
    """vLLM in this process runs where torch's current CUDA device is (or on the CPU in a CPU
    build); a device it cannot honour from here is refused rather than ignored."""
    text = device.strip().lower()
    if text in ("auto", "cuda", "cuda:0", "cpu"):
        return
    raise UserError(f"device={device} with rollout.engine=vllm: vLLM in this process uses the first visible GPU; "
                    f"run with CUDA_VISIBLE_DEVICES={text.removeprefix('cuda:')} instead")


def _vllm_server(request: EngineRequest) -> RolloutEngine:
    from transformers import AutoTokenizer

    from rlvr.rollout.engines.vllm_server import VLLMServerEngine

    tokenizer = request.tokenizer if request.tokenizer is not None else AutoTokenizer.from_pretrained(resolve_model(request.model_path))
    return VLLMServerEngine(request.cfg.vllm, tokenizer, seed=request.seed)


def _vllm_servers_answer(cfg: RolloutConfig) -> None:
    from rlvr.rollout.engines.vllm_server import check_servers

    check_servers(cfg.vllm)


ENGINES.register("hf", EngineSpec(_hf, "hf"), description="the trainer's Hugging Face model (rlvr's decoding loop or generate)",
                 source="builtin")
ENGINES.register("vllm", EngineSpec(_vllm, "vllm"), description="vLLM in the training process, weights pushed in place", source="builtin")
ENGINES.register("vllm_server", EngineSpec(_vllm_server, "vllm", _vllm_servers_answer),
                 description="client of one or several `rlvr rollout serve` (vLLM or --engine hf); weights over HTTP or NCCL",
                 source="builtin")


def _saved_copy(model: Any, tokenizer: Any) -> str:
    """A checkpoint directory for an in-memory model (e.g. one built from scratch) that vLLM can start from."""
    if model is None or tokenizer is None:
        raise UserError("rollout.engine=vllm needs model.name_or_path, or the model and tokenizer to save a copy")
    path = tempfile.mkdtemp(prefix="rlvr-vllm-init-")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
