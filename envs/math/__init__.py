"""Math answers: extraction, comparison and the ``math`` environment.

    from envs.math import check
    check("... so \\boxed{42}", "42").passed  # True
"""

from envs.math.env import MathEnv, check
from envs.math.extract import Extraction, extract_answer

__all__ = ["Extraction", "MathEnv", "check", "extract_answer"]
