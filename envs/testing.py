"""Environments that misbehave on purpose, for testing pipelines (importable, so they also work in
worker processes). Register one to see how a trainer contains a faulty verifier."""

from __future__ import annotations

import time

from envs.base import Environment
from envs.types import Problem, Verdict


class FaultyEnv(Environment):
    """Completion ``"ok"`` passes, ``"boom"`` raises, ``"hang"`` sleeps ``hang_s`` seconds, anything
    else fails. With ``raise_every=k``, every k-th call raises regardless of the completion."""

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
        ok = completion == "ok"
        return Verdict(float(ok), ok, extracted=completion)


class FlakyEnv(Environment):
    """Wraps a registered environment and raises on every ``raise_every``-th call (0 = never) or
    on every call with ``always_raise``: a verifier failing in production, contained by callers."""

    def __init__(self, inner: str = "math-v1", raise_every: int = 3, always_raise: bool = False):
        import envs

        self.inner = envs.make(inner)
        self.raise_every = raise_every
        self.always_raise = always_raise
        self._calls = 0

    def format_prompt(self, problem: Problem):
        return self.inner.format_prompt(problem)

    def verify(self, problem: Problem, completion: str) -> Verdict:
        self._calls += 1
        if self.always_raise or (self.raise_every and self._calls % self.raise_every == 0):
            raise RuntimeError(f"flaky verifier failed on call {self._calls}")
        return self.inner.verify(problem, completion)
