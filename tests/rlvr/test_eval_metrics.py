import itertools

import pytest

from rlvr.eval.metrics import ks_up_to, majority_correct, mean_score_interval, pass_at_k, wilson_interval


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
    # mean@k over 100 problems scoring 0 and 1 alternately: Wilson over the 100 problems
    assert mean_score_interval([0.0, 1.0] * 50) == pytest.approx(wilson_interval(50, 100))
    assert ks_up_to(8) == [1, 2, 4, 8] and ks_up_to(5) == [1, 2, 4, 5] and ks_up_to(1) == [1]


def test_mean_score_interval_does_not_collapse_at_zero_or_one():
    # 0/20: the normal interval of per-problem means read 0.000-0.000
    lo, hi = mean_score_interval([0.0] * 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    lo, hi = mean_score_interval([1.0] * 20)
    assert hi == 1.0 and lo == pytest.approx(1 - 0.1611, abs=1e-4)
    # fractional scores (mean@4 of 0.25 on each problem) sit inside [0, 1] around their mean
    lo, hi = mean_score_interval([0.25] * 40)
    assert lo < 0.25 < hi and (lo, hi) == pytest.approx(wilson_interval(10, 40))
