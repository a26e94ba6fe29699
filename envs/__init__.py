"""Verifiable environments: the `Environment` contract, its typed values, and the registry.

    import envs
    env = envs.make("math-v1")
    verdict = env.verify(problem, completion)

A plain reward function ``fn(problem, completion) -> float | bool`` becomes one with
`envs.from_function` (or the `envs.reward_function` decorator); the checkers it may call are in
`envs.rewards`.

Multi-turn environments (tool calls, checker messages) subclass `MultiTurnEnvironment` and
register the same way; see `envs.episode`.

Third-party packages register environments through the ``rlvr.envs`` entry-point group (see
`envs.registry`). This package imports nothing heavy: listing environments stays fast.
"""

from envs.base import Environment, safe_verify
from envs.episode import End, Episode, EpisodeLimits, MultiTurnEnvironment, Role, StepResult, ToolCall, Turn
from envs.function import BatchedFunctionEnv, FunctionEnv, from_function, reward_function
from envs.registry import ParsedId, Registry, RegistryError, Spec, parse_id
from envs.types import CutText, Message, Problem, Status, StepReward, Verdict

ENVS: Registry[Environment] = Registry("environment", entry_point_group="rlvr.envs")
"""Every registered environment, by versioned id."""


def register(id: str, entry_point=None, **options):
    """Register an environment (a class or factory returning an `Environment`, or a lazy
    ``"module:attribute"`` string). Without ``entry_point``, returns a decorator::

        @envs.register("acme/sudoku-v1")
        class Sudoku(envs.Environment): ...

    Options: ``description``, ``kwargs`` (defaults for the factory), ``override``.
    """
    return ENVS.register(id, entry_point, **options)


def make(id: str, **kwargs) -> Environment:
    """Build the environment registered under ``id`` (a bare name means its latest version)."""
    env = ENVS.make(id, **kwargs)
    if not isinstance(env, Environment):
        raise RegistryError(f"environment {id!r} built a {type(env).__name__}, not an envs.Environment")
    return env


__all__ = [
    "BatchedFunctionEnv", "CutText", "ENVS", "End", "Environment", "Episode", "EpisodeLimits", "FunctionEnv", "Message",
    "MultiTurnEnvironment", "ParsedId", "Problem",
    "Registry", "RegistryError", "Role", "Spec", "Status", "StepResult", "StepReward", "ToolCall", "Turn", "Verdict",
    "from_function", "make", "parse_id", "register", "reward_function", "safe_verify",
]
