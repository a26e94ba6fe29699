"""Prompts for chat models (``prompt.*``, `rlvr.rollout.prompts`): chat when the tokenizer has a
template of its own, a system message and the environment's answer instruction, the rendered prompt
recorded, and a loud warning when the model's completions are empty.

The chat tokenizer here is the embedded byte tokenizer given a ChatML template (the form SmolLM2 and
Qwen use), so every rendering is checked token for token against ``apply_chat_template``."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import tasks
from envs.episode import EpisodeLimits, MultiTurnEnvironment, Role, StepResult, Turn
from envs.types import Problem, Verdict
from rlvr import UserError
from rlvr.eval.runner import EvalSettings, evaluate, write_report
from rlvr.models.loading import load_model
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import generate_for, tokenize_demonstration
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.prompts import RAW, PromptConfig, PromptStyle, resolve_style
from rlvr.rollout.text import ObservationWrap, observation_wrap

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64), tmp_path_factory.mktemp("tiny"))
    return load_model(str(path))


@pytest.fixture
def chat_tokenizer(tiny):
    _, tok = tiny
    tok = type(tok).from_pretrained(tok.name_or_path) if tok.name_or_path else tok
    tok.chat_template = CHATML
    return tok


def test_auto_is_raw_for_the_embedded_tokenizer_and_chat_for_a_template_of_its_own(tiny, chat_tokenizer):
    _, tok = tiny
    assert resolve_style(PromptConfig(), tok) == RAW  # its minimal template only renders message prompts
    assert resolve_style(PromptConfig(), chat_tokenizer).chat
    assert resolve_style(PromptConfig(format="raw"), chat_tokenizer) == RAW
    assert resolve_style(PromptConfig(format="chat"), tok).chat  # asked for: the minimal template is used


def test_chat_is_refused_without_a_template_or_a_generation_prompt(chat_tokenizer):
    chat_tokenizer.chat_template = None
    with pytest.raises(UserError, match="prompt.format=chat: the tokenizer of acme/m has no chat template"):
        resolve_style(PromptConfig(format="chat"), chat_tokenizer, "acme/m")
    chat_tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(UserError, match="chat template of acme/m has no generation prompt"):
        resolve_style(PromptConfig(), chat_tokenizer, "acme/m")


def test_a_question_becomes_a_user_message_with_the_environments_instruction():
    arithmetic = tasks.make("arithmetic-v1")
    problem = arithmetic.problems("test")[0]
    messages = PromptStyle(chat=True, system="Be brief.").render(arithmetic.env, problem)
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[1]["role"] == "user" and messages[1]["content"].startswith(problem.prompt.strip() + "\n\n")
    assert "Answer: <number>" in messages[1]["content"]  # arithmetic's prompt says nothing of the answer's form
    gsm = Problem("g/0", "Tom has 3 apples.\n\nPlease reason step by step, and put your final answer within \\boxed{}.", "3")
    assert PromptStyle(chat=True).render(arithmetic.env, gsm) == [{"role": "user", "content": gsm.prompt.strip()}]  # it already says
    custom = PromptStyle(chat=True, instruction="Reply with the number only.").render(arithmetic.env, problem)
    assert custom[0]["content"].endswith("\n\nReply with the number only.")
    assert PromptStyle(chat=True, instruction="").render(arithmetic.env, problem)[0]["content"] == problem.prompt.strip()
    assert RAW.render(arithmetic.env, problem) == problem.prompt  # the quickstart's prompts are unchanged


def test_every_engine_call_and_report_carries_the_rendered_prompt(tiny, chat_tokenizer, tmp_path):
    model, _ = tiny
    engine = HFGenerateEngine(model, chat_tokenizer)
    task = tasks.make("arithmetic-v1")
    style = resolve_style(PromptConfig(system="Be brief."), chat_tokenizer)
    problems = task.problems("test")[:3]
    comps = generate_for(engine, task.env, problems, 2, SamplingParams(temperature=0.0, max_new_tokens=4), style)
    expected = chat_tokenizer.apply_chat_template(style.render(task.env, problems[0]), tokenize=False, add_generation_prompt=True)
    assert comps[0].prompt_text == expected and expected.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert comps[0].prompt_ids == chat_tokenizer(expected).input_ids

    report = evaluate(engine, task, EvalSettings(limit=3, max_new_tokens=4, prompt=PromptConfig(system="Be brief.")), progress=False)
    assert report["prompt"]["format"] == "chat" and report["prompt"]["rendered_example"] == expected
    for key in ("mean_completion_tokens", "truncated_rate", "empty_rate"):
        assert key in report["greedy"], key
    assert report["speed"]["greedy_completion_tokens_per_s"] > 0 and report["greedy"]["truncated_rate"] == 1.0  # 4 tokens never finish
    write_report(report, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert rows[0]["prompt"] == expected
    md = (tmp_path / "report.md").read_text()
    assert "<|im_start|>assistant" in md and "generation speed" in md


def test_a_model_that_ends_its_turn_at_once_is_reported_loudly(tiny, tmp_path, capsys):
    """What a chat model does with a raw prompt: its first token is the end of its turn."""
    model, tok = tiny
    hook = model.lm_head.register_forward_hook(lambda m, i, out: out.index_fill(-1, torch.tensor([tok.eos_token_id]), 1e4))
    try:
        engine = HFGenerateEngine(model, tok)
        report = evaluate(engine, tasks.make("arithmetic-v1"), EvalSettings(limit=4, max_new_tokens=8), progress=False)
    finally:
        hook.remove()
    assert report["greedy"]["empty_rate"] == 1.0
    assert report["warnings"] == ["100% of completions are empty (the model ended its turn at once): the prompts were raw text: "
                                  "a chat model needs its chat template (prompt.format=chat)"]
    write_report(report, tmp_path)
    assert "**Warning: 100% of completions are empty" in (tmp_path / "report.md").read_text()


def test_a_model_writing_only_whitespace_is_not_said_to_end_its_turn(tiny):
    """Completions of spaces or newlines are empty answers, but the model did not end its turn: the warning says what it did
    (was: "ended its turn at once", a chat-template hint)."""
    model, tok = tiny
    space = tok(" ", add_special_tokens=False).input_ids[0]
    hook = model.lm_head.register_forward_hook(lambda m, i, out: out.index_fill(-1, torch.tensor([space]), 1e4))
    try:
        report = evaluate(HFGenerateEngine(model, tok), tasks.make("arithmetic-v1"), EvalSettings(limit=4, max_new_tokens=8), progress=False)
    finally:
        hook.remove()
    assert report["greedy"]["empty_rate"] == 1.0 and report["greedy"]["whitespace_rate"] == 1.0
    (warning,) = [w for w in report["warnings"] if "empty" in w]
    assert "only whitespace" in warning and "ended its turn" not in warning and "chat template" not in warning, warning


@pytest.mark.parametrize("decode", ["kv", "generate"])
def test_generation_ends_at_the_chat_templates_end_of_turn_as_well_as_eos(tiny, decode):
    """Qwen-style: eos is one token, the assistant's turn ends with another (``<|im_end|>``)."""
    model, tok = tiny
    tok = type(tok).from_pretrained(tok.name_or_path)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    chat_model = copy.deepcopy(model)
    chat_model.resize_token_embeddings(len(tok))
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end != tok.eos_token_id
    hook = chat_model.lm_head.register_forward_hook(lambda m, i, out: out.index_fill(-1, torch.tensor([end]), 1e4))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    try:
        plain = HFGenerateEngine(chat_model, tok, decode=decode).generate(["Compute 1+1.\n"], 1, greedy)[0]
        tok.chat_template = CHATML
        chat = HFGenerateEngine(chat_model, tok, decode=decode).generate([[{"role": "user", "content": "Compute 1+1."}]], 1, greedy)[0]
    finally:
        hook.remove()
    assert plain.truncated and len(plain.token_ids) == 6  # without a template that writes it, <|im_end|> is just a token
    assert chat.token_ids == [end] and not chat.truncated and chat.text == ""


