"""Environments that misbehave on purpose, for testing pipelines (importable, so they also work in
worker processes). Register one to see how a trainer contains a faulty verifier, or call
`register_testing_envs` to register them all under ``testing/``."""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Any

from envs.base import Environment
from envs.episode import EpisodeLimits, MultiTurnEnvironment, StepResult
from envs.types import Problem, StepReward, Verdict


class FaultyEnv(Environment):
    """Completion ``"ok"`` passes, ``"boom"`` raises, ``"hang"`` sleeps ``hang_s`` seconds,
    ``"segfault"`` kills its own process with SIGSEGV (only ever verify it in a worker process),
    anything else fails. With ``raise_every=k``, every k-th call raises regardless of the completion."""

    def __init__(self, hang_s: float = 60.0, raise_every: int = 0):
        self.hang_s = hang_s
        self.raise_every = raise_every
        self._calls = 0

    def verify(self, problem: Problem, completion: str) -> Verdict:
        self._calls += 1
        if completion == "boom" or (self.raise_every and self._calls % self.raise_every == 0):
            raise RuntimeError("verifier exploded")
        if completion == "hang":
            time.sleep(self.hang_s)
        if completion == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        ok = completion == "ok"
        return Verdict(float(ok), ok, extracted=completion)


def faulty_reward(problem: Problem, completion: str) -> Any:
    """A reward function (`envs.from_function`) with `FaultyEnv`'s faults: ``"boom"`` raises,
    ``"hang"`` sleeps an hour, ``"nan"`` returns NaN, ``"text"`` returns a string; otherwise
    whether the completion is the problem's reference."""
    if completion == "boom":
        raise RuntimeError("reward function exploded")
    if completion == "hang":
        time.sleep(3600)
    if completion == "nan":
        return math.nan
    if completion == "text":
        return "yes"
    return completion == str(problem.reference)


class _InnerHooks:
    """Prompt and self-check hooks of the wrapped environment ``self.inner``: `rlvr envs check` must
    see the wrapper's failures, not skip checks for want of hooks."""

    inner: Environment

    def format_prompt(self, problem: Problem):
        return self.inner.format_prompt(problem)

    def gold_completion(self, problem: Problem) -> str | None:
        return self.inner.gold_completion(problem)

    def wrong_completions(self, problem: Problem) -> list[str]:
        return self.inner.wrong_completions(problem)

    def examples(self) -> list[Problem]:
        return self.inner.examples()


class FlakyEnv(_InnerHooks, Environment):
    """Wraps a registered environment and raises on every ``raise_every``-th call (0 = never), on
    every call with ``always_raise``, or on every call after the first ``raise_after`` (0 = never:
    a verifier that dies mid-run): a verifier failing in production, contained by callers."""

    def __init__(self, inner: str = "math-v1", raise_every: int = 3, always_raise: bool = False, raise_after: int = 0):
        import envs

        self.inner = envs.make(inner)
        self.raise_every = raise_every
        self.always_raise = always_raise
        self.raise_after = raise_after
        self._calls = 0

    def verify(self, problem: Problem, completion: str) -> Verdict:
        self._calls += 1
        if self.always_raise or (self.raise_every and self._calls % self.raise_every == 0) or 0 < self.raise_after < self._calls:
            raise RuntimeError(f"flaky verifier failed on call {self._calls}")
        return self.inner.verify(problem, completion)


class HangingEnv(FlakyEnv):
    """Wraps a registered environment and never returns from ``verify`` (``busy=True``: spins on
    the CPU instead of sleeping). With ``every=k`` only completions whose length is a multiple of k
    hang, the rest are verified by the inner environment."""

    def __init__(self, inner: str = "math-v1", every: int = 1, busy: bool = False):
        super().__init__(inner, raise_every=0)
        self.every = every
        self.busy = busy

    def verify(self, problem: Problem, completion: str) -> Verdict:
        if self.every and len(completion) % self.every == 0:
            while self.busy:
                pass
            time.sleep(10**6)
        return self.inner.verify(problem, completion)


