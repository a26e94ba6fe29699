"""How a task's prompt is shown to the model (``prompt.*``): as plain text, or for a chat model as
a user message, with an optional system message and the environment's answer-format instruction,
rendered by the tokenizer's chat template.

A pretrained chat model given a plain-text prompt often answers with its end-of-turn token at once
(SmolLM2-135M-Instruct: every completion empty). ``prompt.format=auto`` (the default) therefore
uses the chat template whenever the tokenizer has one of its own; rlvr's embedded byte tokenizer
carries a minimal template only so that message prompts render, and its models are trained on plain
text, so it stays ``raw``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from envs.base import Environment
from envs.types import Message, Problem
from rlvr import UserError
from rlvr.config import help_field


@dataclass
class PromptConfig:
    """How prompts are shown to the model (``prompt.*``)."""

    format: Literal["auto", "chat", "raw"] = help_field(
        "auto", "auto (chat when the tokenizer has a chat template of its own, else raw), chat (the question as a user message "
                "through the chat template) or raw (the task's text as it is)")
    system: str | None = help_field(None, "chat: a system message before the question (None: none of ours; a template may add its own default)")
    instruction: str | None = help_field(
        None, "chat: the answer-format instruction after the question (None: the environment's, e.g. math's "
              "'Answer: <number>' line; empty: none)")


@dataclass(frozen=True)
class PromptStyle:
    """A resolved `PromptConfig`: what `PromptStyle.render` does to each prompt.

    Attributes:
        chat: Wrap a plain-text prompt as a user message (after ``system`` when given; with the
            instruction after the question). False: the text as it is. A prompt that is already a
            message list is rendered by the chat template either way.
        system: The system message, or None.
        instruction: The answer-format instruction, or None for the environment's own.
    """

    chat: bool = False
    system: str | None = None
    instruction: str | None = None

    def render(self, env: Environment, problem: Problem) -> str | list[Message]:
        """The prompt of ``problem`` for the model: ``env.format_prompt(problem)`` in this style."""
        prompt = env.format_prompt(problem)
        if not self.chat:
            return prompt
        instruction = env.answer_instruction(problem) if self.instruction is None else self.instruction
        if isinstance(prompt, str):
            text = prompt.strip()
            messages: list[Message] = [{"role": "user", "content": f"{text}\n\n{instruction}" if instruction else text}]
        else:
            messages = list(prompt)
        if self.system is not None and not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": self.system})
        return messages


RAW = PromptStyle()


def has_own_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template other than the embedded byte tokenizer's."""
    from rlvr.models.tokenizer import CHAT_TEMPLATE

    template = getattr(tokenizer, "chat_template", None)
    return bool(template) and template != CHAT_TEMPLATE


def resolve_style(cfg: PromptConfig, tokenizer: Any, model_name: str = "the model") -> PromptStyle:
    """The `PromptStyle` ``cfg`` asks for with this tokenizer. ``chat`` on a tokenizer without a
    chat template, or with one that has no generation prompt, is a `UserError` naming the model."""
    chat = cfg.format == "chat" or (cfg.format == "auto" and has_own_chat_template(tokenizer))
    if chat:
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise UserError(f"prompt.format=chat: the tokenizer of {model_name} has no chat template; use prompt.format=raw")
        if "add_generation_prompt" not in template:
            raise UserError(f"prompt.format=chat: the chat template of {model_name} has no generation prompt "
                            "(add_generation_prompt), so a completion would not start as the assistant's turn; use prompt.format=raw")
    return PromptStyle(chat, cfg.system, cfg.instruction) if chat else RAW


__all__ = ["PromptConfig", "PromptStyle", "RAW", "has_own_chat_template", "resolve_style"]
