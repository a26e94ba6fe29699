"""The episode contract: multi-turn environments whose model turns alternate with observations.

A multi-turn environment is an `Environment` with one more method, `MultiTurnEnvironment.step`.
After each model turn that ends at one of the environment's ``stop`` strings (a tool call's end
marker), ``step`` looks at the transcript so far and returns a `StepResult`: an observation (a
tool result, a checker's message) that is appended to the context, or None when the turn was the
final answer. The episode also ends at a limit (`EpisodeLimits`: model turns, total tokens, tool
time). The finished `Episode` is judged by `MultiTurnEnvironment.verify_episode`, which reads the
final answer from the model's own turns only (never from an observation) with the environment's
ordinary `verify`, and adds the process rewards that ``step`` attached.

    @envs.register("acme/guess-v1")
    class Guess(envs.MultiTurnEnvironment):
        stop = ("?\\n",)                                    # a turn ending "?\\n" asks the checker
        def step(self, problem, turns):
            asked = turns[-1].text                          # the model's newest turn
            return envs.StepResult(observation="higher\\n" if ... else "lower\\n")
        def verify(self, problem, completion):              # the model's own text only
            ...

Single-turn environments are unchanged: they never see an `Episode`. A step function that raises
ends its episode with an ``error`` verdict, and one that runs past ``step_timeout_s`` with a
``timeout`` verdict, counted like a single-turn verifier's failures. `play` runs an episode from
scripted model turns (tests, self-checks); `rlvr.rollout.episodes` runs batches with a model.
"""

from __future__ import annotations

import concurrent.futures as cf
import enum
import threading
import time
import traceback
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from envs.base import Environment
from envs.threads import DaemonExecutor
from envs.types import Problem, StepReward, Verdict
from envs.verdicts import normalise_verdict


class Role(str, enum.Enum):
    """Who wrote a turn."""

    MODEL = "model"
    OBSERVATION = "observation"


@dataclass(frozen=True)
class Turn:
    """One contiguous piece of an episode's transcript.

    Attributes:
        role: ``model`` (sampled by the policy, trained on) or ``observation`` (written by the
            environment, context only).
        text: The text exactly as it sits in the transcript.
    """

    role: Role
    text: str

    @classmethod
    def model(cls, text: str) -> Turn:
        return cls(Role.MODEL, text)

    @classmethod
    def observation(cls, text: str) -> Turn:
        return cls(Role.OBSERVATION, text)

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role.value, "text": self.text}


@dataclass(frozen=True)
class ToolCall:
    """What one tool call did, for counting and reports (never for the reward).

    Attributes:
        tool: The tool's name (``"python"``).
        status: ``ok`` (ran and exited 0), ``error`` (ran and failed: an exception, a non-zero
            exit), ``timeout``, ``memory``, ``output_limit``, ``killed`` (a signal), or
            ``sandbox_error`` (the sandbox itself failed; says nothing about the call).
        wall_s: Seconds the program ran in the sandbox (what tool-time budgets count).
        output: What the call printed, cut to the tool's output budget.
        output_truncated: The output was longer than the budget.
        latency_s: Seconds from the call to its result, waiting for a free sandbox worker
            included (calls of a batch share the sandbox's workers).
    """

    tool: str
    status: str
    wall_s: float
    output: str = ""
    output_truncated: bool = False
    latency_s: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "status": self.status, "wall_s": self.wall_s, "latency_s": self.latency_s, "output": self.output,
                "output_truncated": self.output_truncated}


@dataclass(frozen=True)
class StepResult:
    """What the environment answers to a model turn.

    Attributes:
        observation: Text appended to the context before the model's next turn; None ends the
            episode (the turn was the final answer).
        calls: The tool calls made for this turn.
        rewards: Process rewards for the model turn just taken, with character spans *of that
            turn's text* (the episode moves them to transcript offsets).
    """

    observation: str | None = None
    calls: tuple[ToolCall, ...] = ()
    rewards: tuple[StepReward, ...] = ()


class End(str, enum.Enum):
    """Why an episode ended."""

    ANSWER = "answer"  # the model ended a turn without calling a tool (or with end-of-sequence)
    MAX_TURNS = "max_turns"  # it called a tool in its last allowed turn
    MAX_TOKENS = "max_tokens"  # the episode's token budget ran out
    TRUNCATED = "truncated"  # one model turn hit the per-turn token limit
    TOOL_TIME = "tool_time"  # it called a tool after the episode's tool-time budget was spent
    STEP_ERROR = "step_error"  # the environment's step function raised
    STEP_TIMEOUT = "step_timeout"  # the step function did not return within step_timeout_s


