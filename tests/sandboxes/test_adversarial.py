"""The adversarial suite: every attack program through every sandbox backend available here.

Each backend runs in a separate process under an outer cgroup guard (`harness.GuardedRunner`).
After every program the *host* is inspected (`harness.Bait.breaches`): files outside the sandbox,
connections and datagrams on host listeners, the victim process, processes left running as the
jobs' uid, secrets in the output. A backend that cannot run here is skipped with its reason.
"""

from __future__ import annotations

import os

import pytest

import sandboxes
from attacks import ATTACKS, LEAVE_STATE, LIMITS, SEE_STATE
from harness import GUARD_MEMORY_BYTES, Bait, GuardedRunner

def _available(name: str) -> tuple[bool, str]:
    a = sandboxes.backend_spec(name).probe()
    return a.ok, a.reason


@pytest.fixture(scope="module")
def bait():
    b = Bait()
    os.environ[b.env_name] = b.secret  # inherited by the runner: the sandbox must not pass it on
    yield b
    os.environ.pop(b.env_name, None)
    b.close()


# (backend, options): the local backend also in the mode it uses on hosts where jobs cannot get
# a uid of their own (a PID namespace per job)
VARIANTS = {"local": ("local", {"workers": 2}), "local-pidns": ("local", {"workers": 2, "job_pid_namespace": True}),
            "process": ("process", {}), "docker": ("docker", {})}


@pytest.fixture(scope="module", params=list(VARIANTS))
def runner(request, bait):
    name, options = VARIANTS[request.param]
    guard = None
    if name == "docker":  # a real engine started for the tests; its containers live in its guard
        docker = dict(request.getfixturevalue("docker_options"))
        guard = docker.pop("guard")
        options = {**options, **docker}
    ok, why = (True, "") if name == "docker" else _available(name)
    if not ok:
        pytest.skip(f"backend {name!r} unavailable here: {why}")
    r = GuardedRunner(name, options, guard=guard)
    if not r.guard.available and os.geteuid() == 0:
        r.close()
        pytest.skip("no outer guard (cgroups) available: refusing to run bombs unguarded")
    yield r
    r.close()


def test_suite_is_large_enough():
    assert len(ATTACKS) >= 30
    assert len({a.name for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_attack_is_contained(runner, bait, attack):
    ex = runner.run(bait.fmt(attack.code), attack.stdin, LIMITS)
    breaches = bait.breaches(ex["stdout"] + ex["stderr"], runner.job_guard)
    assert not breaches, f"{attack.name} escaped: {breaches}"
    problem = attack.expect(ex)
    assert problem is None, f"{attack.name}: {problem}"
    # the backend still works after the attack
    probe = runner.run("print(6 * 7)", "", {"wall_s": 10})
    assert probe["status"] == "ok" and probe["stdout"] == b"42\n", probe


def test_no_state_leaks_between_jobs(runner, bait):
    first = runner.run(bait.fmt(LEAVE_STATE), "", LIMITS)
    assert first["status"] != "error", first["info"]
    assert not bait.breaches(first["stdout"] + first["stderr"], runner.job_guard)
    for _ in range(3):  # on the local backend these land on both workers
        ex = runner.run(bait.fmt(SEE_STATE), "", LIMITS)
        assert b"CLEAN" in ex["stdout"], (ex["stdout"], ex["stderr"][-500:])


def test_outer_guard_was_never_reached(runner):
    peak = runner.job_guard.peak_memory()
    if peak is None:
        pytest.skip("the outer guard cannot report its peak memory here")
    assert peak < GUARD_MEMORY_BYTES * 0.8, f"outer guard peak {peak} bytes: the sandbox's own limits did not hold"


ESCAPES_WITHOUT_A_SANDBOX = ["read_secret_files", "write_outside", "tcp_connect", "udp_send", "unix_socket"]


def test_harness_detects_escapes_from_an_unsandboxed_runner():
    """The host checks can fail: the same attacks through the opt-in unsafe backend are caught.
    (Only attacks that are harmless to this machine when they succeed.)"""
    own = Bait()
    r = GuardedRunner("unsafe", {"allow_unsandboxed": True}, env={"RLVR_ALLOW_UNSANDBOXED": "1"})
    try:
        by_name = {a.name: a for a in ATTACKS}
        for name in ESCAPES_WITHOUT_A_SANDBOX:
            ex = r.run(own.fmt(by_name[name].code), "", LIMITS)
            assert own.breaches(ex["stdout"] + ex["stderr"]), f"{name} escaped the unsafe backend but the harness saw nothing"
        ex = r.run(own.fmt("import os\nos.kill({victim_pid}, 9)\n"), "", LIMITS)  # not the kill-everything attacks
        assert any("victim" in b for b in own.breaches(b"")), "killing the victim went unnoticed"
    finally:
        r.close()
        own.close()
