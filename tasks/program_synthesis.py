"""Procedural program synthesis: write a one-expression Python function from input/output examples.

Small enough for the embedded character-level CPU model: the prompt shows a few examples and the
start of the function, the completion is one short expression::

    f(1)=5 f(4)=14 f(6)=20
    def f(x):return           <- prompt ends here
    x*3+2                     <- completion

The hidden function comes from a small grammar of integer expressions. The completion is graded
by ``code-v1`` on the shown inputs *and* on held-out inputs (so copying a lookup table of the
examples fails), with the expected outputs computed here and never sent to the sandbox.
Two items are the same question when their functions agree on a fixed probe range, so a
held-out function never reappears in training under another form.

Demonstrations (the solutions used for supervised warm-up) can mix in exactly that lookup table
(``table_frac``): a model warmed up on the mix sometimes memorises the examples instead of writing
the function, and the hidden tests, run in the sandbox, are what teach it to generalise under RL.
The embedded code quickstart (``rlvr/configs/code_quickstart.yaml``) uses this.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

from envs.code.testcases import FunctionTest, TestSuite
from envs.types import Problem
from tasks.base import TaskError, stable_hash
from tasks.procedural import ProceduralTask

PREFIX = "def f(x):return "
PROBE = tuple(range(-6, 16))

# (template, constant ranges): each is a function of x and the drawn constants
TEMPLATES: dict[str, tuple[Callable[..., int], tuple[range, ...]]] = {
    "x+{0}": (lambda x, a: x + a, (range(1, 50),)),
    "x-{0}": (lambda x, a: x - a, (range(1, 50),)),
    "{0}-x": (lambda x, a: a - x, (range(1, 50),)),
    "x*{0}": (lambda x, a: x * a, (range(2, 13),)),
    "x*{0}+{1}": (lambda x, a, b: x * a + b, (range(2, 13), range(1, 20))),
    "x*{0}-{1}": (lambda x, a, b: x * a - b, (range(2, 13), range(1, 20))),
    "(x+{0})*{1}": (lambda x, a, b: (x + a) * b, (range(1, 10), range(2, 13))),
    "x*x": (lambda x: x * x, ()),
    "x*x+{0}": (lambda x, a: x * x + a, (range(1, 20),)),
    "x*x-x": (lambda x: x * x - x, ()),
    "x%{0}": (lambda x, a: x % a, (range(2, 13),)),
    "x//{0}": (lambda x, a: x // a, (range(2, 13),)),
    "abs(x-{0})": (lambda x, a: abs(x - a), (range(1, 20),)),
    "max(x,{0})": (lambda x, a: max(x, a), (range(1, 20),)),
    "min(x,{0})": (lambda x, a: min(x, a), (range(1, 20),)),
    "x*{0}%{1}": (lambda x, a, b: x * a % b, (range(2, 10), range(3, 13))),
}


class ProgramSynthesisTask(ProceduralTask):
    """Integer functions of one variable from examples (see the module docstring).

    Config:
        shown: How many examples the prompt shows.
        hidden: How many extra, unshown inputs the tests add.
        templates: Expression templates to draw from (keys of `TEMPLATES`).
        x_range: Inclusive range of shown inputs; hidden inputs come from a wider range.
        const_max: Largest constant of every template (None: each template's own range). With
            ``x_range: [0, 2]`` the constants of ``x+{0}``, ``{0}-x`` or ``x*{0}`` can be read off
            the examples, and a wide ``const_max`` keeps the training stream diverse.
        table_frac: Fraction of demonstrations that are a lookup table of the shown examples,
            ``{0:5,1:6,2:7}[x]``, instead of the expression (chosen per problem by a hash of its
            id; does not change the problems themselves). Such a solution fails the hidden tests.

    Held-out splits hold whole functions, so the config must offer many more distinct functions
    than the held-out splits draw (300), or training would be left with a handful of them: too
    small a config is refused with a message that says so.
    """

    max_new_tokens = 256  # one short function (`Task.max_new_tokens`)

    env_id = "code-v1"
    split_sizes = {"train": None, "validation": 100, "test": 200}
    heldout_splits = ("test", "validation")
    default_config: dict[str, Any] = {"shown": 3, "hidden": 5, "templates": sorted(TEMPLATES), "x_range": [0, 9], "const_max": None, "table_frac": 0.0}
    demo_keys = frozenset({"table_frac"})
    frozen: dict[str, str] = {  # tasks/data/program-synthesis-v1/*.jsonl (`rlvr tasks freeze`)
        "test": "sha256:77999ec73428ace207a184eddca36329e84d82099eeadebe7bad8e71f0e48565",
        "validation": "sha256:260c75ca7ebd27e7300b68e68205e32d7f95c5610724be6b09667d5aa4054256",
    }

    def __init__(self, **config: Any):
        super().__init__(**config)
        c = self._config
        unknown = set(c["templates"]) - set(TEMPLATES)
        if not c["templates"] or unknown:
            raise ValueError(f"program-synthesis: 'templates' must be a non-empty subset of {sorted(TEMPLATES)}; unknown: {sorted(unknown)}")
        lo, hi = c["x_range"]
        if not (isinstance(c["shown"], int) and 1 <= c["shown"] <= hi - lo + 1) or not (isinstance(c["hidden"], int) and c["hidden"] >= 1):
            raise ValueError(f"program-synthesis: need 1 <= shown <= size of x_range and hidden >= 1, got {c}")
        if not 0.0 <= c["table_frac"] <= 1.0:
            raise ValueError(f"program-synthesis: table_frac must be in [0, 1], got {c['table_frac']!r}")
        top = c["const_max"]
        if top is not None and not (type(top) is int and top >= max((r.start for t in c["templates"] for r in TEMPLATES[t][1]), default=0)):
            raise ValueError(f"program-synthesis: const_max must be null or an int >= every constant range's start, got {top!r}")
        functions = sum(math.prod(len(r) for r in self._ranges(t)) for t in c["templates"])
        heldout = sum(self.split_sizes[s] or 0 for s in self.heldout_splits)
        if functions < 2 * heldout:
            raise TaskError(f"program-synthesis: templates {sorted(c['templates'])} give at most {functions} distinct functions but "
                            f"the held-out splits draw {heldout}, so training would see few functions; add templates or raise const_max")

    def _ranges(self, template: str) -> tuple[range, ...]:
        top = self._config["const_max"]
        ranges = TEMPLATES[template][1]
        return ranges if top is None else tuple(range(r.start, top + 1) for r in ranges)

    def seed_for(self, split: str, index: int, attempt: int = 0) -> int:
        # const_max came after v1's splits were frozen: left out of the seed at its default, so
        # the default config's items are unchanged
        config = {k: v for k, v in self.item_config.items() if not (k == "const_max" and v is None)}
        return stable_hash(self.id or type(self).__name__, config, split, index, attempt)

    def generate(self, rng: random.Random, split: str, index: int) -> Problem:
        c = self._config
        template = rng.choice(sorted(c["templates"]))
        fn = TEMPLATES[template][0]
        consts = [rng.choice(r) for r in self._ranges(template)]
        expr = template.format(*consts)
        lo, hi = c["x_range"]
        shown = sorted(rng.sample(range(lo, hi + 1), c["shown"]))
        pool = [x for x in range(lo - 5, hi + 8) if x not in shown]
        hidden = sorted(rng.sample(pool, min(c["hidden"], len(pool))))
        def f(x: int) -> int:
            return fn(x, *consts)
        examples = " ".join(f"f({x})={f(x)}" for x in shown)
        tests = tuple(FunctionTest(str(x), f(x)) for x in shown + hidden)
        suite = TestSuite("function", tests, entry_point="f", prefix=PREFIX)
        return Problem(
            id=f"{split}/{index}", prompt=f"{examples}\n{PREFIX}", reference=suite.to_dict(),
            metadata={"solution": expr, "expression": expr, "probe": [f(x) for x in PROBE]},
        )

    def solution(self, problem: Problem) -> str:
        """The demonstration: the expression, or for a ``table_frac`` share of problems a lookup
        table of the shown examples (the first ``shown`` tests)."""
        if stable_hash(self.id, "demo-style", problem.id) / 2**64 >= self._config["table_frac"]:
            return problem.metadata["solution"]
        shown = problem.reference["tests"][: self._config["shown"]]
        return "{" + ",".join(f"{t['args']}:{t['expected']}" for t in shown) + "}[x]"

    def canonical_question(self, problem: Problem) -> str:
        # the function's behaviour, not its spelling: x*2+2 and (x+1)*2 are one question
        return "f:" + ",".join(str(v) for v in problem.metadata["probe"])
