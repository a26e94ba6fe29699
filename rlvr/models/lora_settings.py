"""The LoRA settings of a config (``model.lora.*``), apart from `rlvr.models.lora` so that reading
and checking a config imports neither torch nor peft."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config import help_field


@dataclass
class LoraSettings:
    """Low-rank adapters instead of full fine-tuning (`model.lora.*`; off while ``r`` is 0)."""

    r: int = help_field(0, "Adapter rank (0 = off: full fine-tuning). Adapters usually want a ~10x larger optim.lr than full fine-tuning", ge=0, le=65536)
    alpha: float = help_field(32.0, "Scaling numerator: the update is (alpha / r) * B @ A", gt=0)
    dropout: float = help_field(0.0, "Dropout on the adapter's input", ge=0, lt=1)
    target_modules: list[str] | None = help_field(None, "Module names (suffixes) that get adapters; None = the architecture's default "
                                                        "(attention and MLP projections for Llama-style models, else every linear layer but the head)")
    modules_to_save: list[str] = help_field([], "Modules trained in full beside the adapters and saved with them (e.g. lm_head)")
    merge_on_save: bool = help_field(False, "Also write the final model merged (final/merged/, a plain Hugging Face model) beside the adapters (final/)")

    @property
    def enabled(self) -> bool:
        return self.r > 0
