"""Episodes through the Hugging Face engine: stop strings, token layout, loss mask and log-prob
alignment with the trainer, observation tokens appended (never re-tokenized), demonstrations.

A small randomly initialised model is enough here: what is tested is where tokens go, not what
they say. The environment stops a turn at any of a few frequent characters, so a random model
produces multi-turn episodes at once.
"""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import tasks
from envs.episode import End, EpisodeLimits, MultiTurnEnvironment, Role, StepResult, Turn
from envs.types import Problem, Verdict
from rlvr.eval.runner import EvalSettings, evaluate, write_report
from rlvr.models.loading import load_model
from rlvr.models.tiny import TinyModelConfig, build_tiny_model
from rlvr.rollout.base import SamplingParams, verifier_input
from rlvr.rollout.episode_metrics import episode_metrics
from rlvr.rollout.episodes import EpisodeTimings, generate_for, run_episodes, tokenize_demonstration
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.text import encode_prompt
from rlvr.models.batch import build_token_batch, scatter_completion_values, token_logprobs

pytestmark = pytest.mark.smoke  # the newest lane's subset (scripts/test_newest.sh)

STOPS = tuple("abcdefghijklmnop")
PROBLEMS = [Problem(f"p/{i}", f"question {i}: ", "x") for i in range(3)]


class Chatter(MultiTurnEnvironment):
    """Stops a model turn at any of `STOPS` and answers with a short observation."""

    stop = STOPS
    limits = EpisodeLimits(max_turns=4, max_tokens=96)

    def step(self, problem, turns):
        return StepResult(observation=f"!obs {len(turns)}!\n")

    def verify(self, problem, completion):
        return Verdict(float("obs" in completion), "obs" in completion)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = build_tiny_model(TinyModelConfig(hidden_size=32, layers=2, heads=2, intermediate_size=64), tmp_path_factory.mktemp("tiny"))
    model, tok = load_model(str(path))
    return HFGenerateEngine(model, tok)


def merging_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE whose merges join a stop character with the observation's first
    character ("a!" is one token), so the joined transcript tokenizes differently from its turns."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merged = [c + "!" for c in STOPS]
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<s>", "</s>"] + alphabet + merged)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[(c, "!") for c in STOPS], unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def check_layout(engine, comps, max_tokens):
    tok = engine.tokenizer
    for c in comps:
        e = c.episode
        assert len(c.token_ids) == len(c.logprobs) == len(c.loss_mask) == len(c.char_ends) <= max_tokens
        assert c.text == e.transcript and c.char_ends[-1] == len(c.text)
        assert all(lp == 0.0 for lp, m in zip(c.logprobs, c.loss_mask) if not m)
        # runs of equal mask are the turns, back to back: observations are their own tokens (mask 0),
        # model turns the sampled ones (mask 1)
        runs: list[tuple[int, list[int]]] = []
        for i, m in zip(c.token_ids, c.loss_mask):
            if runs and runs[-1][0] == m:
                runs[-1][1].append(i)
            else:
                runs.append((m, [i]))
        assert [m for m, _ in runs] == [int(t.role is Role.MODEL) for t in e.turns]
        for (m, ids), turn in zip(runs, e.turns):
            if m:
                assert tok.decode(ids, skip_special_tokens=True) == turn.text
            else:
                assert ids == tok(turn.text, add_special_tokens=False)["input_ids"]


def trainer_gap(engine, comps) -> float:
    """Largest |trainer log-prob - engine log-prob| over model-sampled tokens."""
    batch = build_token_batch([c.prompt_ids for c in comps], [c.token_ids for c in comps], engine.tokenizer.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(engine.model, batch, temperature=1.0)
    rollout = scatter_completion_values([c.logprobs for c in comps], batch)
    mask = batch.completion_mask * scatter_completion_values([c.loss_mask for c in comps], batch)
    assert mask.sum() == sum(sum(c.loss_mask) for c in comps)
    return float(((trainer - rollout).abs() * mask).max())


def test_stop_strings_end_generation_where_they_first_appear(engine):
    prompts = ["hello ", "x: "]
    free = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=48))
    stops = tuple(f.text[10:12] for f in free if len(f.text) >= 12)  # two-character strings the model does write
    assert stops
    stopped = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=48, stop=stops))
    tok = engine.tokenizer
    for f, s in zip(free, stopped):
        assert f.token_ids[:len(s.token_ids)] == s.token_ids  # greedy: a prefix of the free run
        if s.stop_string is not None:
            assert s.stop_string in s.text and not s.truncated
            assert s.stop_string not in tok.decode(s.token_ids[:-1], skip_special_tokens=True)  # the first occurrence
        else:
            assert s.token_ids == f.token_ids
    assert any(s.stop_string for s in stopped)
    sampled = engine.generate(prompts, 4, SamplingParams(temperature=1.0, max_new_tokens=48, seed=1, stop=STOPS))
    assert all(len(c.token_ids) == len(c.logprobs) for c in sampled)


