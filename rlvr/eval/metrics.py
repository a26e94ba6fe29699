"""Evaluation statistics, as pure functions.

- pass@k: unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)`` for n samples of
  which c are correct, averaged over problems.
- mean@k: mean accuracy over the k samples of each problem, averaged over problems.
- maj@k: a problem counts as solved when the most frequent extracted answer among its k samples
  is correct (ties broken by first occurrence); samples without an answer do not vote.
- Across seeds (several training runs of one configuration): the mean with a 95% Student-t
  interval (`mean_t_interval`), and for paired differences a two-level bootstrap that resamples
  seeds, then problems (`two_level_bootstrap`), so both training noise and the choice of problems
  are in the interval.
- Confidence intervals (95%) over problems: the Wilson score interval. Greedy accuracy: over problems. mean@k:
  over problems, each problem scored by the mean of its k samples (``successes`` = sum of those
  means). A score in [0, 1] with mean p has variance at most p(1-p), so treating each problem's
  mean as one Bernoulli trial is conservative, and unlike a normal interval of the per-problem
  means it does not collapse to a point when every problem scores 0 (or 1): 0/20 gives 0–0.161.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: probability that at least one of k of the n samples is correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k/i), numerically stable
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """Whether the most frequent non-empty answer is a correct one."""
    votes = Counter(a for a in answers if a)
    if not votes:
        return False
    top = max(votes, key=lambda a: (votes[a], -answers.index(a)))
    return any(c for a, c in zip(answers, correct) if a == top)


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a proportion of ``successes`` out of ``n`` (``successes`` may
    be fractional: a sum of per-problem scores in [0, 1])."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z**2 / (4 * n**2)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_score_interval(scores: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """95% interval of the mean of per-problem scores in [0, 1] (e.g. mean@k): Wilson over the
    problems (see the module docstring for why that is conservative)."""
    return wilson_interval(float(sum(scores)), len(scores), z)


def ks_up_to(n: int) -> list[int]:
    """1, 2, 4, ... up to n, plus n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def paired_difference_interval(a: Sequence[bool], b: Sequence[bool], z: float = 1.96) -> tuple[float, float, float]:
    """``(b - a, lo, hi)``: the difference of two accuracies measured on the same problems, with a
    95% interval that uses the pairing (Newcombe's hybrid score interval for paired proportions,
    method 10 of Newcombe 1998, built from the two Wilson intervals and the phi correlation of the
    2x2 table). Pairing matters: two runs that agree on most problems have a much narrower
    interval for their difference than two independent samples would."""
    if len(a) != len(b):
        raise ValueError(f"paired accuracies need the same problems: {len(a)} vs {len(b)}")
    n = len(a)
    if n == 0:
        return (0.0, -1.0, 1.0)
    both = sum(1 for x, y in zip(a, b) if x and y)
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    neither = n - both - only_a - only_b
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson_interval(both + only_a, n, z)
    l2, u2 = wilson_interval(both + only_b, n, z)
    margins = (both + only_a) * (neither + only_b) * (both + only_b) * (neither + only_a)
    phi = 0.0 if margins == 0 else (both * neither - only_a * only_b) / math.sqrt(margins)  # 0 for an empty margin, as published
    d = p2 - p1
    lower = d - math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0.0))
    upper = d + math.sqrt(max((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2, 0.0))
    return (d, max(-1.0, lower), min(1.0, upper))


# two-sided 95% quantiles of Student's t, by degrees of freedom
_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
          2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom: tabulated up to 30, then the
    Cornish-Fisher expansion around the normal quantile (within 0.001 of the exact value)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T_975):
        return _T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_t_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """``(mean, lo, hi)``: the mean of ``values`` (e.g. one accuracy per seed) with its 95% Student-t
    interval; ``lo`` and ``hi`` are None for a single value (no spread to measure)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n == 1:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def two_level_bootstrap(diffs: Sequence[Sequence[float]], draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of per-problem differences ``diffs`` ``[seeds][problems]`` (the same
    problems for every seed): the mean over seeds of each seed's mean difference, and a 95%
    percentile interval from a two-level bootstrap: each draw resamples the seeds, then the
    problems (the same problems for every seed of the draw). With one seed it is a bootstrap over
    problems alone."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"expected a [seeds][problems] table of differences, got shape {d.shape}")
    seeds, problems = d.shape
    rng = np.random.default_rng(seed)
    stats = np.empty(draws)
    for start in range(0, draws, 256):  # in chunks: [chunk, problems] at a time
        k = min(256, draws - start)
        chosen = rng.integers(0, seeds, size=(k, seeds))
        weights = np.zeros((k, seeds))
        np.add.at(weights, (np.arange(k)[:, None], chosen), 1.0 / seeds)
        by_problem = weights @ d  # [k, problems]: each draw's mean over its resampled seeds
        picks = rng.integers(0, problems, size=(k, problems))
        stats[start:start + k] = np.take_along_axis(by_problem, picks, axis=1).mean(axis=1)
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi)
