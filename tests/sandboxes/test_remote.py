"""The remote backend against this project's SandboxFusion-compatible server on loopback."""

from __future__ import annotations

import socket

import pytest

import sandboxes
from envs.code import FunctionTest, TestSuite, grade_many
from sandboxes import ExecStatus, Job
from sandboxes.remote import RemoteBackend, from_sandboxfusion
from sandboxes.server import serve_in_thread


@pytest.fixture(scope="module")
def service():
    name = "local" if sandboxes.backend_spec("local").probe().ok else "process"
    if not sandboxes.backend_spec(name).probe().ok:
        pytest.skip("no local sandbox backend to serve")
    inner = sandboxes.make_backend(name)
    server, url = serve_in_thread(inner, token="s3cret-token")
    yield url
    server.shutdown()
    inner.close()


def test_jobs_round_trip_exactly(service):
    remote = sandboxes.make_backend("remote", url=service, token="s3cret-token")
    ex = remote.run(Job.make("import sys\nsys.stdout.buffer.write(bytes(range(256)))\nsys.stderr.write(input())\nsys.exit(4)\n",
                             stdin="in", files={"x.txt": b"\x00\x01"}))
    assert ex.status is ExecStatus.OK and ex.exit_code == 4
    assert ex.stdout == bytes(range(256)) and ex.stderr == b"in" and ex.backend == "remote"
    assert remote.run(Job.make("while True: pass", limits={"wall_s": 1, "cpu_s": 1})).status is ExecStatus.TIMEOUT


def test_grading_through_the_service(service):
    suite = TestSuite("function", (FunctionTest("2, 3", 5), FunctionTest("0, 0", 0)), entry_point="add")
    remote = RemoteBackend(service, token="s3cret-token")
    good, exit0, wrong = grade_many(["def add(a, b):\n    return a + b\n", "import sys\nsys.exit(0)\n", "def add(a, b):\n    return 5\n"],
                                    [suite] * 3, backend=remote)
    assert good.passed and not exit0.passed and not wrong.passed and wrong.info["fraction"] == 0.5


def test_an_absurd_limit_is_a_bad_request_and_the_next_job_still_runs(service):
    import httpx

    headers = {"Authorization": "Bearer s3cret-token"}
    r = httpx.post(f"{service}/run_code", json={"code": "print('poison')", "rlvr_limits": {"wall_s": 1e308}}, headers=headers, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "SandboxError" and "wall_s" in r.json()["message"]
    remote = RemoteBackend(service, token="s3cret-token")
    for i in range(3):
        assert remote.run(Job.make(f"print({i})")).stdout == f"{i}\n".encode()


def test_failures_are_errors_never_wrong_answers(service):
    assert RemoteBackend(service, token="wrong").run(Job.make("print(1)")).status is ExecStatus.ERROR  # HTTP 401
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ex = RemoteBackend(f"http://127.0.0.1:{port}", timeout_s=2).run(Job.make("print(1)"))
    assert ex.status is ExecStatus.ERROR and "unreachable" in ex.info["error"]
    with pytest.raises(sandboxes.SandboxError, match="http"):
        RemoteBackend("ftp://x")


def test_standard_sandboxfusion_answers_are_mapped():
    ok = from_sandboxfusion({"status": "Failed", "run_result": {"status": "Finished", "return_code": 1, "stdout": "a", "stderr": "b",
                                                                  "execution_time": 0.5}}, "remote")
    assert (ok.status, ok.exit_code, ok.stdout, ok.stderr) == (ExecStatus.OK, 1, b"a", b"b")
    assert from_sandboxfusion({"status": "Failed", "run_result": {"status": "TimeLimitExceeded"}}, "remote").status is ExecStatus.TIMEOUT
    assert from_sandboxfusion({"status": "SandboxError", "message": "boom", "run_result": None}, "remote").status is ExecStatus.ERROR
    assert from_sandboxfusion({"status": "Failed", "run_result": {"status": "Error"}}, "remote").status is ExecStatus.ERROR
