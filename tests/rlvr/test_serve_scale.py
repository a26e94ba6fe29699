"""The server stack under load and faults (`rlvr.serve.http` on uvicorn, `rlvr.serve.client` on httpx):
hundreds of concurrent clients are all answered (200 or 503 with Retry-After, never a reset), the
retrying client loses none of them, a transport failure is a counted error verdict and never a
reward of 0, several servers share the work and survive the loss of one, SIGTERM drains."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

import envs
import tasks
from envs.remote import RemoteEnvironment, connect
from envs.types import Problem, Status, Verdict
from rlvr.serve import Guards, VerifySettings, make_env_server
from rlvr.serve.client import RemoteError, RetryPolicy, ServerPool
from rlvr.serve.http import GuardedServer

TOKEN = "scale-token-0123456789"
ROOT = Path(__file__).resolve().parents[2]


class SlowEnv(envs.Environment):
    """Every answer is right after a short wait (so requests overlap and admission control acts)."""

    def verify(self, problem, completion):
        time.sleep(0.02)
        return Verdict(1.0, True)


def serve(env, task=None, **guard_options):
    server, service = make_env_server(env, Guards(TOKEN, **guard_options), task=task,
                                      verify=VerifySettings(workers=4, kind="thread", timeout_s=30))
    server.serve_in_thread()
    return server, service


def stop(server, service) -> None:
    server.shutdown()
    server.server_close()
    service.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_hundred_concurrent_raw_requests_are_each_answered_200_or_503_never_reset():
    server, service = serve(SlowEnv(), max_inflight=8, max_queued=24)
    body = json.dumps({"problems": [Problem("p", "q", "1").to_dict()], "completions": ["1"]})
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(200)

    def one() -> None:
        start.wait()
        try:  # a fresh connection each: the load a trainer's many workers put on a server
            r = httpx.post(f"{server.url}/verify", content=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
            result = str(r.status_code) + ("+retry-after" if r.headers.get("retry-after") else "")
        except httpx.HTTPError as e:
            result = f"transport:{type(e).__name__}"
        with lock:
            outcomes.append(result)

    try:
        threads = [threading.Thread(target=one) for _ in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        stop(server, service)
    assert len(outcomes) == 200
    assert set(outcomes) <= {"200", "503+retry-after"}, sorted(set(outcomes))
    assert outcomes.count("200") >= 8 and server.stats.get(200, 0) == outcomes.count("200")


def test_requests_within_the_queue_wait_for_a_slot_instead_of_being_refused():
    server, service = serve(SlowEnv(), max_inflight=2, max_queued=100)
    body = {"problems": [Problem("p", "q", "1").to_dict()], "completions": ["1"]}
    try:
        with cf.ThreadPoolExecutor(50) as pool:
            statuses = list(pool.map(lambda _: httpx.post(f"{server.url}/verify", json=body, timeout=60,
                                                          headers={"Authorization": f"Bearer {TOKEN}"}).status_code, range(50)))
    finally:
        stop(server, service)
    assert statuses == [200] * 50


def test_the_retrying_client_loses_none_of_256_concurrent_verifications():
    task = tasks.make("arithmetic-v1")
    problems = task.problems("test", limit=32)
    server, service = serve(task.env, task, max_inflight=4, max_queued=4)
    env = RemoteEnvironment(server.url, TOKEN, timeout_s=60)
    try:
        with cf.ThreadPoolExecutor(256) as pool:
            verdicts = list(pool.map(lambda i: env.verify(problems[i % 32], task.env.gold_completion(problems[i % 32])), range(256)))
    finally:
        stop(server, service)
    assert [v.status for v in verdicts] == [Status.OK] * 256 and all(v.passed for v in verdicts)
    stats = env.endpoint.pool.stats
    assert stats.failed == 0 and stats.requests == 256
    assert server.stats.get(503, 0) == stats.retries > 0  # the server was full: every 503 was retried, none was a reward


def test_a_transport_failure_past_the_retries_is_an_error_verdict_naming_every_server_never_a_zero():
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    env = RemoteEnvironment(dead, TOKEN)
    env.endpoint.pool.retry = RetryPolicy(attempts=3, backoff_s=0.01, cooldown_s=0.01)
    v = env.verify(Problem("p", "q", "1"), "1")
    assert v.status is Status.ERROR and v.reward == 0.0 and not v.passed
    assert all(u in v.info["error"] for u in dead) and "failed after 3 tries" in v.info["error"]
    with pytest.raises(ValueError, match="cannot reach the environment server") as e:
        connect(dead, TOKEN)
    assert all(u in str(e.value) for u in dead) and "\n" not in str(e.value)


def test_a_refused_token_is_one_line_naming_the_server():
    server, service = serve(SlowEnv())
    try:
        with pytest.raises(ValueError) as e:
            connect(server.url, "wrong-token-0123456789")
        assert f"{server.url} refused the token" in str(e.value) and "\n" not in str(e.value)
        v = RemoteEnvironment(server.url, "wrong-token-0123456789").verify(Problem("p", "q", "1"), "1")
        assert v.status is Status.ERROR and "refused the token" in v.info["error"]
    finally:
        stop(server, service)


def test_an_oversized_body_sent_in_full_reads_413_and_the_connection_stays_usable():
    server, service = serve(SlowEnv(), max_request_bytes=1 << 20)
    try:
        with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            r = client.post(f"{server.url}/verify", content=b"x" * (4 << 20), timeout=30)
            assert r.status_code == 413 and "over the limit" in r.json()["error"]
            ok = client.post(f"{server.url}/verify", json={"problems": [Problem("p", "q", "1").to_dict()], "completions": ["1"]})
            assert ok.status_code == 200 and ok.json()["verdicts"][0]["passed"] is True
    finally:
        stop(server, service)


def test_pathological_json_is_a_400_and_the_server_keeps_serving():
    server, service = serve(SlowEnv())
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for body in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b"\xff\xfe", b"[1, 2]"):
            r = httpx.post(f"{server.url}/verify", content=body, headers=headers, timeout=30)
            assert r.status_code == 400 and r.json()["error"], body[:20]
        assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    finally:
        stop(server, service)


def test_several_servers_share_the_work_and_a_server_lost_mid_run_costs_no_verdict():
    task = tasks.make("arithmetic-v1")
    problems = task.problems("test", limit=16)
    running = [serve(task.env, task) for _ in range(3)]
    env = connect([s.url for s, _ in running], TOKEN)
    env.endpoint.pool.retry = RetryPolicy(attempts=6, backoff_s=0.01, cooldown_s=30)
    try:
        first = [env.verify(p, task.env.gold_completion(p)) for p in problems]
        served = [s.stats.get(200, 0) for s, _ in running]
        assert all(n > 0 for n in served), served  # every server took a share
        stop(*running[1])  # one server goes away
        with cf.ThreadPoolExecutor(16) as pool:
            after = list(pool.map(lambda p: env.verify(p, task.env.gold_completion(p)), problems * 4))
        wrong = env.verify(problems[0], task.env.wrong_completions(problems[0])[0])
    finally:
        for s, svc in (running[0], running[2]):
            stop(s, svc)
    assert all(v.status is Status.OK and v.passed for v in first + after)
    assert wrong.status is Status.OK and not wrong.passed
    assert running[1][0].url not in env.endpoint.pool.alive()


def test_a_server_that_answers_junk_is_named_counted_and_its_requests_go_elsewhere():
    task = tasks.make("arithmetic-v1")
    from tests.rlvr.test_serve import _Junk

    junk = ThreadingHTTPServer(("127.0.0.1", 0), _Junk)
    threading.Thread(target=junk.serve_forever, daemon=True).start()
    junk_url = f"http://127.0.0.1:{junk.server_address[1]}/html"  # every answer an HTML page
    server, service = serve(task.env, task)
    env = RemoteEnvironment([junk_url, server.url], TOKEN)
    env.endpoint.pool.retry = RetryPolicy(attempts=4, backoff_s=0.01, cooldown_s=30)
    try:
        verdicts = [env.verify(p, task.env.gold_completion(p)) for p in task.problems("test", limit=8)]
    finally:
        junk.shutdown()
        junk.server_close()
        stop(server, service)
    assert all(v.status is Status.OK and v.passed for v in verdicts)
    junk_state = next(s for s in env.endpoint.pool.servers if s.url == junk_url)
    assert junk_state.failures >= 1 and "not JSON" in junk_state.last_error and junk_url not in env.endpoint.pool.alive()


def test_a_malformed_step_answer_goes_to_another_server_and_past_the_retries_names_its_server():
    from envs.episode import End, play
    from envs.remote import RemoteMultiTurnEnvironment

    task = tasks.make("tool-products-v1")
    junk = GuardedServer({("POST", "/step"): lambda body: {"observation": {"not": "text"}}}, Guards(TOKEN)).serve_in_thread()
    server, service = serve(task.env, task)
    settings = dict(stop=task.env.stop, limits=dataclasses.asdict(task.env.limits), observation_role=task.env.observation_role)
    both = RemoteMultiTurnEnvironment([junk.url, server.url], TOKEN, **settings)
    only_junk = RemoteMultiTurnEnvironment([junk.url], TOKEN, **settings)
    for env in (both, only_junk):
        env.endpoint.pool.retry = RetryPolicy(attempts=3, backoff_s=0.01, cooldown_s=30)
    try:
        problems = task.problems("test", limit=3)  # the pool takes turns: some steps go to the junk server first
        pairs = []
        for p in problems:
            script = task.env.scripted_turns(p)
            policy = lambda turns, s=script: s[sum(t.role.value == "model" for t in turns)]  # noqa: E731
            pairs.append((play(task.env, p, policy), play(both, p, policy)))
        lost = play(only_junk, p, policy)
        verdict = only_junk.verify_episode(p, lost)
    finally:
        junk.shutdown()
        junk.server_close()
        stop(server, service)
    assert all([t.text for t in served.turns] == [t.text for t in local.turns] for local, served in pairs)
    assert both.endpoint.pool.stats.junk >= 1
    assert lost.end is End.STEP_ERROR and verdict.status is Status.ERROR
    assert junk.url in str(verdict.info) and "observation of type dict" in str(verdict.info)


def test_sigterm_drains_a_server_in_flight_requests_finish_and_new_connections_are_refused(tmp_path):
    started = tmp_path / "started"
    port = free_port()
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from rlvr.serve.http import GuardedServer, Guards

        def slow(body):
            Path({str(started)!r}).write_text("1")
            time.sleep(2.0)
            return {{"done": True}}

        server = GuardedServer({{("POST", "/slow"): slow}}, Guards({TOKEN!r}), port={port})
        print("serving", flush=True)
        server.serve_forever()
        server.server_close()
        print("drained", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "serving"
        url = f"http://127.0.0.1:{port}"
        with cf.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, f"{url}/slow", json={}, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            deadline = time.monotonic() + 30
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            response = pending.result(30)
        assert response.status_code == 200 and response.json() == {"done": True}
        assert proc.wait(30) == 0 and proc.stdout.read().strip() == "drained"
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=5)
    finally:
        proc.kill()
        proc.wait()


def test_the_pool_sends_work_to_the_least_busy_server():
    seen: list[str] = []
    gate = threading.Event()

    def routes(name):
        def handler(body):
            seen.append(name)
            if body.get("hold"):
                gate.wait(10)
            return {"server": name}
        return {("POST", "/work"): handler}

    servers = {name: GuardedServer(routes(name), Guards(TOKEN)).serve_in_thread() for name in "ab"}
    pool = ServerPool([s.url for s in servers.values()], TOKEN)
    try:
        with cf.ThreadPoolExecutor(1) as ex:
            held = ex.submit(pool.request, "POST", "/work", {"hold": True})
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                time.sleep(0.01)
            busy = seen[0]
            others = [pool.request("POST", "/work", {})["server"] for _ in range(5)]
            gate.set()
            assert held.result(10) == {"server": busy}
    finally:
        gate.set()
        pool.close()
        for s in servers.values():
            s.shutdown()
            s.server_close()
    assert others == [("b" if busy == "a" else "a")] * 5


def test_the_start_up_check_asks_every_server_at_once_so_it_waits_one_timeout_not_one_per_server():
    # each server answers only once every server has been asked: a check that asks them one by one
    # times out on the first; one that asks them all at once gets every answer
    n = 4
    everyone_asked = threading.Barrier(n, timeout=20)

    def routes(name):
        def info(body):
            everyone_asked.wait()
            return {"server": name}
        return {("GET", "/info"): info}

    servers = [GuardedServer(routes(str(i)), Guards(TOKEN)).serve_in_thread() for i in range(n)]
    pool = ServerPool([s.url for s in servers], TOKEN)
    try:
        answers = pool.check("/info", timeout_s=30)
    finally:
        pool.close()
        for s in servers:
            s.shutdown()
            s.server_close()
    assert sorted(a["server"] for a in answers.values()) == ["0", "1", "2", "3"]


def test_a_start_up_check_names_every_server_that_does_not_answer():
    silent = [socket.socket() for _ in range(3)]  # accept connections (the backlog) and never answer
    for sock in silent:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
    urls = [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in silent]
    pool = ServerPool(urls, TOKEN)
    try:
        with pytest.raises(RemoteError) as err:
            pool.check("/health", timeout_s=0.5)
    finally:
        pool.close()
        for sock in silent:
            sock.close()
    message = str(err.value)
    assert all(url in message for url in urls), message
    assert message.count("does not answer") == 3


def test_remote_errors_keep_their_one_import_path():
    import envs.remote

    assert envs.remote.RemoteError is RemoteError


def test_the_listener_is_tcp_with_nodelay_so_answers_do_not_wait_for_delayed_acks():
    import socket as so

    from rlvr.serve.http import bind_listener

    sock = bind_listener("127.0.0.1", 0)
    try:  # asyncio sets TCP_NODELAY on accepted sockets only when the socket says it is TCP
        assert sock.proto == so.IPPROTO_TCP and sock.getsockopt(so.IPPROTO_TCP, so.TCP_NODELAY) == 1
    finally:
        sock.close()


def test_a_raw_route_gets_the_body_bytes_and_query_behind_the_same_guards():
    from rlvr.serve.http import Guards, RawRoute

    seen = []
    routes = {("POST", "/blob"): RawRoute(lambda body, query: seen.append((body, query)) or {"bytes": len(body)}),
              ("POST", "/json"): lambda body: {"keys": sorted(body)}}
    server = GuardedServer(routes, Guards(TOKEN, max_request_bytes=1 << 10)).serve_in_thread()
    try:
        with ServerPool(server.url, TOKEN, retry=RetryPolicy(attempts=1)) as pool:
            blob = bytes(range(256)) * 2  # not JSON, not text
            assert pool.request("POST", "/blob?final=0&x=y", content=blob, content_type="application/octet-stream") == {"bytes": 512}
            assert seen == [(blob, {"final": "0", "x": "y"})]
            assert pool.request("POST", "/json", {"a": 1, "b": 2}) == {"keys": ["a", "b"]}  # JSON routes as before
            with pytest.raises(RemoteError) as e:
                pool.request("POST", "/blob", content=b"x" * 2048)
            assert e.value.status == 413 and len(seen) == 1
        with ServerPool(server.url, "wrong-token-0123456789", retry=RetryPolicy(attempts=1)) as pool:
            with pytest.raises(RemoteError, match="refused the token") as e:
                pool.request("POST", "/blob", content=b"x")
            assert e.value.status == 401 and len(seen) == 1
    finally:
        server.shutdown()
        server.server_close()


class _BadAnswers(BaseHTTPRequestHandler):
    """Valid JSON that is junk to rlvr (/nan: a NaN reward, /count: too many verdicts), or /500: HTTP 500."""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        verdict = {"reward": 1.0, "passed": True, "status": "ok"}
        if self.path.startswith("/500"):
            status, body = 500, {"error": "the handler broke"}
        elif self.path.startswith("/nan"):
            status, body = 200, {"verdicts": [{**verdict, "reward": float("nan")}]}
        else:
            status, body = 200, {"verdicts": [verdict, verdict]}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("kind", ["nan", "count", "500"])
def test_junk_verdicts_or_a_500_from_one_server_are_retried_on_another_counted_and_named(kind):
    task = tasks.make("arithmetic-v1")
    bad = ThreadingHTTPServer(("127.0.0.1", 0), _BadAnswers)
    threading.Thread(target=bad.serve_forever, daemon=True).start()
    bad_url = f"http://127.0.0.1:{bad.server_address[1]}/{kind}"
    server, service = serve(task.env, task)
    env = RemoteEnvironment([bad_url, server.url], TOKEN)
    env.endpoint.pool.retry = RetryPolicy(attempts=4, backoff_s=0.01, cooldown_s=0.01)
    alone = RemoteEnvironment(bad_url, TOKEN)
    alone.endpoint.pool.retry = RetryPolicy(attempts=2, backoff_s=0.01, cooldown_s=0.01)
    try:
        problems = task.problems("test", limit=6)
        verdicts = [env.verify(p, task.env.gold_completion(p)) for p in problems]
        lone = alone.verify(problems[0], task.env.gold_completion(problems[0]))
    finally:
        bad.shutdown()
        bad.server_close()
        stop(server, service)
    assert all(v.status is Status.OK and v.passed for v in verdicts)
    bad_state = next(s for s in env.endpoint.pool.servers if s.url == bad_url)
    assert bad_state.failures >= 1 and bad_url in bad_state.last_error
    assert lone.status is Status.ERROR and lone.info["remote"] == bad_url and bad_url in lone.info["error"]
    if kind == "500":
        assert "HTTP 500" in lone.info["error"] and alone.endpoint.pool.stats.retries == 0
    else:
        assert env.endpoint.pool.stats.junk >= 1 and "sent junk" in bad_state.last_error


def test_a_wrong_token_dead_url_or_bad_url_is_one_user_error_line():
    import rlvr
    from rlvr.launch.slurm import token_checks, wait_for_servers

    task = tasks.make("arithmetic-v1")
    server, service = serve(task.env, task)
    try:
        with pytest.raises(rlvr.UserError) as e:
            envs.make("remote-v1", url=[server.url], token="wrong-token-0123456789")
        assert isinstance(e.value, ValueError) and "\n" not in str(e.value) and server.url in str(e.value)
        with pytest.raises(ValueError, match="refused the token") as e:
            wait_for_servers([server.url], 5.0, token_checks([], [server.url], {"RLVR_ENV_TOKEN": "wrong-token-0123456789"}))
        assert "\n" not in str(e.value)
        wait_for_servers([server.url], 5.0, token_checks([], [server.url], {"RLVR_ENV_TOKEN": TOKEN}))
    finally:
        stop(server, service)
    for bad in (42, "http://user:hunter2@127.0.0.1:1"):
        with pytest.raises(rlvr.UserError) as e:
            envs.make("remote-v1", url=bad)
        assert isinstance(e.value, ValueError) and "hunter2" not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("token", [TOKEN, "wrong-token-0123456789"])
def test_a_refused_body_sent_with_connection_close_reads_its_status_not_a_reset(token):
    """413 (oversized) or 401 (wrong token) to a client that sends its whole body, then reads, and
    said `Connection: close`: the server reads and drops the body before closing, so the client reads
    the status instead of a reset."""
    server, service = serve(SlowEnv(), max_request_bytes=1 << 20)
    body = b"x" * (12 << 20)
    host, port = server.server_address
    head = (f"POST /verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    try:
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(head + body)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.split(b"\r\n", 1)[0].split()[1] == (b"413" if token == TOKEN else b"401")
    finally:
        stop(server, service)


def test_a_server_set_aside_and_back_is_one_warning_line_each(capsys):
    task = tasks.make("arithmetic-v1")
    first, first_service = serve(task.env, task)
    second, second_service = serve(task.env, task)
    port = first.server_address[1]
    env = RemoteEnvironment([first.url, second.url], TOKEN)
    env.endpoint.pool.retry = RetryPolicy(attempts=4, backoff_s=0.01, cooldown_s=0.01)
    problems = task.problems("test", limit=4)
    try:
        stop(first, first_service)
        for p in problems:
            assert env.verify(p, task.env.gold_completion(p)).passed
        set_aside = [x for x in capsys.readouterr().err.splitlines() if "set aside" in x]
        assert len(set_aside) == 1 and first.url in set_aside[0]
        first, first_service = make_env_server(task.env, Guards(TOKEN), task=task, port=port,
                                               verify=VerifySettings(workers=1, kind="thread"))
        first.serve_in_thread()
        for _ in range(20):
            assert env.verify(problems[0], task.env.gold_completion(problems[0])).passed
            if not next(s for s in env.endpoint.pool.servers if s.url == first.url).set_aside:
                break
        back = [x for x in capsys.readouterr().err.splitlines() if "answers again" in x]
        assert len(back) == 1 and first.url in back[0]
    finally:
        stop(first, first_service)
        stop(second, second_service)


class _Busy(BaseHTTPRequestHandler):
    """Always busy: 503 with a short Retry-After; counts the requests it refused."""

    refused = 0

    def do_GET(self):  # noqa: N802
        type(self).refused += 1
        body = b'{"error": "busy"}'
        self.send_response(503)
        self.send_header("Retry-After", "0.02")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_busy_server_is_retried_within_the_requests_time_budget_not_a_fixed_count():
    busy = ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
    threading.Thread(target=busy.serve_forever, daemon=True).start()
    try:
        with ServerPool(f"http://127.0.0.1:{busy.server_address[1]}", TOKEN, timeout_s=1.0,
                        retry=RetryPolicy(attempts=2, backoff_s=0.01, max_backoff_s=0.05, cooldown_s=0.01)) as pool:
            with pytest.raises(RemoteError, match="HTTP 503"):
                pool.request("GET", "/info")
    finally:
        busy.shutdown()
        busy.server_close()
    assert _Busy.refused > 2  # past the attempts limit: 503s are waited out, not counted
