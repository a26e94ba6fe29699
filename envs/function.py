"""Reward functions as environments: a plain function becomes an `Environment` with the whole
contract (errors contained, every call bounded by the verifier pool, self-check hooks).

    def reward(problem, completion):            # -> float | bool | None | envs.Verdict
        return completion.strip().endswith(str(problem.reference))

    env = envs.from_function(reward, id="acme/ends-with-v1")   # registered: task.env=acme/ends-with-v1

What the function returns becomes the verdict: ``True``/``False`` a passed/failed verdict with
reward 1/0; a number that reward, passed when it reaches ``pass_reward``; ``None`` a ``no_answer``
verdict (nothing to judge); an `envs.Verdict` is kept as it is (the math and code checkers,
`envs.rewards`, return one). An exception, NaN or anything else is an ``error`` verdict with the
reason, never a reward of 0 (`envs.base.safe_verify`). A batched function (``batched=True``)
takes lists of problems and completions and returns one value per item (a result of another length,
a single value or a dict is an ``error`` verdict for every item, saying so).

The environment pickles its function by name, so it runs in verifier processes
(``verify.kind=process``) when the function is defined with ``def`` at the top level of a module.
A lambda, a function defined inside another one, or one from a notebook's ``__main__`` works
with threads (``verify.kind=thread``, the default); sending it to a process is refused with a
message saying so.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import pickle
import sys
from typing import Any, Callable, Sequence

from envs.base import Environment
from envs.types import Problem, Status, Verdict

RewardFn = Callable[[Problem, str], Any]
BatchedRewardFn = Callable[[Sequence[Problem], Sequence[str]], Sequence[Any]]

_REGISTERED: set[str] = set()  # ids registered by from_function: registering one again replaces it (a re-run notebook cell)


def to_verdict(value: Any, pass_reward: float = 1.0) -> Verdict:
    """A reward function's return value as a verdict (see the module docstring); raises
    `TypeError` for a value that is not a reward (`safe_verify` turns that into an error verdict)."""
    if isinstance(value, Verdict):
        return value
    if value is None:
        return Verdict.no_answer(reason="the reward function returned None")
    if isinstance(value, bool):
        return Verdict(reward=float(value), passed=value, status=Status.OK)
    if not isinstance(value, numbers.Real) and hasattr(value, "item") and getattr(value, "shape", None) in ((), None):
        value = value.item()  # a numpy scalar or a 0-d tensor
        if isinstance(value, bool):
            return Verdict(reward=float(value), passed=value, status=Status.OK)
    if isinstance(value, numbers.Real):
        reward = float(value)
        if not math.isfinite(reward):
            raise ValueError(f"the reward function returned {reward}, not a finite reward")
        return Verdict(reward=reward, passed=reward >= pass_reward, status=Status.OK)
    raise TypeError(f"the reward function returned a {type(value).__name__}; return a float, a bool, None (no answer) or an envs.Verdict")


def unpicklable_reason(fn: Callable[..., Any], what: str = "reward function") -> str | None:
    """Why ``fn`` cannot be sent to a worker process (pickle sends a function by its importable
    name), or None when it can."""
    name = f"{what} {getattr(fn, '__qualname__', None) or type(fn).__name__}"
    if "<lambda>" in name or "<locals>" in name:
        kind = "a lambda" if "<lambda>" in name else "defined inside another function"
        return f"{name} is {kind}: it has no importable name"
    module = getattr(fn, "__module__", None)
    if module == "__main__" and not getattr(sys.modules.get("__main__"), "__file__", None):
        return f"{name} is defined in an interactive session (a notebook): a worker process cannot import it"
    try:
        pickle.dumps(fn)
    except Exception as e:
        return f"{name} cannot be pickled ({type(e).__name__}: {e})"
    return None


def _check_callable(fn: Any, what: str, arity: int) -> None:
    if not callable(fn):
        raise TypeError(f"{what} must be a function, got {type(fn).__name__}")
    try:
        inspect.signature(fn).bind(*range(arity))
    except TypeError:
        raise TypeError(f"{what} {getattr(fn, '__name__', fn)!r} must accept {arity} positional argument(s)") from None
    except ValueError:  # a builtin without a signature: trust it
        pass


class FunctionEnv(Environment):
    """An environment whose `verify` is a reward function ``fn(problem, completion)``.

    Args:
        fn: The reward function; its return value becomes the verdict (`to_verdict`).
        pass_reward: A numeric reward at or above this counts as passed (accuracy counts passes).
        gold: ``gold(problem) -> str``: a completion that must pass (`rlvr envs check`).
        wrong: ``wrong(problem) -> list[str]``: plausible completions that must fail.
        instruction: How to write the answer, said to a chat model after the question.
        examples: Problems for `rlvr envs check` when no task is bound to the environment.
    """

    def __init__(self, fn: RewardFn, *, pass_reward: float = 1.0, gold: Callable[[Problem], str | None] | None = None,
                 wrong: Callable[[Problem], list[str]] | None = None, instruction: str = "", examples: Sequence[Problem] = ()):
        _check_callable(fn, "reward function", 2)
        for hook, what in ((gold, "gold"), (wrong, "wrong")):
            if hook is not None:
                _check_callable(hook, what, 1)
        if not isinstance(pass_reward, numbers.Real) or not math.isfinite(pass_reward):
            raise ValueError(f"pass_reward must be a finite number, got {pass_reward!r}")
        if not all(isinstance(p, Problem) for p in examples):
            raise TypeError("examples must be envs.Problem objects")
        self.fn = fn
        self.pass_reward = float(pass_reward)
        self.gold = gold
        self.wrong = wrong
        self.instruction = instruction
        self._examples = list(examples)

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return to_verdict(self.fn(problem, completion), self.pass_reward)

    def gold_completion(self, problem: Problem) -> str | None:
        return self.gold(problem) if self.gold is not None else None

    def wrong_completions(self, problem: Problem) -> list[str]:
        return list(self.wrong(problem)) if self.wrong is not None else []

    def answer_instruction(self, problem: Problem) -> str:
        return self.instruction

    def examples(self) -> list[Problem]:
        return list(self._examples)

    def __getstate__(self) -> dict[str, Any]:
        # say why a function cannot go to a worker process, in one line, before pickle says it obscurely
        for hook, what in ((self.fn, "reward function"), (self.gold, "gold hook"), (self.wrong, "wrong hook")):
            reason = hook is not None and unpicklable_reason(hook, what)
            if reason:
                raise TypeError(f"{reason}; define it with `def` at the top level of a module to verify in processes, "
                                "or use verify.kind=thread")
        return dict(self.__dict__)


class BatchedFunctionEnv(FunctionEnv):
    """`FunctionEnv` over a batched reward function ``fn(problems, completions) -> list``: the
    verifier pool hands it whole batches (``verify.kind=thread``); one item at a time elsewhere."""

    def __init__(self, fn: BatchedRewardFn, **options: Any):
        super().__init__(fn, **options)

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return self.verify_many([problem], [completion])[0]

    def verify_many(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        if len(problems) != len(completions):
            raise ValueError(f"verify_many: {len(problems)} problems but {len(completions)} completions")
        result = self.fn(list(problems), list(completions))
        values, mismatch = _one_per_item(result, len(problems))
        if mismatch:  # the whole batch's result is wrong: every item says why (calling again item by item would hide it)
            reason = f"the batched reward function {mismatch}; return a list with one value per completion"
            return [Verdict.error(reason, env=self.id or type(self).__name__) for _ in problems]
        verdicts = []
        for value in values:
            try:
                verdicts.append(to_verdict(value, self.pass_reward))
            except (TypeError, ValueError) as e:  # one bad value is that item's error, not the batch's
                verdicts.append(Verdict.error(f"{type(e).__name__}: {e}", env=self.id or type(self).__name__))
        return verdicts


def _one_per_item(result: Any, n: int) -> tuple[list[Any], str]:
    """A batched function's result as a list of ``n`` values, or what is wrong with it."""
    if isinstance(result, dict):
        return [], f"returned a dict ({len(result)} keys) for {n} completions"
    if isinstance(result, (str, bytes)) or not hasattr(result, "__iter__") or getattr(result, "shape", None) == ():
        return [], f"returned a single {type(result).__name__} for {n} completions"
    values = list(result)
    if len(values) != n:
        return [], f"returned {len(values)} values for {n} completions"
    return values, ""


