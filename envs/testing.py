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