class SegfaultEnv(FlakyEnv):
    """Wraps a registered environment and kills its own process with SIGSEGV in every ``verify``
    (a native extension crashing): only ever verify it in a worker process."""

    def __init__(self, inner: str = "math-v1"):
        super().__init__(inner, raise_every=0)

    def verify(self, problem: Problem, completion: str) -> Verdict:
        os.kill(os.getpid(), signal.SIGSEGV)
        return self.inner.verify(problem, completion)  # not reached


BAD_VERDICTS: dict[str, dict[str, Any]] = {
    "nan": {"reward": math.nan, "passed": "yes"},
    "inf": {"reward": math.inf, "passed": True},
    "str_reward": {"reward": "1.0", "passed": True},
    "unknown_status": {"reward": 1.0, "passed": True, "status": "great"},
    "bad_step": {"reward": 1.0, "passed": True, "steps": (StepReward(0, 1, math.nan),)},
}
"""Malformed verdicts a buggy verifier might return, by name (fields of `Verdict`)."""


class BadVerdictEnv(FlakyEnv):
    """Wraps a registered environment and returns the malformed verdict ``BAD_VERDICTS[bad]`` for
    every completion (``bad`` may be a list: one per call, in turn)."""

    def __init__(self, inner: str = "math-v1", bad: str | list[str] = "nan"):
        super().__init__(inner, raise_every=0)
        self.bad = [bad] if isinstance(bad, str) else list(bad)

    def verify(self, problem: Problem, completion: str) -> Verdict:
        self._calls += 1
        return Verdict(**BAD_VERDICTS[self.bad[(self._calls - 1) % len(self.bad)]])


class FaultyStepEnv(_InnerHooks, MultiTurnEnvironment):
    """A multi-turn wrapper of a registered environment whose ``step`` misbehaves: ``fault="raise"``
    raises, ``"hang"`` never returns, ``"junk"`` returns an observation that is not text,
    ``"huge"`` returns an observation of ``huge_chars`` characters, ``""`` answers ``"ok\\n"``.
    A model turn stops at any of a few frequent characters, so even a tiny random model calls
    ``step`` at once; the final answer is judged by the inner environment."""

    stop = tuple("aeiost")
    FAULTS = ("", "raise", "hang", "junk", "huge")

    def __init__(self, inner: str = "math-v1", fault: str = "", step_timeout_s: float = 1.0, huge_chars: int = 5_000_000):
        import envs

        if fault not in self.FAULTS:
            raise ValueError(f"FaultyStepEnv: fault must be one of {self.FAULTS}, got {fault!r}")
        self.inner = envs.make(inner)
        self.fault = fault
        self.huge_chars = huge_chars
        self.limits = EpisodeLimits(max_turns=3, max_tokens=96, step_timeout_s=step_timeout_s)

    def step(self, problem: Problem, turns) -> StepResult:
        if self.fault == "raise":
            raise RuntimeError("step exploded")
        if self.fault == "hang":
            time.sleep(10**6)
        if self.fault == "junk":
            return StepResult({"not": "text"})  # type: ignore[arg-type]
        return StepResult("x " * (self.huge_chars // 2) if self.fault == "huge" else "ok\n")

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return self.inner.verify(problem, completion)


def register_testing_envs() -> None:
    """Register ``testing/hang-v1``, ``testing/raise-v1``, ``testing/nan-v1``, ``testing/segfault-v1`` and the multi-turn
    ``testing/step-{hang,raise,junk,huge}-v1`` (each wraps ``math-v1``; `envs.make` kwargs change
    the inner environment or the behaviour)."""
    import envs

    envs.register("testing/hang-v1", HangingEnv, override=True, description="never returns from verify (tests)")
    envs.register("testing/raise-v1", FlakyEnv, override=True, kwargs={"always_raise": True},
                  description="raises on every verify call (tests)")
    envs.register("testing/nan-v1", BadVerdictEnv, override=True, description="returns Verdict(reward=nan, passed='yes') (tests)")
    envs.register("testing/segfault-v1", SegfaultEnv, override=True, description="segfaults in verify; use verify kind process (tests)")
    for fault, what in [("hang", "never returns from step"), ("raise", "raises in step"), ("junk", "returns a non-text observation from step"),
                        ("huge", "returns a 5 MB observation from step")]:
        envs.register(f"testing/step-{fault}-v1", FaultyStepEnv, override=True, kwargs={"fault": fault}, description=f"multi-turn; {what} (tests)")
