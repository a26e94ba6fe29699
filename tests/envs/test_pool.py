import sys
import types

import pytest

from envs.base import safe_verify
from envs.pool import VerifierPool
from envs.testing import FaultyEnv
from envs.types import Problem, Status


P = Problem("p/0", "q", None)


def test_safe_verify_contains_exceptions():
    v = safe_verify(FaultyEnv(), P, "boom")
    assert v.status is Status.ERROR and "verifier exploded" in v.info["error"] and v.reward == 0.0


@pytest.mark.parametrize("kind,workers", [("inline", 0), ("thread", 2), ("process", 2)])
def test_pool_verdicts_in_order(kind, workers):
    with VerifierPool(FaultyEnv(), workers=workers, kind=kind, timeout_s=20) as pool:
        completions = ["ok", "no", "boom", "ok"] * 3
        verdicts = pool.verify([P] * len(completions), completions)
    assert [v.passed for v in verdicts] == [c == "ok" for c in completions]
    assert [v.status for v in verdicts].count(Status.ERROR) == 3
    assert pool.stats.errors == 3 and pool.stats.verified == 12


def test_process_pool_times_out_a_hung_verifier_and_recovers():
    with VerifierPool(FaultyEnv(), workers=2, kind="process", timeout_s=1.0) as pool:
        verdicts = pool.verify([P] * 3, ["ok", "hang", "ok"])
        assert [v.status for v in verdicts] == [Status.OK, Status.TIMEOUT, Status.OK]
        # the hung worker is replaced before the next batch
        again = pool.verify([P] * 2, ["ok", "no"])
        assert [v.passed for v in again] == [True, False]
        assert pool.stats.timeouts == 1 and pool.stats.restarts == 1


def test_a_worker_that_segfaults_is_an_error_verdict_and_the_pool_goes_on():
    with VerifierPool(FaultyEnv(), workers=1, kind="process", timeout_s=20) as pool:
        verdicts = pool.verify([P] * 3, ["ok", "segfault", "ok"])
        assert [v.status for v in verdicts] == [Status.OK, Status.ERROR, Status.OK] and verdicts[2].passed
        assert "verifier worker process died (killed by SIGSEGV)" in verdicts[1].info["error"]
        assert pool.stats.errors == 1 and pool.stats.restarts == 1
        assert pool.verify([P], ["ok"])[0].passed  # the replacement worker keeps verifying


def test_process_pool_reports_an_environment_it_cannot_load():
    # a module that exists only in this process: the parent can pickle the class by reference,
    # a spawned worker cannot import it
    module = types.ModuleType("rlvr_parent_only_module")
    Local = type("Local", (FaultyEnv,), {"__module__": module.__name__})
    module.Local = Local
    sys.modules[module.__name__] = module
    with VerifierPool(Local(), workers=1, kind="process", timeout_s=30) as pool:
        verdicts = pool.verify([P] * 2, ["ok", "ok"])
    assert all(v.status is Status.ERROR and "could not load" in v.info["error"] for v in verdicts)


class Batcher(FaultyEnv):
    """Verifies batches its own way; a batch containing 'boom' raises as a whole."""

    calls = 0

    def verify_many(self, problems, completions):
        Batcher.calls += 1
        if "boom" in completions:
            raise RuntimeError("batch failed")
        return [self.verify(p, c) for p, c in zip(problems, completions)]


@pytest.mark.parametrize("kind,workers", [("inline", 0), ("thread", 1)])
def test_batched_environments_get_whole_chunks_and_failures_stay_per_item(kind, workers):
    Batcher.calls = 0
    with VerifierPool(Batcher(), workers=workers, kind=kind) as pool:
        assert [v.passed for v in pool.verify([P] * 3, ["ok", "no", "ok"])] == [True, False, True]
        assert Batcher.calls == 1  # one verify_many call for the chunk
        # the batch raises: each item is verified alone, so only the bad one is an error
        verdicts = pool.verify([P] * 3, ["ok", "boom", "ok"])
    assert [v.status for v in verdicts] == [Status.OK, Status.ERROR, Status.OK]


# -- every verification bounded, whatever the kind (issue 13) ---------------------------------------

import math  # noqa: E402
import subprocess  # noqa: E402
import textwrap  # noqa: E402

import numpy as np  # noqa: E402

from envs.testing import BAD_VERDICTS, BadVerdictEnv, HangingEnv  # noqa: E402
from envs.types import StepReward, Verdict  # noqa: E402


@pytest.mark.parametrize("kind,workers", [("inline", 0), ("thread", 1), ("process", 1)])
def test_one_hang_costs_one_budget_not_one_per_item_behind_it(kind, workers):
    # one worker: the items queued behind the hung one must still be verified (the budget counts
    # from the start of each item, and the hung worker is replaced)
    # (a finite hang, so that an unbounded inline verifier fails this test instead of hanging it)
    with VerifierPool(FaultyEnv(hang_s=20), workers=workers, kind=kind, timeout_s=1.0) as pool:
        verdicts = pool.verify([P] * 4, ["ok", "hang", "ok", "no"])
    assert [v.status for v in verdicts] == [Status.OK, Status.TIMEOUT, Status.OK, Status.OK]
    assert [v.passed for v in verdicts] == [True, False, True, False]
    assert pool.stats.timeouts == 1 and pool.stats.restarts == 1


