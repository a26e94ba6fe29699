"""The `Environment` contract: turn a problem into a prompt and judge a completion.

An environment is stateless and picklable so that `verify` can run in worker processes. Subclasses
implement `verify`; everything else has a sensible default. The self-check hooks
(`gold_completion`, `wrong_completions`, `examples`) let `rlvr envs check` test an environment
without knowing anything about it (`echo_completions` too: a copy of the prompt must not pass).
"""

from __future__ import annotations

import time
import traceback
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Sequence

from envs.types import Message, Problem, Verdict
from envs.verdicts import validate_verdict

if TYPE_CHECKING:
    from envs.episode import Episode


class Environment(ABC):
    """A verifiable environment. Register it with `envs.register` to get listing, self-checks,
    training and evaluation.

    Attributes:
        id: The registered id, set by `envs.make` (empty for an environment built by hand).
    """

    id: str = ""

    def format_prompt(self, problem: Problem) -> str | list[Message]:
        """The prompt a policy sees. Default: the problem's own prompt."""
        return problem.prompt

    @abstractmethod
    def verify(self, problem: Problem, completion: str) -> Verdict:
        """Judge ``completion`` (the model's text after the prompt) against ``problem``.

        Must be deterministic. May raise: callers go through `safe_verify`, which turns an
        exception into a ``Status.ERROR`` verdict.
        """

    def verify_episode(self, problem: Problem, episode: Episode) -> Verdict:
        """Judge a multi-turn episode (`envs.episode`). A single-turn environment judges the model's
        own text, observations left out; `envs.MultiTurnEnvironment` refines this."""
        return self.verify(problem, episode.model_text)

    def verify_many(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        """Verify a batch. Override for a batched verifier; the default calls `safe_verify` per item.

        For parallel verification across processes use `envs.pool.VerifierPool`.
        """
        if len(problems) != len(completions):
            raise ValueError(f"verify_many: {len(problems)} problems but {len(completions)} completions")
        return [safe_verify(self, p, c) for p, c in zip(problems, completions)]

    # -- self-check hooks (used by `rlvr envs check`) -----------------------------------------

    def gold_completion(self, problem: Problem) -> str | None:
        """A completion that must pass, or None if the environment cannot build one."""
        return None

    def wrong_completions(self, problem: Problem) -> list[str]:
        """Plausible but wrong completions (perturbed answers) that must fail."""
        return []

    def answer_instruction(self, problem: Problem) -> str:
        """How to write the answer so that `verify` finds it, said to a chat model after the
        question (``prompt.instruction`` overrides it). Default: nothing to say."""
        return ""

    def echo_completions(self, problem: Problem) -> list[str]:
        """Completions that only restate the problem and must fail. Default: the prompt's text."""
        prompt = problem.prompt if isinstance(problem.prompt, str) else "\n".join(m.get("content", "") for m in problem.prompt)
        return [prompt] if prompt.strip() else []

    def examples(self) -> list[Problem]:
        """A few problems for self-checks when no task is bound to this environment."""
        return []


def safe_verify(env: Environment, problem: Problem, completion: str | Episode) -> Verdict:
    """`env.verify` (`env.verify_episode` for a multi-turn `Episode`) with containment: an
    exception, or a verdict that is not well formed (NaN reward, non-bool ``passed``, unknown
    status; see `envs.verdicts`), becomes an ``error`` verdict with the reason in ``info``; the
    wall time is recorded in ``info['verify_s']``."""
    start = time.perf_counter()
    try:
        if isinstance(completion, str):
            verdict = validate_verdict(env.verify(problem, completion), f"{type(env).__name__}.verify")
        else:
            verdict = validate_verdict(env.verify_episode(problem, completion), f"{type(env).__name__}.verify_episode")
    except Exception as e:
        verdict = Verdict.error(
            f"{type(e).__name__}: {e}", env=env.id or type(env).__name__, problem=problem.id,
            traceback=traceback.format_exc(limit=8),
        )
    verdict.info.setdefault("verify_s", time.perf_counter() - start)
    return verdict