class Echo(MultiTurnEnvironment):
    """Any letter, digit or space ends a model turn; the observation is a fixed string."""

    stop = tuple("abcdefghijklmnopqrstuvwxyz0123456789 ")
    limits = EpisodeLimits(max_turns=3, max_tokens=96)
    seen: list[str] = []

    def step(self, problem, turns):
        Echo.seen += [t.text for t in turns if t.role is Role.OBSERVATION]
        return StepResult(observation=" [seen] ")

    def verify(self, problem, completion):
        return Verdict(0.0, False)


def test_observations_in_a_chat_transcript_are_messages_of_their_own_role(tiny, chat_tokenizer):
    model, _ = tiny
    wrap = observation_wrap(chat_tokenizer, "tool")
    assert wrap == ObservationWrap("tool", "<|im_end|>\n<|im_start|>tool\n", "<|im_end|>\n<|im_start|>assistant\n")
    wrapped = chat_tokenizer(wrap.text(" [seen] "), add_special_tokens=False).input_ids
    problems = [Problem(f"p/{i}", f"Say {i}.", "0") for i in range(3)]
    Echo.seen = []
    comps = generate_for(HFGenerateEngine(model, chat_tokenizer), Echo(), problems, 2,
                         SamplingParams(temperature=1.0, max_new_tokens=16, seed=3), PromptStyle(chat=True))
    stepped = [c for c in comps if any(t.role is Role.OBSERVATION for t in c.episode.turns)]
    assert stepped, "some episode must reach an observation"
    for c in stepped:  # the template's end of turn, a tool message and the next assistant header, all masked out
        masked = [t for t, m in zip(c.token_ids, c.loss_mask) if not m]
        assert masked[: len(wrapped)] == wrapped and len(masked) % len(wrapped) == 0
    assert Echo.seen and set(Echo.seen) == {" [seen] "}  # the environment reads the observation itself

    turns = [Turn(Role.MODEL, "1+1="), Turn(Role.OBSERVATION, " [seen] "), Turn(Role.MODEL, "2")]
    ids = lambda text: chat_tokenizer(text, add_special_tokens=False).input_ids
    chat = tokenize_demonstration(chat_tokenizer, [{"role": "user", "content": "q"}], turns)
    assert chat.token_ids == ids("1+1=") + wrapped + ids("2") + [chat_tokenizer.eos_token_id]
    assert chat.loss_mask == [1] * len(ids("1+1=")) + [0] * len(wrapped) + [1] * (len(ids("2")) + 1)
    raw = tokenize_demonstration(chat_tokenizer, "q", turns)  # raw prompts: observations are plain text, as before
    assert raw.token_ids == ids("1+1=") + ids(" [seen] ") + ids("2") + [chat_tokenizer.eos_token_id]


