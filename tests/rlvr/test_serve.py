"""The environment server (`rlvr.serve`, ``rlvr envs serve``) and its client (`envs.remote`): the
same verdicts as a local environment, guards that refuse before running anything, and remote
failures that become counted verdicts with their reason."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import envs
import tasks
from envs.episode import play
from envs.remote import RemoteEnvironment, RemoteMultiTurnEnvironment, connect
from envs.testing import FaultyEnv
from envs.types import Problem, Status, Verdict
from rlvr.serve import Guards, VerifySettings, make_env_server

TOKEN = "test-token-0123456789"


class CountingEnv(envs.Environment):
    """Counts its verifications (in this process: the server verifies with threads here)."""

    calls = 0

    def verify(self, problem, completion):
        type(self).calls += 1
        return Verdict(1.0, True)


def serve(env, task=None, *, kind="thread", timeout_s=10.0, **guard_options):
    server, service = make_env_server(env, Guards(TOKEN, **guard_options), task=task,
                                      verify=VerifySettings(workers=2, kind=kind, timeout_s=timeout_s))
    server.serve_in_thread()
    return server, service


@pytest.fixture
def arithmetic_server():
    task = tasks.make("arithmetic-v1")
    server, service = serve(task.env, task)
    yield server, task
    server.shutdown()
    server.server_close()
    service.close()


def raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read() or b"{}")
    conn.close()
    return status, data


def test_remote_verdicts_equal_local_ones(arithmetic_server):
    server, task = arithmetic_server
    remote = envs.make("remote-v1", url=server.url, token=TOKEN)
    assert isinstance(remote, RemoteEnvironment) and remote.id == "remote-v1"
    problems = task.problems("test", limit=6)
    completions = []
    for p in problems:
        completions += [task.env.gold_completion(p), *task.env.wrong_completions(p)[:1], "", p.prompt]
    many = [p for p in problems for _ in range(4)]
    local = [task.env.verify(p, c) for p, c in zip(many, completions)]
    served = remote.verify_many(many, completions)
    assert [(v.reward, v.passed, v.status, v.extracted) for v in served] == [(v.reward, v.passed, v.status, v.extracted) for v in local]
    assert sum(v.passed for v in served) == 6  # the gold completions, nothing else


def test_a_cut_completion_stays_cut_over_http():
    """JSON carries text only: the client says which completions were cut (`envs.types.CutText`),
    so a served lenient math checker refuses the value of unfinished reasoning as a local one does."""
    from envs.math.env import MathEnv
    from envs.types import CutText

    env = MathEnv(extraction="lenient")
    server, service = serve(env)
    try:
        remote = envs.make("remote-v1", url=server.url, token=TOKEN)
        problem = Problem("p0", "Compute 6*7.", "42")
        text = "First, 6 times 7 is 42."
        served = remote.verify_many([problem, problem], [text, CutText(text)])
        assert [v.passed for v in served] == [True, False] == [env.verify(problem, text).passed, env.verify(problem, CutText(text)).passed]
        status, body = raw(server.url, "POST", "/verify", json.dumps({"problems": [problem.to_dict()], "completions": [text], "truncated": ["yes"]}).encode(),
                           {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        assert status == 400 and "truncated" in json.dumps(body)
    finally:
        server.shutdown()
        server.server_close()
        service.close()


def test_problems_by_reference_keep_the_answer_on_the_server(arithmetic_server):
    server, task = arithmetic_server
    remote = RemoteEnvironment(server.url, TOKEN)
    info = remote.info()
    assert info["task"] == "arithmetic-v1" and info["splits"]["test"] == task.size("test") and not info["multi_turn"]
    p = task.get("test", 3)
    status, data = raw(server.url, "POST", "/verify", json.dumps({"problems": [{"split": "test", "index": 3}],
                                                                   "completions": [task.env.gold_completion(p)]}).encode(),
                       {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert status == 200 and data["verdicts"][0]["passed"] is True
    status, data = raw(server.url, "POST", "/problems", json.dumps({"split": "test", "start": 2, "limit": 2}).encode(),
                       {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and [Problem.from_dict(r) for r in data["problems"]] == task.problems("test", limit=4)[2:]
    status, data = raw(server.url, "POST", "/verify", json.dumps({"problems": [{"split": "test", "index": 10**6}], "completions": ["x"]}).encode(),
                       {"Authorization": f"Bearer {TOKEN}"})
    assert status == 400 and "no index" in data["error"]


def test_unauthenticated_or_oversized_requests_run_nothing():
    CountingEnv.calls = 0
    server, service = serve(CountingEnv(), max_request_bytes=2048)
    try:
        body = json.dumps({"problems": [{"id": "a", "prompt": "q", "reference": "1"}], "completions": ["1"]}).encode()
        assert raw(server.url, "GET", "/health")[0] == 200  # no token needed to ask whether it is up
        for headers in ({}, {"Authorization": "Bearer wrong-token-xxxxxxx"}, {"Authorization": TOKEN}):
            status, data = raw(server.url, "POST", "/verify", body, headers)
            assert status == 401 and "token" in data["error"]
        assert raw(server.url, "GET", "/info")[0] == 401
        big = json.dumps({"problems": [{"id": "a", "prompt": "q" * 5000, "reference": "1"}], "completions": ["1"]}).encode()
        status, data = raw(server.url, "POST", "/verify", big, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 413 and "over the limit" in data["error"]
        assert raw(server.url, "POST", "/verify", b"[1, 2]", {"Authorization": f"Bearer {TOKEN}"})[0] == 400
        assert raw(server.url, "POST", "/verify", b"{not json", {"Authorization": f"Bearer {TOKEN}"})[0] == 400
        assert CountingEnv.calls == 0
        status, data = raw(server.url, "POST", "/verify", body, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and CountingEnv.calls == 1
        # a body that never arrives: the read times out without holding up the server
        sock = socket.create_connection(server.server_address[:2])
        sock.sendall(f"POST /verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n".encode())
        assert raw(server.url, "GET", "/health")[0] == 200
        sock.close()
    finally:
        server.shutdown()
        server.server_close()
        service.close()


def test_refuses_non_loopback_without_consent():
    with pytest.raises(ValueError, match="only loopback"):
        make_env_server(CountingEnv(), Guards(TOKEN), host="0.0.0.0")
    with pytest.raises(ValueError, match="at least 8"):
        Guards("short")


def test_a_hanging_or_raising_verifier_is_a_counted_verdict_over_http():
    server, service = serve(FaultyEnv(hang_s=30), kind="process", timeout_s=1.5)
    try:
        remote = RemoteEnvironment(server.url, TOKEN)
        p = Problem("p", "q", "r")
        start = time.monotonic()
        ok, boom, hang = remote.verify_many([p, p, p], ["ok", "boom", "hang"])
        assert time.monotonic() - start < 20
        assert ok.passed and boom.status is Status.ERROR and "exploded" in boom.info["error"]
        assert hang.status is Status.TIMEOUT
    finally:
        server.shutdown()
        server.server_close()
        service.close()


class _Junk(BaseHTTPRequestHandler):
    """Answers every request with something an rlvr server would never send."""

    def do_GET(self):  # noqa: N802
        self._junk()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._junk()

    def _junk(self):
        if self.path.startswith("/slow"):
            time.sleep(3)
        body = b"<html>oops</html>" if self.path.startswith("/html") else b'{"verdicts": [{"reward": "lots", "passed": true}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_junk_timeouts_and_dead_servers_are_failures_with_reasons():
    junk = ThreadingHTTPServer(("127.0.0.1", 0), _Junk)
    threading.Thread(target=junk.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{junk.server_address[1]}"
    p = Problem("p", "q", "r")
    try:
        v = RemoteEnvironment(url, TOKEN).verify(p, "x")
        assert v.status is Status.ERROR and "invalid verdict: reward must be a real number" in v.info["error"]
        v = RemoteEnvironment(url + "/html", TOKEN).verify(p, "x")
        assert v.status is Status.ERROR and "not JSON" in v.info["error"]
        v = RemoteEnvironment(url + "/slow", TOKEN, timeout_s=0.5).verify(p, "x")
        assert v.status is Status.TIMEOUT and "did not answer within" in v.info["error"]
    finally:
        junk.shutdown()
        junk.server_close()
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    v = RemoteEnvironment(f"http://127.0.0.1:{port}", TOKEN).verify(p, "x")
    assert v.status is Status.ERROR and "unreachable" in v.info["error"]
    with pytest.raises(ValueError, match="cannot reach"):
        connect(f"http://127.0.0.1:{port}", TOKEN)


class _ErrorPage(BaseHTTPRequestHandler):
    """A proxy's error page: HTTP 404 with a long HTML body over many lines."""

    def do_GET(self):  # noqa: N802
        body = ("<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body>\n" + "<p>nothing here</p>\n" * 50
                + "</body>\n</html>\n").encode()
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_error_page_is_named_by_its_title_on_one_line():
    """A server (or a proxy in front of it) answering with an HTML error page: its title, not the page (was the page's first
    300 characters, over several lines)."""
    from rlvr.serve.client import RemoteError, ServerPool, WrongAnswer

    page = ThreadingHTTPServer(("127.0.0.1", 0), _ErrorPage)
    threading.Thread(target=page.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{page.server_address[1]}"
        with pytest.raises(RemoteError) as refused:
            ServerPool(url).check()
    finally:
        page.shutdown()
        page.server_close()
    assert str(refused.value) == f"{url}/health answered HTTP 404 (an HTML page: 404 Not Found)"
    assert isinstance(refused.value, WrongAnswer)  # a wrong address or path: a trainer starting stops at once, not after its wait


@pytest.mark.parametrize("body,says", [
    (b'{"error": {"message": "max_tokens too large", "type": "BadRequest"}}', "max_tokens too large"),  # OpenAI's, vLLM's
    (b'{"detail": "Not Found"}', "Not Found"),  # FastAPI's
    (b"<html><title>Service &amp; Co</title></html>", "an HTML page: Service & Co"),
    (b"<html><body>Internal <b>Server</b> Error</body></html>", "an HTML page: Internal Server Error"),
    (b"\x1b[31mred\x1b[0m error\nline2", "red error line2"),  # no terminal escapes reach the console
])
def test_what_an_error_answer_says_is_one_clean_line(body, says):
    import httpx

    from rlvr.serve.client import _detail

    assert _detail(httpx.Response(500, content=body)) == says


def test_multi_turn_episodes_over_http_match_local_ones():
    task = tasks.make("tool-products-v1")
    server, service = serve(task.env, task)
    try:
        remote = envs.make("remote-v1", url=server.url, token=TOKEN)
        assert isinstance(remote, RemoteMultiTurnEnvironment) and remote.stop == task.env.stop
        for p in task.problems("test", limit=2):
            script = task.env.scripted_turns(p)
            policy = lambda turns, s=script: s[sum(t.role.value == "model" for t in turns)]  # noqa: E731
            local_episode, remote_episode = play(task.env, p, policy), play(remote, p, policy)
            assert [t.text for t in remote_episode.turns] == [t.text for t in local_episode.turns]
            assert "```output" in remote_episode.turns[1].text  # the tool ran on the server
            local, served = task.env.verify_episode(p, local_episode), remote.verify_episode(p, remote_episode)
            assert (served.reward, served.passed, served.status) == (local.reward, local.passed, local.status) == (1.0, True, Status.OK)
    finally:
        server.shutdown()
        server.server_close()
        service.close()


def test_cli_serve_prints_its_url_and_token(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "envs", "serve", "math-v1", "--task", "arithmetic-v1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        token_line = proc.stdout.readline()
        assert first.startswith("serving math-v1 with arithmetic-v1's problems on http://127.0.0.1:"), first + proc.stderr.read()
        url = first.split(" on ")[1].strip()
        token = token_line.rsplit(" ", 1)[1].strip()
        remote = RemoteEnvironment(url, token)
        assert remote.info()["task"] == "arithmetic-v1"
        assert RemoteEnvironment(url, "not-the-token-at-all").verify(Problem("p", "q", "1"), "Answer: 1").status is Status.ERROR
    finally:
        proc.terminate()
        proc.wait(10)


def test_sessions_play_episodes_held_by_the_server():
    """POST /session/start, /session/act: the server plays the episode (a tool call's output comes
    back, then the verdict), equal to the local one; an unknown or finished session is a 404."""
    task = tasks.make("tool-products-v1")
    problem = task.problems("test", limit=1)[0]
    server, service = serve(task.env, task)
    try:
        env = RemoteEnvironment(server.url, TOKEN)
        opened = env.endpoint.call("POST", "/session/start", {"problem": {"split": "test", "index": 0}})
        from rlvr.hubs.session import hub_prompt

        assert opened["multi_turn"] and opened["prompt"] == hub_prompt(task.env, problem)  # chat messages with the answer format
        turns = task.env.scripted_turns(problem)
        first = env.endpoint.call("POST", "/session/act", {"session": opened["session"], "text": turns[0]})
        assert first["observation"]
        last = env.endpoint.call("POST", "/session/act", {"session": opened["session"], "text": turns[1]})
        local = task.env.verify_episode(problem, play(task.env, problem, lambda seen: turns[sum(t.role.value == "model" for t in seen)]))
        assert Verdict.from_dict(last["verdict"]).reward == local.reward == 1.0
        status, body = raw(server.url, "POST", "/session/act", json.dumps({"session": opened["session"], "text": "x"}).encode(),
                           {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        assert status == 404 and "no open session" in body["error"]
        status, _ = raw(server.url, "POST", "/session/start", json.dumps({"problem": {"split": "test", "index": 0}}).encode(),
                        {"Content-Type": "application/json"})
        assert status == 401
    finally:
        server.shutdown()
        server.server_close()
        service.close()


def test_servers_of_one_environment_with_different_settings_are_refused_by_connect():
    """A server started with other env kwargs scores the same answer differently: connect() must
    see it (GET /info's digest) and name the servers, and the digest must not carry the kwargs."""
    running = []
    for kwargs in ({}, {}, {"extraction": "lenient", "rel_tol": 0.123456789}):
        task = tasks.make("arithmetic-v1")
        task.env_kwargs = {**task.env_kwargs, **kwargs}
        server, service = make_env_server(task.env, Guards(TOKEN), task=task,
                                          verify=VerifySettings(workers=1, kind="thread"))
        server.serve_in_thread()
        running.append((server, service))
    try:
        urls = [s.url for s, _ in running]
        infos = [RemoteEnvironment(u, TOKEN).info() for u in urls]
        assert infos[0]["digest"] == infos[1]["digest"] != infos[2]["digest"]
        assert "0.123456789" not in json.dumps(infos[2]) and "lenient" not in json.dumps(infos[2])
        connect(urls[:2], TOKEN)  # same settings: fine
        with pytest.raises(ValueError, match="score differently") as e:
            connect(urls, TOKEN)
        assert "\n" not in str(e.value) and urls[2] in str(e.value)
    finally:
        for server, service in running:
            server.shutdown()
            server.server_close()
            service.close()


class _Trickle(BaseHTTPRequestHandler):
    """Answers 200 and then one byte at a time, each well within a read timeout."""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(24):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.25)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_a_server_that_trickles_its_answer_times_out_and_the_request_moves_to_another_server(arithmetic_server):
    """httpx's timeout bounds each read: the pool bounds the whole answer, so a trickle is a timeout
    (retried on a server not yet tried), not a wait as long as the server likes."""
    from rlvr.serve.client import RemoteError, RetryPolicy, ServerPool

    trickle = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=trickle.serve_forever, daemon=True).start()
    slow = f"http://127.0.0.1:{trickle.server_address[1]}"
    try:
        with ServerPool(slow, TOKEN, timeout_s=1.0, retry=RetryPolicy(attempts=1)) as pool:
            with pytest.raises(RemoteError, match="did not answer within 1 s") as e:
                pool.request("GET", "/info")
            assert e.value.timeout
        with ServerPool([slow, arithmetic_server[0].url], TOKEN, timeout_s=1.0) as pool:
            for _ in range(2):
                assert pool.request("GET", "/info")["task"] == "arithmetic-v1"
    finally:
        trickle.shutdown()
        trickle.server_close()


@pytest.mark.parametrize("args, says", [(["--verify-timeout", "0"], "--verify-timeout"), (["--port", "70000"], "port must be 0..65535"),
                                        (["--host", "0.0.0.0"], "--allow-remote")])
def test_cli_serve_refuses_bad_settings_in_one_line_at_start(args, says, capsys):
    from rlvr.cli import main

    assert main(["envs", "serve", "math-v1", "--task", "arithmetic-v1", "--token", TOKEN, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