def test_episodes_lay_out_model_and_observation_tokens(engine):
    env = Chatter()
    timings = EpisodeTimings()
    comps = run_episodes(engine, env, PROBLEMS, 4, SamplingParams(temperature=1.0, max_new_tokens=32, seed=0), timings=timings)
    assert [c.prompt_index for c in comps] == [0] * 4 + [1] * 4 + [2] * 4
    assert all(c.prompt_ids == encode_prompt(engine.tokenizer, p.prompt) for c, p in zip(comps, [p for p in PROBLEMS for _ in range(4)]))
    assert any(len(c.episode.model_turns) > 1 for c in comps) and timings.turns >= 2
    check_layout(engine, comps, env.limits.max_tokens)
    # the trainer scores the sampled tokens exactly as the engine did, turn boundaries included
    assert trainer_gap(engine, comps) < 1e-4
    # the verifier judges the episode, not the text
    assert verifier_input(comps[0]) is comps[0].episode


def test_limits_bound_the_episode(engine):
    env = Chatter()
    comps = run_episodes(engine, env, PROBLEMS, 4, SamplingParams(temperature=1.0, max_new_tokens=32, seed=3),
                         limits=EpisodeLimits(max_turns=2, max_tokens=40))
    for c in comps:
        assert len(c.token_ids) <= 40 and len(c.episode.model_turns) <= 2
        assert c.episode.end in (End.ANSWER, End.MAX_TURNS, End.MAX_TOKENS, End.TRUNCATED)
        assert c.truncated == (c.episode.end is End.TRUNCATED) or c.episode.end is End.MAX_TOKENS  # a cut turn, or no room for an observation
    assert {c.episode.end for c in comps} & {End.MAX_TURNS, End.MAX_TOKENS}


def test_observations_are_appended_as_tokens_not_retokenized(tmp_path):
    tok = merging_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    engine = HFGenerateEngine(LlamaForCausalLM(config), tok)
    comps = run_episodes(engine, Chatter(), PROBLEMS, 4, SamplingParams(temperature=1.0, max_new_tokens=32, seed=0))
    joined = [c for c in comps if any(t.role is Role.OBSERVATION for t in c.episode.turns)]
    assert joined
    # the hazard is real: the whole transcript tokenizes differently ("a" + "!obs" -> "a!", "obs")
    assert any(tok(c.text, add_special_tokens=False)["input_ids"] != c.token_ids for c in joined)
    check_layout(engine, comps, Chatter.limits.max_tokens)
    assert trainer_gap(engine, comps) < 1e-4
    # a demonstration of the same episode puts the same observation tokens in the same places of
    # its turns (the model's own tokens may be a non-canonical split of the same text)
    for c in joined:
        demo = tokenize_demonstration(tok, PROBLEMS[c.prompt_index].prompt, c.episode.turns, eos=False)
        assert demo.prompt_ids == c.prompt_ids
        assert [i for i, m in zip(demo.token_ids, demo.loss_mask) if not m] == [i for i, m in zip(c.token_ids, c.loss_mask) if not m]
        assert tok.decode([i for i, m in zip(demo.token_ids, demo.loss_mask) if m]) == tok.decode([i for i, m in zip(c.token_ids, c.loss_mask) if m], skip_special_tokens=True)


def test_demonstrations_of_the_tool_task_tokenize_with_the_observation_masked(engine):
    tok = engine.tokenizer
    task = tasks.make("tool-products-v1", guess_frac=0.5)
    problems = task.problems("validation", limit=40)
    demos = [task.demonstration(p) for p in problems]
    assert {len(d) for d in demos} == {1, 3}  # both styles occur
    for p, turns in zip(problems, demos):
        out = tokenize_demonstration(tok, task.env.format_prompt(p), turns)
        assert out.token_ids[-1] == tok.eos_token_id and out.loss_mask[-1] == 1
        assert tok.decode(out.token_ids, skip_special_tokens=True) == task.solution(p)
        masked_out = tok.decode([i for i, m in zip(out.token_ids, out.loss_mask) if not m])
        assert masked_out == "".join(t.text for t in turns if t.role is Role.OBSERVATION)
        assert out.prompt_ids == encode_prompt(tok, task.env.format_prompt(p))
    with pytest.raises(ValueError, match="starts with a model turn"):
        tokenize_demonstration(tok, "q", [Turn.observation("x")])


