"""LoRA adapters on a causal LM, built on `peft` (``model.lora.*``).

`apply_lora` injects adapters into a loaded model *in place* and returns the same
``transformers`` model object: every other part of rlvr (decoding loop, packing, chunked head,
engines) keeps seeing a plain causal LM, and only the adapter parameters require gradients. The
`peft.PeftModel` that owns the adapters rides on the model (`adapters_of`), for what only it can do:
run the base weights (`base_view`, the reference for free), save the adapters, merge them.
"""

from __future__ import annotations

import copy
import warnings
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Iterator

import torch

from rlvr import UserError
from rlvr.models.lora_settings import LoraSettings

_HANDLE = "_rlvr_lora"  # the PeftModel, kept in the model's __dict__ (not a submodule: no duplicate parameters)

# Attention and MLP projections of Llama-style decoders (the embedded tiny model is a Llama); other
# architectures get peft's "all-linear" (every linear layer but the output head).
DEFAULT_TARGETS: dict[str, list[str]] = {
    arch: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    for arch in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2", "smollm3")
}


def default_targets(model: torch.nn.Module) -> list[str] | str:
    return DEFAULT_TARGETS.get(getattr(getattr(model, "config", None), "model_type", ""), "all-linear")


def _linear_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of ``model``'s linear layers (what ``target_modules`` can match)."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