def test_process_pool_kills_a_busy_verifier_and_goes_on():
    import multiprocessing as mp

    problem = Problem("p/1", "2+3?", "5")
    with VerifierPool(HangingEnv(every=2, busy=True), workers=1, kind="process", timeout_s=1.0) as pool:
        verdicts = pool.verify([problem] * 2, ["spin", "Answer: 5"])  # 4 characters spin, 9 are verified
        spinning = [p for p in mp.active_children() if p.name.startswith("verify-worker")]
    assert [v.status for v in verdicts] == [Status.TIMEOUT, Status.OK] and verdicts[1].passed
    assert len(spinning) == 1  # the killed worker is gone; its replacement verified the second item
    assert not [p for p in mp.active_children() if p.name.startswith("verify-worker")]


def test_hung_threads_are_capped_and_the_rest_fail_fast_with_the_reason():
    with VerifierPool(FaultyEnv(hang_s=10**6), workers=1, kind="thread", timeout_s=0.5, max_stuck=2) as pool:
        verdicts = pool.verify([P] * 5, ["hang"] * 5)
    assert [v.status for v in verdicts] == [Status.TIMEOUT] * 2 + [Status.ERROR] * 3
    assert "stuck" in verdicts[-1].info["error"] and "process" in verdicts[-1].info["error"]
    assert pool.stats.abandoned == 2 and pool.stats.timeouts == 2 and pool.stats.errors == 3


@pytest.mark.parametrize("kind", ["thread", "inline"])
def test_a_hung_thread_never_keeps_the_process_alive(kind, tmp_path):
    # `rlvr train ... verify.timeout_s=3` printed "completed" and never exited: a non-daemon
    # thread stuck in verify was joined at interpreter exit
    script = textwrap.dedent(f"""
        from envs.pool import VerifierPool
        from envs.testing import FaultyEnv
        from envs.types import Problem
        with VerifierPool(FaultyEnv(hang_s=10**6), workers=1, kind={kind!r}, timeout_s=0.5) as pool:
            print([v.status.value for v in pool.verify([Problem("p", "q", None)] * 2, ["hang", "ok"])])
        print("closed")
    """)
    # (a regression hangs the child: the timeout turns that into a failure)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["['timeout', 'ok']", "closed"]


@pytest.mark.parametrize("bad", sorted(BAD_VERDICTS))
@pytest.mark.parametrize("kind,workers", [("inline", 0), ("thread", 2), ("process", 1)])
def test_malformed_verdicts_are_error_verdicts_with_the_reason(bad, kind, workers):
    with VerifierPool(BadVerdictEnv(bad=bad), workers=workers, kind=kind, timeout_s=30) as pool:
        verdicts = pool.verify([P] * 2, ["x", "y"])
    for v in verdicts:
        assert v.status is Status.ERROR and not v.passed and v.reward == 0.0
        assert "invalid verdict" in v.info["error"] and v.info["invalid_verdict"]
    assert pool.stats.errors == 2


def test_each_malformed_field_is_named():
    reasons = {bad: safe_verify(BadVerdictEnv(bad=bad), P, "x").info["error"] for bad in BAD_VERDICTS}
    assert "reward must be finite, got nan" in reasons["nan"]
    assert "reward must be finite, got inf" in reasons["inf"]
    assert "reward must be a real number, got str" in reasons["str_reward"]
    assert "status must be one of ok, no_answer, error, timeout, got 'great'" in reasons["unknown_status"]
    assert "steps[0].reward must be finite" in reasons["bad_step"]


def test_well_formed_numpy_verdicts_become_plain_values():
    class NumpyEnv(FaultyEnv):
        def verify(self, problem, completion):
            return Verdict(np.float32(1.0), np.bool_(True), "ok", steps=(StepReward(0, 1, np.float64(0.5)),))

    v = safe_verify(NumpyEnv(), P, "x")
    assert v.status is Status.OK and v.passed is True and type(v.reward) is float and v.reward == 1.0
    assert type(v.steps[0].reward) is float


class BatchedNan(FaultyEnv):
    """A batching verifier whose verify_many returns a NaN reward for the middle item."""

    def verify_many(self, problems, completions):
        return [Verdict(math.nan if i == 1 else 1.0, True) for i in range(len(problems))]


@pytest.mark.parametrize("kind,workers", [("inline", 0), ("thread", 1)])
def test_batched_verdicts_are_validated_too(kind, workers):
    with VerifierPool(BatchedNan(), workers=workers, kind=kind) as pool:
        verdicts = pool.verify([P] * 3, ["a", "b", "c"])
    assert [v.status for v in verdicts] == [Status.OK, Status.ERROR, Status.OK]
    assert "reward must be finite" in verdicts[1].info["error"]