def test_a_template_that_knows_only_user_and_assistant_gets_a_user_message(chat_tokenizer):
    tok = copy.copy(chat_tokenizer)
    tok.chat_template = ("{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
                         "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}" + CHATML[len("{% for m in messages %}"):])
    assert observation_wrap(tok, "tool") == ObservationWrap("user", "<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")


def test_an_evaluation_limit_beyond_the_split_is_said_not_clamped_silently(tiny, tmp_path):
    model, tokenizer = tiny
    engine = HFGenerateEngine(model, tokenizer)
    task = tasks.make("arithmetic-v1")
    size = task.size("validation")
    report = evaluate(engine, task, EvalSettings(split="validation", limit=size + 1, max_new_tokens=1), progress=False)
    said = f"the evaluation limit {size + 1} is more than the {size} problems of arithmetic-v1's 'validation' split: all {size} are evaluated"
    assert report["problems"] == size and report["limit_beyond_split"] == said and report["warnings"][0] == said
    write_report(report, tmp_path)  # recorded where the report is read
    assert json.loads((tmp_path / "report.json").read_text())["warnings"][0] == said and said in (tmp_path / "report.md").read_text()
    exact = evaluate(engine, task, EvalSettings(split="validation", limit=size, max_new_tokens=1), progress=False)
    assert "limit_beyond_split" not in exact and not any("evaluation limit" in w for w in exact["warnings"])  # the split's size: nothing said
