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
