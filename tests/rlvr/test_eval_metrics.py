import itertools
import math

import pytest

from rlvr.eval.metrics import ks_up_to, majority_correct, mean_interval, pass_at_k, wilson_interval


@pytest.mark.parametrize("n,c", [(8, 0), (8, 1), (8, 3), (8, 8), (5, 2)])
def test_pass_at_k_matches_brute_force(n, c):
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(range(n), k))
        brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(brute)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_majority_vote():
    assert majority_correct(["5", "7", "5", None], [True, False, True, False])
    assert not majority_correct(["7", "7", "5"], [False, False, True])
    assert majority_correct(["5", "7"], [True, False])  # tie: first occurrence wins
    assert not majority_correct([None, None], [False, False])


def test_intervals():
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = mean_interval([0.0, 1.0] * 50)
    assert (lo + hi) / 2 == pytest.approx(0.5) and hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.25 * 100 / 99 / 100), rel=1e-6)
    assert ks_up_to(8) == [1, 2, 4, 8] and ks_up_to(5) == [1, 2, 4, 5] and ks_up_to(1) == [1]