@dataclass(frozen=True)
class EpisodeLimits:
    """Where an episode stops.

    Attributes:
        max_turns: Model turns (the last one cannot call a tool).
        max_tokens: Tokens after the prompt, model and observation tokens together.
        max_tool_s: Wall-clock seconds of tool calls; a tool call after the budget is spent ends
            the episode.
        step_timeout_s: Longest wait for one step function (a hung step ends its episode with a
            ``timeout`` verdict; the others go on).
    """

    max_turns: int = 4
    max_tokens: int = 512
    max_tool_s: float = 20.0
    step_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens", "max_tool_s", "step_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"EpisodeLimits.{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class Episode:
    """A finished episode: the transcript after the prompt, turn by turn, and what happened.

    Attributes:
        turns: Model turns and observations, in order (the first is the model's).
        end: Why it ended.
        calls: Every tool call, in order.
        steps: Process rewards attached by the step function, with spans of `transcript`.
        error: The step function's exception and traceback (``end`` is ``step_error``).
        info: Timings (``step_s``) and anything else for people.
    """

    turns: tuple[Turn, ...]
    end: End
    calls: tuple[ToolCall, ...] = ()
    steps: tuple[StepReward, ...] = ()
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def transcript(self) -> str:
        return "".join(t.text for t in self.turns)

    @property
    def model_turns(self) -> list[str]:
        return [t.text for t in self.turns if t.role is Role.MODEL]

    @property
    def model_text(self) -> str:
        """The model's own turns, concatenated, observations left out: where answers are read."""
        return "".join(self.model_turns)

    def model_to_transcript(self, offset: int, *, end: bool = False) -> int:
        """Map a character offset of `model_text` to the same place in `transcript`. With ``end``
        the offset is one past a character (a span's end): at the boundary of two model turns it
        maps to the end of the first, not to the start of the second after the observation."""
        model_pos = transcript_pos = 0
        for t in self.turns:
            n = len(t.text)
            if t.role is Role.MODEL:
                if offset < model_pos + n or (end and offset == model_pos + n):
                    return transcript_pos + offset - model_pos
                model_pos += n
            transcript_pos += n
        return transcript_pos

    def summary(self) -> dict[str, Any]:
        """Counts for verdicts and reports (JSON-serialisable)."""
        return {
            "turns": len(self.model_turns),
            "end": self.end.value,
            "tool_calls": len(self.calls),
            "tool_errors": sum(c.failed and c.status != "timeout" for c in self.calls),
            "tool_timeouts": sum(c.status == "timeout" for c in self.calls),
            "tool_s": sum(c.wall_s for c in self.calls),
            "observation_chars": sum(len(t.text) for t in self.turns if t.role is Role.OBSERVATION),
            **({"error": self.error.splitlines()[0]} if self.error else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "turns": [t.to_dict() for t in self.turns], "end": self.end.value, "calls": [c.to_dict() for c in self.calls],
            "steps": [s.to_dict() for s in self.steps], "error": self.error, "info": self.info,
        }


class MultiTurnEnvironment(Environment):
    """An environment whose episodes alternate model turns and observations (see the module doc).

    Subclasses set `stop` (the strings that end a model turn for `step`), optionally `limits`,
    and implement `step` and `verify` (the final verdict on the model's own text, as for a
    single-turn environment). Stateless and picklable like every environment: ``step`` sees the
    whole transcript each time.

    Attributes:
        stop: Stop strings that end a model turn and call `step`.
        limits: Default limits of an episode.
        observation_role: The role of an observation when prompts go through a chat template
            (``tool`` by default; a template that does not know the role gets ``user``). With
            raw prompts observations are appended as plain text.
    """

    stop: tuple[str, ...] = ()
    limits: EpisodeLimits = EpisodeLimits()
    observation_role: str = "tool"

    @abstractmethod
    def step(self, problem: Problem, turns: Sequence[Turn]) -> StepResult:
        """React to the model's newest turn (``turns[-1]``, which ended at a `stop` string).

        Return an observation to continue, or ``StepResult(None)`` when the turn is a final
        answer. May raise: the episode then ends with an ``error`` verdict. Must not block for
        long: tool calls run under their own limits; the runner stops waiting at
        ``limits.step_timeout_s``.
        """

    def scripted_turns(self, problem: Problem) -> list[str]:
        """Model turns for the self-check's scripted episode (`rlvr envs check` plays them through
        `step`, which must answer each turn that ends at a `stop` string without raising, hanging
        or returning junk). Default: a turn that is only the first stop string (an empty call,
        which `step` must answer or take as the final answer), then the gold completion. Override
        with a real call for a check that exercises the tool."""
        if not self.stop:
            return []
        gold = self.gold_completion(problem)
        return [self.stop[0], gold if gold is not None else ""]

    def answer_text(self, episode: Episode) -> str:
        """The text `verify` judges: the model's own turns (`Episode.model_text`), never an
        observation. An override must keep its length (process-reward spans map back through it)."""
        return episode.model_text

    def verify_episode(self, problem: Problem, episode: Episode) -> Verdict:
        """The final verdict: `verify` on `answer_text`, its process-reward spans moved onto the
        transcript, plus the step function's process rewards and the episode's counts in
        ``info['episode']``. A step that raised or hung gives an ``error`` / ``timeout`` verdict."""
        summary = episode.summary()
        if episode.end is End.STEP_ERROR:
            return Verdict.error(f"step function raised: {summary.get('error', '')}", episode=summary, traceback=episode.error)
        if episode.end is End.STEP_TIMEOUT:
            return Verdict.timeout(self.limits.step_timeout_s, where="step function", episode=summary)
        text = self.answer_text(episode)
        if len(text) != len(episode.model_text):
            raise ValueError(f"{type(self).__name__}.answer_text changed the text's length ({len(episode.model_text)} -> {len(text)})")
        v = normalise_verdict(self.verify(problem, text))  # a bool or a malformed verdict: a clear InvalidVerdict, not an AttributeError
        moved = tuple(StepReward(episode.model_to_transcript(s.start), episode.model_to_transcript(s.end, end=True), s.reward, s.label)
                      for s in v.steps)
        steps = tuple(sorted(moved + episode.steps, key=lambda s: (s.start, s.end)))
        return Verdict(v.reward, v.passed, v.status, steps, v.extracted, {**v.info, "episode": summary})


@dataclass
class StepOutcome:
    """A step function's result, or how it failed (exactly one of the three is set)."""

    result: StepResult | None = None
    error: str | None = None
    timed_out: bool = False
    step_s: float = 0.0


class StepRunner:
    """Runs the step functions of many episodes at once, so one slow tool call does not hold up the
    others: each step runs in a thread of its own (tool calls wait on the sandbox, not the CPU).

    A step that raises becomes an error outcome; one that does not return within ``timeout_s`` a
    timeout outcome (its thread cannot be killed: it is abandoned and finishes on its own, which a
    sandboxed tool call does at its wall-clock limit). The threads are daemon threads
    (`envs.threads.DaemonExecutor`, as the verifier pool's), so a step that never returns does not
    keep the process alive after training ends.

    Args:
        max_workers: Steps in flight at once.
    """

    def __init__(self, max_workers: int = 64):
        self.max_workers = max_workers
        self._executor: DaemonExecutor | None = None
        self._lock = threading.Lock()

    def run(self, env: MultiTurnEnvironment, items: Sequence[tuple[Problem, Sequence[Turn]]], timeout_s: float) -> list[StepOutcome]:
        """Step every ``(problem, turns)`` and wait (at most ``timeout_s`` past the start)."""
        if not items:
            return []
        with self._lock:
            if self._executor is None:
                self._executor = DaemonExecutor(self.max_workers, "env-step")
            futures = [self._executor.submit(_timed_step, env, p, tuple(t)) for p, t in items]
        deadline = time.monotonic() + timeout_s
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result(max(0.0, deadline - time.monotonic())))
            except cf.TimeoutError:
                f.cancel()
                outcomes.append(StepOutcome(timed_out=True, step_s=timeout_s))
        return outcomes

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown()
                self._executor = None


