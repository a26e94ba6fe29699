"""What an evaluation measures (`EvalSettings`), checked without loading torch or transformers, so
`rlvr eval` refuses a bad option before anything heavy is imported."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from envs.pool import KINDS
from rlvr.rollout.prompts import PromptConfig


class InvalidSetting(ValueError):
    """An `EvalSettings` field out of range; ``field`` names it."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name} {message}")
        self.field = field_name
        self.message = message


MAX_SAMPLES = 2**16  # samples per problem (--n)
MAX_LIMIT = 10_000_000  # problems (--limit): the problems are read into memory before the first is generated
MAX_VERIFY_WORKERS = 1024  # verification workers (threads or processes), here and in training (verify.workers)
MAX_THREADS = 4096  # torch CPU threads (--threads here, threads in training): beyond it torch overflows


@dataclass
class EvalSettings:
    """What to measure. Out-of-range values raise `InvalidSetting` naming the field.

    Attributes:
        split: The task split (held-out ``test`` by default).
        greedy: Measure greedy (temperature 0) accuracy.
        n: Samples per problem for mean@k / pass@k / maj@k (0 = no sampling).
        temperature / top_p: Sampling parameters for the n samples.
        max_new_tokens: Longest completion.
        seed: Sampling seed.
        limit: Evaluate only the first ``limit`` problems, read from the source without loading
            the rest of the split (None = the whole split; required for an unbounded split).
        chunk_prompts: Prompts per generate call (verification of one chunk overlaps the next).
        verify_workers / verify_kind / verify_timeout_s: Verification pool (see
            `envs.pool.VerifierPool`); every verification is bounded by ``verify_timeout_s``.
        prompt: How prompts are shown (`rlvr.rollout.prompts.PromptConfig`; resolved against the
            engine's tokenizer: ``auto`` is chat for a chat model).
    """

    split: str = "test"
    greedy: bool = True
    n: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int = 0
    limit: int | None = None
    chunk_prompts: int = 64
    verify_workers: int = 1
    verify_kind: str = "thread"
    verify_timeout_s: float = 30.0
    prompt: PromptConfig = field(default_factory=PromptConfig)

    def __post_init__(self) -> None:
        for name, ok, message in (
            ("n", 0 <= self.n <= MAX_SAMPLES, f"must be in 0..{MAX_SAMPLES}, got {self.n}"),
            ("limit", self.limit is None or 1 <= self.limit <= MAX_LIMIT, f"must be in 1..{MAX_LIMIT}, got {self.limit}"),
            ("seed", 0 <= self.seed <= 2**32 - 1, f"must be in 0..{2**32 - 1} (as training's seed), got {self.seed}"),
            ("temperature", 0 <= self.temperature < math.inf, f"must be >= 0 and finite, got {self.temperature}"),
            ("temperature", self.n == 0 or self.temperature > 0,
             f"must be > 0 to draw {self.n} samples per problem (greedy accuracy is measured separately), got {self.temperature}"),
            ("top_p", 0 < self.top_p <= 1, f"must be in (0, 1], got {self.top_p}"),
            ("max_new_tokens", 1 <= self.max_new_tokens <= 2**20, f"must be in 1..{2**20} (as training's), got {self.max_new_tokens}"),
            ("chunk_prompts", self.chunk_prompts >= 1, f"must be >= 1, got {self.chunk_prompts}"),
            ("verify_workers", 0 <= self.verify_workers <= MAX_VERIFY_WORKERS, f"must be in 0..{MAX_VERIFY_WORKERS}, got {self.verify_workers}"),
            ("verify_kind", self.verify_kind in KINDS, f"must be one of {', '.join(KINDS)}, got {self.verify_kind!r}"),
            ("verify_timeout_s", 0 < self.verify_timeout_s <= 86400, f"must be > 0 seconds and at most a day (86400), got {self.verify_timeout_s}"),
            ("n", self.greedy or self.n > 0, "is 0 and greedy is off: nothing to measure"),
        ):
            if not ok:
                raise InvalidSetting(name, message)


SETTING_NAMES = tuple(f.name for f in fields(EvalSettings))
