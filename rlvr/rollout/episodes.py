"""Multi-turn episodes over a rollout engine, turn by turn, and demonstrations as tokens.

`run_episodes` plays a batch of episodes of a `envs.MultiTurnEnvironment`: one batched generate
call per turn for the episodes still going, each model turn stopping at the environment's stop
strings (a tool call's end marker); the step functions of all of them run at once
(`envs.episode.StepRunner`), so one slow tool call does not serialise the others; each
observation is tokenized alone and its ids appended to the context. Nothing is ever re-tokenized:
the ids the trainer scores are exactly the ones sampled and appended, so the loss mask cannot
shift at a turn boundary.

Each episode becomes one `Completion` whose ``token_ids`` hold model and observation tokens
after the prompt, with ``logprobs`` (0.0 on observation tokens), ``loss_mask`` (1 = sampled by
the model, 0 = observation), ``text`` (the transcript), ``char_ends`` and ``episode`` (the turns,
tool calls and why it ended; what the verifier judges, see `rlvr.rollout.base.verifier_input`).

`tokenize_demonstration` turns a written episode (`envs.Turn`s) into the same layout for
supervised warm-up, so a demonstration and a rollout of the same episode give the same tokens.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from envs.base import Environment
from envs.episode import End, EpisodeLimits, EpisodeRecorder, MultiTurnEnvironment, Role, StepRunner, Turn
from envs.types import Message, Problem
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.prompts import RAW, PromptStyle
from rlvr.rollout.text import ObservationWrap, encode_prompt, observation_wrap, render_prompt, token_char_ends


@dataclass
class _Live:
    """One episode being played: its recorder and the token layout built so far."""

    problem_index: int
    problem: Problem
    prompt_ids: list[int]
    recorder: EpisodeRecorder
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    char_ends: list[int] = field(default_factory=list)
    text: str = ""
    truncated: bool = False
    observation_tokens: int = 0

    def append(self, ids: list[int], logprobs: list[float], text: str, char_ends: list[int], model: bool) -> None:
        start = len(self.text)
        self.ids += ids
        self.logprobs += logprobs
        self.mask += [int(model)] * len(ids)
        self.char_ends += [start + e for e in char_ends]
        self.text += text
        self.observation_tokens += 0 if model else len(ids)


@dataclass
class EpisodeTimings:
    """Where the time of one `run_episodes` call went (seconds)."""

    generate_s: float = 0.0
    step_s: float = 0.0
    turns: int = 0


def run_episodes(engine: RolloutEngine, env: MultiTurnEnvironment, problems: Sequence[Problem], n: int, sampling: SamplingParams,
                 *, limits: EpisodeLimits | None = None, step_runner: StepRunner | None = None,
                 timings: EpisodeTimings | None = None, style: PromptStyle = RAW) -> list[Completion]:
    """Play ``n`` episodes per problem; one `Completion` per episode, grouped like
    `RolloutEngine.generate` (problem 0's n episodes first).

    Args:
        engine: Any engine whose capabilities include ``multi_turn`` (`RolloutEngine.generate_ids`
            continues the transcript's token ids).
        env: The multi-turn environment (its ``stop`` strings end a model turn for its ``step``).
        sampling: Sampling of every model turn; ``max_new_tokens`` bounds one turn, ``seed``
            seeds the first turn's call (later turns continue the engine's generator).
        limits: Episode limits (default: ``env.limits``); ``max_tokens`` counts model and
            observation tokens after the prompt.
        step_runner: Runs step functions concurrently (default: a new one for this call).
        timings: Filled with the time spent generating and stepping, if given.
        style: How each problem's prompt is shown (`rlvr.rollout.prompts`; default: as the
            environment formats it).
    """
    engine.require("multi_turn", f"play the multi-turn episodes of {env.id or type(env).__name__}")
    if env.stop or sampling.stop:
        engine.require("stop_strings", "end a model turn at a stop string")
    limits = limits or env.limits
    tok = engine.tokenizer
    timings = timings if timings is not None else EpisodeTimings()
    rendered = [style.render(env, p) for p in problems]
    texts = [render_prompt(tok, r) for r in rendered]
    prompts = [tok(t)["input_ids"] for t in texts]
    # observations in a chat transcript are messages of their own role; after raw prompts, plain text
    wrap = observation_wrap(tok, env.observation_role) if any(isinstance(r, list) for r in rendered) else None
    wraps = [wrap if isinstance(r, list) else None for r in rendered]
    live = [_Live(i, p, prompts[i], EpisodeRecorder(limits)) for i, p in enumerate(problems) for _ in range(n)]
    stop = tuple(dict.fromkeys((*sampling.stop, *env.stop)))
    own_runner = step_runner is None
    runner = step_runner or StepRunner()
    try:
        for turn in range(limits.max_turns):
            active = [e for e in live if not e.recorder.done]
            if not active:
                break
            room = [limits.max_tokens - len(e.ids) for e in active]
            params = dataclasses.replace(sampling, stop=stop, max_new_tokens=min(sampling.max_new_tokens, max(room)),
                                         seed=sampling.seed if turn == 0 else None)
            t = time.perf_counter()
            outs = engine.generate_ids([e.prompt_ids + e.ids for e in active], 1, params)
            timings.generate_s += time.perf_counter() - t
            timings.turns += 1
            for e, out, budget in zip(active, outs, room):
                _add_model_turn(e, out, budget, tok)
            stepping = [e for e in active if e.recorder.wants_step]
            t = time.perf_counter()
            outcomes = runner.run(env, [(e.problem, e.recorder.turns) for e in stepping], limits.step_timeout_s)
            timings.step_s += time.perf_counter() - t
            for e, outcome in zip(stepping, outcomes):
                observation = e.recorder.stepped(outcome)
                if observation is not None:
                    _add_observation(e, observation, tok, limits.max_tokens, wraps[e.problem_index])
    finally:
        if own_runner:
            runner.close()
    for e in live:
        if not e.recorder.done:
            e.recorder.stop(End.MAX_TURNS)
    return [_completion(e, texts[e.problem_index]) for e in live]


def _add_model_turn(e: _Live, out: Completion, budget: int, tok: Any) -> None:
    ids, logprobs, text, ends = out.token_ids, out.logprobs, out.text, out.char_ends
    over = len(ids) > budget  # the batch's call allowed more tokens than this episode had left
    if over:
        ids, logprobs = ids[:budget], logprobs[:budget]
        text = tok.decode(ids, skip_special_tokens=True)
    if over or len(ends) != len(ids):
        ends = token_char_ends(tok, ids, len(text))
    e.append(ids, logprobs, text, ends, model=True)
    e.recorder.model_turn(text, at_stop=out.stop_string is not None and not over)
    if over or out.truncated:  # the turn was cut: by the episode's budget, or by the per-turn limit
        e.truncated = True
        e.recorder.stop(End.MAX_TOKENS if len(e.ids) >= e.recorder.limits.max_tokens else End.TRUNCATED)


def _add_observation(e: _Live, observation: str, tok: Any, max_tokens: int, wrap: ObservationWrap | None) -> None:
    ids = observation_ids_within(tok, observation, wrap, max_tokens - len(e.ids))
    if ids is None:  # no room left for the model to answer after it
        e.recorder.stop(End.MAX_TOKENS)
        return
    text = tok.decode(ids, skip_special_tokens=True)  # the observation as the model sees it
    e.append(ids, [0.0] * len(ids), text, token_char_ends(tok, ids, len(text)), model=False)
    # the environment reads the observation itself (without the chat template's markers)
    e.recorder.observation(text if wrap is None else tok.decode(tok(observation, add_special_tokens=False)["input_ids"], skip_special_tokens=True))


CHARS_PER_TOKEN_BOUND = 32
"""More characters per token than any normal text averages (English prose is about 4, code 3 to 4;
runs of spaces or repeated symbols rarely pass 10): `observation_ids_within` tokenizes only this
many characters per token of room before deciding that an observation cannot fit."""


def observation_ids_within(tok: Any, observation: str, wrap: ObservationWrap | None, room: int) -> list[int] | None:
    """`observation_ids` when they are fewer than ``room`` tokens, else None (the observation
    leaves the model no room to answer), without tokenizing all of a huge observation (a step
    that returns 5 MB took a minute to tokenize, only to be refused).

    Its first ``room * CHARS_PER_TOKEN_BOUND`` characters are tokenized first. When they alone
    take at least twice the room, the whole cannot fit: its tokens cover the same text, merged
    differently only around the cut (a word cut in two), and the second ``room`` tokens are a
    margin far wider than that. Otherwise (text denser than 16 characters a token, or short
    enough to tokenize at once) the whole is tokenized, so the answer is always the one the full
    tokenization gives."""
    head_chars = max(room, 1) * CHARS_PER_TOKEN_BOUND
    if len(observation) > head_chars and len(observation_ids(tok, observation[:head_chars], wrap)) >= 2 * room:
        return None
    ids = observation_ids(tok, observation, wrap)
    return ids if len(ids) < room else None


def observation_ids(tok: Any, observation: str, wrap: ObservationWrap | None) -> list[int]:
    """The ids appended for an observation: its text, or in a chat transcript the template's end of
    the model's turn, the observation as a message of its role and the next model turn's header.
    Rollouts and demonstrations both use this, so they lay an episode out alike."""
    return tok(observation if wrap is None else wrap.text(observation), add_special_tokens=False)["input_ids"]


def _completion(e: _Live, prompt_text: str) -> Completion:
    episode = e.recorder.episode()
    episode.info.update(observation_tokens=e.observation_tokens, model_tokens=len(e.ids) - e.observation_tokens)
    return Completion(
        prompt_index=e.problem_index, prompt_ids=list(e.prompt_ids), token_ids=e.ids, logprobs=e.logprobs, text=e.text,
        truncated=e.truncated, char_ends=e.char_ends, loss_mask=e.mask, episode=episode, prompt_text=prompt_text,
    )


def generate_for(engine: RolloutEngine, env: Environment, problems: Sequence[Problem], n: int, sampling: SamplingParams,
                 style: PromptStyle = RAW, **episode_options: Any) -> list[Completion]:
    """``n`` completions per problem, prompts shown in ``style``: episodes for a multi-turn
    environment (`run_episodes`), one generate call otherwise. What trainers and evaluation call
    instead of ``engine.generate``."""
    if isinstance(env, MultiTurnEnvironment):
        return run_episodes(engine, env, problems, n, sampling, style=style, **episode_options)
    return engine.generate([style.render(env, p) for p in problems], n, sampling)


@dataclass(frozen=True)
class TokenizedDemonstration:
    """A demonstration laid out as a rollout of the same episode would be.

    Attributes:
        prompt_ids: The prompt's ids (as `rlvr.rollout.text.encode_prompt`).
        token_ids: Model and observation tokens after the prompt, then end-of-sequence.
        loss_mask: 1 on the model's tokens (end-of-sequence included), 0 on observation tokens.
    """

    prompt_ids: list[int]
    token_ids: list[int]
    loss_mask: list[int]


def tokenize_demonstration(tokenizer: Any, prompt: str | list[Message], turns: Sequence[Turn], *, eos: bool = True,
                           observation_role: str = "tool") -> TokenizedDemonstration:
    """Tokenize a written episode for supervised warm-up: each turn alone (as the runner appends
    observations; never the joined transcript, whose tokens may merge across a boundary), model
    turns masked 1, observations 0 (in a chat transcript, as ``observation_role`` messages), and an
    end-of-sequence token after the last turn."""
    if not turns or turns[0].role is not Role.MODEL:
        raise ValueError("a demonstration starts with a model turn")
    wrap = observation_wrap(tokenizer, observation_role) if isinstance(prompt, list) else None
    ids: list[int] = []
    mask: list[int] = []
    for turn in turns:
        piece = (tokenizer(turn.text, add_special_tokens=False)["input_ids"] if turn.role is Role.MODEL
                 else observation_ids(tokenizer, turn.text, wrap))
        ids += piece
        mask += [int(turn.role is Role.MODEL)] * len(piece)
    if eos:
        ids.append(tokenizer.eos_token_id)
        mask.append(1)
    return TokenizedDemonstration(encode_prompt(tokenizer, prompt), ids, mask)