def _timed_step(env: MultiTurnEnvironment, problem: Problem, turns: tuple[Turn, ...]) -> StepOutcome:
    start = time.perf_counter()
    try:
        result = env.step(problem, turns)
        _check_step_result(type(env).__name__, result)
        return StepOutcome(result=result, step_s=time.perf_counter() - start)
    except Exception as e:
        return StepOutcome(error=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}", step_s=time.perf_counter() - start)


def _check_step_result(env_name: str, result: Any) -> None:
    """Raise TypeError naming the field when a step's return is not a well-formed `StepResult` (an
    observation that is not text would otherwise surface far away, when the transcript is joined)."""
    if not isinstance(result, StepResult):
        raise TypeError(f"{env_name}.step returned {type(result).__name__}, expected StepResult")
    if result.observation is not None and not isinstance(result.observation, str):
        raise TypeError(f"{env_name}.step returned an observation of type {type(result.observation).__name__}, expected str or None")
    for name, kind in (("calls", ToolCall), ("rewards", StepReward)):
        items = getattr(result, name)
        if not isinstance(items, (tuple, list)) or not all(isinstance(i, kind) for i in items):
            raise TypeError(f"{env_name}.step returned StepResult.{name} that is not a sequence of {kind.__name__}")


class EpisodeRecorder:
    """The bookkeeping of one episode in progress, shared by every runner (scripted or a model):
    turns, tool calls, process rewards, and the turn and tool-time limits. Token limits belong to
    the runner that counts tokens (it calls `stop`)."""

    def __init__(self, limits: EpisodeLimits):
        self.limits = limits
        self.turns: list[Turn] = []
        self.calls: list[ToolCall] = []
        self.steps: list[StepReward] = []
        self.end: End | None = None
        self.error: str | None = None
        self.step_s = 0.0
        self.wants_step = False
        self._chars = 0

    @property
    def done(self) -> bool:
        return self.end is not None

    @property
    def model_turn_count(self) -> int:
        return sum(t.role is Role.MODEL for t in self.turns)

    def model_turn(self, text: str, *, at_stop: bool) -> bool:
        """Record a model turn; ``at_stop``: it ended at one of the environment's stop strings.
        Returns whether the environment must step (sets `wants_step`)."""
        self._append(Turn.model(text))
        self.wants_step = False
        if not at_stop:
            self.end = End.ANSWER
        elif self.model_turn_count >= self.limits.max_turns:
            self.end = End.MAX_TURNS
        elif sum(c.wall_s for c in self.calls) >= self.limits.max_tool_s:
            self.end = End.TOOL_TIME
        else:
            self.wants_step = True
        return self.wants_step

    def stepped(self, outcome: StepOutcome) -> str | None:
        """Record the step's outcome; returns the observation to append, or None (episode over)."""
        self.wants_step = False
        self.step_s += outcome.step_s
        if outcome.error is not None:
            self.end, self.error = End.STEP_ERROR, outcome.error
            return None
        if outcome.timed_out or outcome.result is None:
            self.end = End.STEP_TIMEOUT
            return None
        result = outcome.result
        self.calls += result.calls
        turn_start = self._chars - len(self.turns[-1].text)
        self.steps += [StepReward(turn_start + r.start, turn_start + r.end, r.reward, r.label) for r in result.rewards]
        if result.observation is None:
            self.end = End.ANSWER
        return result.observation

    def observation(self, text: str) -> None:
        """Append the observation as it entered the context (possibly decoded from its tokens)."""
        self._append(Turn.observation(text))

    def stop(self, end: End) -> None:
        """End the episode for a reason the runner decides (token budgets)."""
        self.wants_step = False
        self.end = end

    def episode(self) -> Episode:
        return Episode(tuple(self.turns), self.end or End.MAX_TURNS, tuple(self.calls), tuple(self.steps), self.error,
                       {"step_s": self.step_s})

    def _append(self, turn: Turn) -> None:
        if self.done:
            raise RuntimeError("the episode has ended")
        self.turns.append(turn)
        self._chars += len(turn.text)


def play(env: MultiTurnEnvironment, problem: Problem, policy: Callable[[Sequence[Turn]], str],
         limits: EpisodeLimits | None = None, runner: StepRunner | None = None) -> Episode:
    """Run one episode with ``policy(turns so far) -> the next model turn`` (a scripted model:
    tests, self-checks, demonstrations). A turn counts as stopped at a tool call when it ends with
    one of ``env.stop``. No token limit applies here."""
    limits = limits or env.limits
    recorder = EpisodeRecorder(limits)
    own = runner is None
    runner = runner or StepRunner(max_workers=1)
    try:
        while not recorder.done:
            text = policy(tuple(recorder.turns))
            if recorder.model_turn(text, at_stop=any(text.endswith(s) for s in env.stop)):
                observation = recorder.stepped(runner.run(env, [(problem, recorder.turns)], limits.step_timeout_s)[0])
                if observation is not None:
                    recorder.observation(observation)
    finally:
        if own:
            runner.close()
    return recorder.episode()