@contextmanager
def _peft_calls() -> Iterator[None]:
    """Around rlvr's calls into peft: peft reads transformers' deprecated ``is_gradient_checkpointing``, a
    FutureWarning (transformers 5) in every LoRA run's log that no setting of the user's can change."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def apply_lora(model: torch.nn.Module, settings: LoraSettings, base: str | None = None) -> torch.nn.Module:
    """Inject ``settings``' adapters into ``model`` (in place; its base weights frozen) and return it.
    ``base``: where the base weights were loaded from, recorded in the saved adapters' config (so
    an adapter folder loads on its own: `rlvr.models.loading.load_model`)."""
    from peft import LoraConfig, get_peft_model

    targets = settings.target_modules or default_targets(model)
    if isinstance(targets, list):
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        missing = [t for t in targets if t not in present]
        if len(missing) == len(targets):  # peft would raise a long message; say what exists
            raise UserError(f"model.lora.target_modules={targets} match no module of this model; its linear layers are named: "
                            f"{', '.join(_linear_names(model))}")
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout, target_modules=targets,
                        modules_to_save=list(settings.modules_to_save) or None, bias="none", task_type="CAUSAL_LM")
    with _peft_calls():
        peft_model = get_peft_model(model, config)
    if base is not None:
        peft_model.peft_config["default"].base_model_name_or_path = base
    return _attach(peft_model)


def load_adapters(model: torch.nn.Module, directory: str | Path) -> torch.nn.Module:
    """``model`` (the base) with the trainable adapters saved in ``directory`` (a checkpoint's ``policy/``)."""
    from peft import PeftModel

    with _peft_calls():
        return _attach(PeftModel.from_pretrained(model, str(directory), is_trainable=True))


def _attach(peft_model: Any) -> torch.nn.Module:
    inner = peft_model.get_base_model()
    object.__setattr__(inner, _HANDLE, peft_model)
    return inner


def adapters_of(model: torch.nn.Module) -> Any | None:
    """The `peft.PeftModel` owning ``model``'s adapters (through accelerate/DDP wrappers), or None."""
    return getattr(getattr(model, "module", model), "__dict__", {}).get(_HANDLE)


def is_adapter_folder(directory: str | Path) -> bool:
    return (Path(directory) / "adapter_config.json").is_file()


def adapter_base(directory: str | Path) -> str:
    """The base model an adapter folder was trained on (``base_model_name_or_path`` of its config)."""
    import json

    base = json.loads((Path(directory) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base:
        raise UserError(f"{directory} holds LoRA adapters but its adapter_config.json names no base model (base_model_name_or_path)")
    return base


def merged_from_folder(model: torch.nn.Module, directory: str | Path) -> torch.nn.Module:
    """``model`` (the base) with the adapters in ``directory`` merged into its weights: a plain model."""
    from peft import PeftModel

    with _peft_calls():
        return PeftModel.from_pretrained(model, str(directory)).merge_and_unload()


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """Trainable and frozen parameter counts (each parameter once)."""
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    return {"trainable_parameters": trainable, "frozen_parameters": sum(p.numel() for p in params) - trainable}


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` on its base weights: peft's ``disable_adapter()``, in eval mode (as a separately
    loaded frozen base would be), restoring the mode after."""
    handle, inner = adapters_of(model), getattr(model, "module", model)
    was_training = inner.training
    inner.eval()
    try:
        with handle.disable_adapter():
            yield
    finally:
        inner.train(was_training)


class BaseView(torch.nn.Module):
    """The base weights of a LoRA model as a frozen model of their own, without a copy: each forward
    runs the shared model with its adapters disabled. Not thread-safe against training the same
    model (the adapters are switched off for everyone during the forward)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        object.__setattr__(self, "shared", model)  # not a submodule: .eval()/.requires_grad_() here must not touch the policy

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with adapters_disabled(self.shared):
            return self.shared(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # config, get_decoder, get_output_embeddings: the shared model's
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["shared"], name)


def base_view(model: torch.nn.Module) -> BaseView:
    return BaseView(model)


def shares_weights(model: torch.nn.Module | None) -> bool:
    """Whether ``model`` is a `BaseView` (it runs on another model's module)."""
    return isinstance(model, BaseView)


def save_adapters(model: torch.nn.Module, directory: Path) -> None:
    """The adapters (and ``modules_to_save``) of ``model`` in peft's folder format, not the base."""
    adapters_of(model).save_pretrained(directory)


def check_mergeable(model: torch.nn.Module, source: str) -> None:
    """Refuse a merged export of a quantised base (``model.lora.merge_on_save``): transformers marks
    a model it loaded quantised (``is_quantized``, ``config.quantization_config``), and adding the
    adapters' small updates to its rounded weights would lose them in the rounding."""
    method = getattr(getattr(model, "config", None), "quantization_config", None)
    if getattr(model, "is_quantized", False) or method is not None:
        name = method.get("quant_method") if isinstance(method, dict) else getattr(method, "quant_method", method)
        raise UserError(f"model.lora.merge_on_save with a quantised base ({source}: {name}): merging the adapters into quantised "
                        "weights would round their update away; keep the adapters (final/) and merge them into the "
                        "full-precision base, or set model.lora.merge_on_save=false")


def save_merged(model: torch.nn.Module, directory: Path) -> None:
    """``model`` with its adapters merged into the base weights, as a plain Hugging Face model (a copy
    is merged: the live model keeps training its adapters)."""
    merged = copy.deepcopy(adapters_of(model)).merge_and_unload()
    merged.__dict__.pop(_HANDLE, None)
    merged.save_pretrained(directory)


class MergedWeights(Mapping[str, torch.Tensor]):
    """A LoRA model's weights as the plain model would hold them: each adapted layer's ``W + (alpha/r)
    B A`` and each ``modules_to_save`` module's trained copy, under the base model's Hugging Face
    names, merged when read (one tensor at a time; the live model is untouched).

    What a weight sync sends to an engine that holds its own plain copy (vLLM): re-readable, so a
    woken engine can take the current values again. Every parameter is included, so the sync is as
    large as a full one.
    """

    def __init__(self, model: torch.nn.Module):
        from peft.tuners.lora import LoraLayer

        self.inner = getattr(model, "module", model)
        self.lora_layers = {name: m for name, m in self.inner.named_modules() if isinstance(m, LoraLayer)}
        self.params = dict(self.inner.named_parameters())
        self.names: dict[str, str] = {}  # plain name -> the parameter holding its value
        for name in self.params:
            if ".lora_" in name or ".original_module." in name:  # adapter factors; modules_to_save's frozen original
                continue
            self.names[name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")] = name

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    @property
    def nbytes(self) -> int:
        """What reading every value moves (a merged weight has its base weight's size), without merging."""
        return sum(self.params[n].numel() * self.params[n].element_size() for n in self.names.values())

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, plain: str) -> torch.Tensor:
        name = self.names[plain]
        value = self.params[name].detach()
        layer, _, leaf = name.rpartition(".base_layer.")
        if layer in self.lora_layers and leaf == "weight":
            module = self.lora_layers[layer]
            with torch.no_grad():
                for adapter in module.active_adapters:
                    value = value + module.get_delta_weight(adapter).to(value.dtype)
        return value


__all__ = ["DEFAULT_TARGETS", "BaseView", "MergedWeights", "LoraSettings", "adapters_disabled", "adapters_of", "apply_lora", "base_view", "default_targets",
           "adapter_base", "check_mergeable", "is_adapter_folder", "load_adapters", "merged_from_folder", "parameter_counts", "save_adapters", "save_merged", "shares_weights"]