def from_function(fn: Callable[..., Any], id: str | None = None, *, batched: bool = False, description: str = "",
                  **options: Any) -> FunctionEnv:
    """An environment that judges with ``fn`` (see `FunctionEnv` for ``options``: ``pass_reward``,
    ``gold``, ``wrong``, ``instruction``, ``examples``).

    With ``id`` (versioned, ``name-vN``) it is also registered, so a config names it
    (``task.env=ID``, or ``env=ID`` in `tasks.from_dataset`) in this process; registering the same
    id again from a function replaces it, and an id registered otherwise is refused.
    """
    import envs

    cls = BatchedFunctionEnv if batched else FunctionEnv
    env = cls(fn, **options)  # checks fn and the options now, not when a config first names the id
    if id is not None:
        key = str(envs.parse_id(id))
        if key in envs.ENVS.ids() and key not in _REGISTERED:  # ids() loads the plugins (the built-ins) first
            raise envs.RegistryError(f"environment {key!r} is already registered (by {envs.ENVS.spec(key).source}); "
                                     "pick another id for the reward function")
        doc = (inspect.getdoc(fn) or "").strip()
        envs.register(key, functools.partial(cls, fn, **options), override=True, source="python",
                      description=description or (doc.splitlines()[0] if doc else f"reward function {getattr(fn, '__qualname__', fn)}"))
        _REGISTERED.add(key)
        env.id = key
    return env


def reward_function(id: str, *, batched: bool = False, description: str = "", **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the function below as environment ``id`` (`from_function`) and leave
    the function itself unchanged (so it still pickles by its name)::

        @envs.reward_function("acme/ends-with-v1")
        def ends_with(problem, completion): ...
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        from_function(fn, id, batched=batched, description=description, **options)
        return fn

    return wrap
