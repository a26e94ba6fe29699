"""The time bound and the supervised sympy workers: from threads, processes, after fork."""

import multiprocessing as mp
import os
import threading

import pytest

from envs.math import check, warmup
from envs.math.worker import SymbolicPool, get_pool
from envs.types import Status

SLOW = ("\\boxed{\\sin^2 x + \\cos^2 x}", "1")  # needs sympy simplify (tens of ms at least)


@pytest.fixture(scope="module", autouse=True)
def warm():
    assert warmup()


def test_a_check_past_its_deadline_is_a_timeout_and_the_worker_is_replaced():
    v = check(*SLOW, timeout_s=0.005)
    assert v.status is Status.TIMEOUT and not v.passed and v.reward == 0.0 and v.info["timeout_s"] == 0.005
    # the pool recovers: the same pair with a real budget passes
    assert check(*SLOW, timeout_s=30).passed


def test_killed_worker_is_replaced_and_pool_keeps_answering():
    pool = SymbolicPool(size=1)
    try:
        assert pool.warmup(60)
        from envs.math.parser import parse_answer
        from envs.math.symbolic import encode

        request = {"op": "equal", "a": encode(parse_answer("\\sin^2 x + \\cos^2 x")), "b": encode(parse_answer("1"))}
        import time

        assert pool.call(request, time.monotonic() + 0.001) is None
        assert pool.kills == 1
        answer = pool.call(request, time.monotonic() + 60)
        assert answer is not None and answer["result"] is True
    finally:
        pool.close()


def test_concurrent_checks_from_threads_agree_with_serial_ones():
    cases = [
        ("\\boxed{0.5}", "\\frac12"), ("\\boxed{2\\sqrt2}", "\\sqrt8"), ("\\boxed{\\log_2 8}", "3"),
        ("\\boxed{(x+1)^2}", "x^2+2x+1"), ("\\boxed{7}", "8"), SLOW, ("\\boxed{e^{i\\pi}}", "-1"),
    ] * 6
    serial = [check(r, g, timeout_s=30).passed for r, g in cases]
    results: list = [None] * len(cases)

    def run(k: int) -> None:
        results[k] = check(*cases[k], timeout_s=30).passed

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == serial and serial.count(True) == 6 * 6


def _child(queue) -> None:
    queue.put((os.getpid(), check(*SLOW, timeout_s=30).passed, check("\\boxed{3}", "3").passed))


def test_forked_child_gets_its_own_pool():
    get_pool()  # the parent's pool exists before the fork
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    pid, slow_ok, fast_ok = queue.get(timeout=120)
    proc.join(30)
    assert pid != os.getpid() and slow_ok and fast_ok and proc.exitcode == 0


def test_a_pool_started_with_over_a_thousand_open_files_answers(high_descriptors):
    """The worker's pipes get descriptors above 1024 (select.select refuses them)."""
    import time

    from envs.math.parser import parse_answer
    from envs.math.symbolic import encode

    pool = SymbolicPool(size=1)
    try:
        assert pool.warmup(60)
        request = {"op": "equal", "a": encode(parse_answer("\\sin^2 x + \\cos^2 x")), "b": encode(parse_answer("1"))}
        answer = pool.call(request, time.monotonic() + 60)
        assert answer is not None and answer["result"] is True, answer
    finally:
        pool.close()