def test_single_turn_environments_go_through_generate_unchanged(engine):
    import envs

    env = envs.make("math-v1")
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=5)
    direct = engine.generate([p.prompt for p in PROBLEMS], 2, sampling)
    routed = generate_for(engine, env, PROBLEMS, 2, sampling)
    assert [c.token_ids for c in routed] == [c.token_ids for c in direct]
    assert all(c.loss_mask is None and c.episode is None and verifier_input(c) == c.text for c in routed)
    assert episode_metrics(routed) == {}


def test_episode_metrics_count_what_happened(engine):
    comps = run_episodes(engine, Chatter(), PROBLEMS, 4, SamplingParams(temperature=1.0, max_new_tokens=32, seed=0))
    verdicts = Chatter().verify_many(PROBLEMS * 4, [verifier_input(c) for c in comps])
    m = episode_metrics(comps, verdicts)
    assert m["episode/episodes"] == 12
    assert m["episode/turns"] == sum(len(c.episode.model_turns) for c in comps) / 12
    assert m["episode/observation_tokens"] == sum(c.loss_mask.count(0) for c in comps) / 12
    assert m["episode/tool_calls"] == 0.0 and m["episode/tool_error_rate"] == 0.0  # this environment calls no tool
    assert abs(sum(v for k, v in m.items() if k.startswith("episode/end/")) - 1.0) < 1e-9


def test_eval_reports_tool_use_and_shows_episodes(engine, tmp_path):
    task = tasks.make("tool-products-v1")
    settings = EvalSettings(split="test", limit=6, max_new_tokens=24, chunk_prompts=6)
    report = evaluate(engine, task, settings, progress=False)
    episodes = report["greedy"]["episodes"]
    assert episodes["episodes"] == 6 and "tool_use_rate" in episodes and "tool_s_per_call" in episodes
    _, md = write_report(report, tmp_path, task.problems("test"))
    assert "tool use rate" in md.read_text()
    row = json.loads((tmp_path / "predictions.jsonl").read_text().splitlines()[0])
    assert row["greedy"][0]["episode"]["turns"][0]["role"] == "model"


class CountingTokenizer:
    """A tokenizer that remembers how many characters each call to it was given."""

    def __init__(self, tok):
        self.tok = tok
        self.chars: list[int] = []

    def __call__(self, text, **kwargs):
        self.chars.append(len(text))
        return self.tok(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_an_observation_is_cut_by_characters_before_it_is_tokenized(engine):
    # issue 22: a step returning 5 MB was tokenized whole (70 s) only to be refused for want of room
    from rlvr.rollout.episodes import CHARS_PER_TOKEN_BOUND, observation_ids, observation_ids_within
    from rlvr.rollout.text import observation_wrap

    tok = engine.tokenizer
    prose = "The product of 48213 and 7719 is 372156147, as printed above.\n"
    observations = ["ok\n", prose, prose * 2_000, "x" * 50_000, " " * 50_000, "7" * 50_000]
    for wrap in (None, observation_wrap(tok, "tool")):
        for room in (1, 12, 40, 500):
            counting = CountingTokenizer(tok)
            for observation in observations:
                full = observation_ids(tok, observation, wrap)  # what the whole observation takes
                assert observation_ids_within(counting, observation, wrap, room) == (full if len(full) < room else None)
            huge = "x " * 2_500_000
            assert observation_ids_within(counting, huge, wrap, room) is None
            assert max(counting.chars) < room * CHARS_PER_TOKEN_BOUND + 200  # a prefix, not the 5 MB


def test_a_huge_observation_ends_the_episode_without_tokenizing_it_whole(engine):
    from envs.testing import FaultyStepEnv

    counting = CountingTokenizer(engine.tokenizer)
    comps = run_episodes(HFGenerateEngine(engine.model, counting), FaultyStepEnv(fault="huge"), PROBLEMS, 2,
                         SamplingParams(temperature=1.0, max_new_tokens=16, seed=0))
    stepped = [c for c in comps if c.episode.info["step_s"] > 0]
    assert stepped and all(c.episode.end is End.MAX_TOKENS and len(c.token_ids) <= 96 for c in stepped)
    assert max(counting.chars) < 96 * 32 + 200
