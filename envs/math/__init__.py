"""Math answers: extraction, parsing, exact/symbolic comparison, process rewards, the ``math``
environment.

    from envs.math import check
    check("... so \\boxed{\\frac{1}{2}}", "0.5").passed  # True

Modules, one job each: `extract` (find the final answer; strict or lenient), `prose` (the answer
stated by a closing sentence, for lenient extraction), `forms` (numeric literals and restatements
of the question: answers that cannot pass whatever their value), `lexer` + `parser` (text →
answer tree, never evaluating model text), `nodes` (the tree), `matrices` (matrix expressions
evaluated), `canon` (canonical forms: chains, assignments, relations solved), `sets` (sets of
reals in canonical form), `exact` (pure-Python exact arithmetic), `powers` (huge products of
powers in canonical prime-power form), `numeric` (float refutation), `symbolic` + `worker` (sympy
in supervised processes with a hard deadline), `compare` (the comparison policy), `steps`
(process rewards), `env` (`check`, `MathEnv`). Importing this package does not import sympy.
"""

from envs.math.env import MathEnv, check, plain_number, warmup
from envs.math.extract import EXTRACTION_MODES, Extraction, extract_answer
from envs.math.lexer import ParseError
from envs.math.parser import parse_answer

__all__ = ["EXTRACTION_MODES", "Extraction", "MathEnv", "ParseError", "check", "extract_answer", "parse_answer", "plain_number", "warmup"]
