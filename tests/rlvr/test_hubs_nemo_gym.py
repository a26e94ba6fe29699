"""NeMo Gym both ways: rlvr's environment server in its NeMo Gym dialect answers verify requests sent
the way NeMo Gym prescribes (a dataset row to /seed_session, then the row and a Responses object to
/verify), by verifiers' own NeMo Gym taskset (the published client of NeMo Gym resources servers)
and by rlvr's nemo-gym: import; every reward equals rlvr's local verdict. NeMo Gym's own package
needs Python >= 3.13 and did not run here."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import tasks
from envs.types import Status
from rlvr.hubs import HubError, export
from rlvr.hubs.session import hub_prompt
from rlvr.serve import Guards, VerifySettings, make_env_server

TOKEN = "nemo-token-0123456789"
CASES = [("math-v1", "arithmetic-v1"), ("code-v1", "program-synthesis-v1")]


def completions(task, problem) -> list[str]:
    env = task.env
    prompt = problem.prompt if isinstance(problem.prompt, str) else problem.prompt[-1]["content"]
    return [env.gold_completion(problem), *env.wrong_completions(problem)[:2], "", prompt]


@pytest.fixture
def nemo_server(request, tmp_path):
    """rlvr's server for (env, task) in its NeMo Gym dialect, and the export's folder."""
    env_id, task_id = request.param
    task = tasks.make(task_id)
    export("nemo-gym", env_id, task, tmp_path / "export", splits=["train", "test"], limit=3)
    server, service = make_env_server(task.env, Guards(TOKEN, max_request_bytes=1 << 20), task=task, dialect="nemo-gym",
                                      verify=VerifySettings(workers=2, kind="thread", timeout_s=30))
    server.serve_in_thread()
    yield server, task, tmp_path / "export"
    server.shutdown()
    server.server_close()
    service.close()


def config_of(folder):
    return next((folder / "configs").glob("*.yaml"))


@pytest.mark.parametrize("nemo_server", CASES, indirect=True, ids=["math", "code"])
def test_verify_requests_the_nemo_gym_way_give_rlvr_rewards(nemo_server):
    server, task, folder = nemo_server
    imported = tasks.make(f"nemo-gym:{config_of(folder)}", url=server.url, token=TOKEN)
    assert imported.splits == ("train", "test", "validation") and imported.heldout_splits == ("test", "validation")
    vf_task = tasks.make("verifiers:nemo_gym", taskset={"dataset": str(folder / "data" / "test.jsonl"),
                                                        "task": {"resources_url": server.url, "headers": {"Authorization": f"Bearer {TOKEN}"}}})
    assert sum(vf_task.size(s) for s in vf_task.splits) == 3
    vf_problems = {p.reference["data"]["row"]["rlvr_problem"]["index"]: p for s in vf_task.splits for p in vf_task.problems(s)}
    for i, problem in enumerate(task.problems("test", limit=3)):
        mine = imported.get("test", i)
        assert mine.prompt == hub_prompt(task.env, problem)[0]["content"] and task.env.answer_instruction(problem) in mine.prompt
        assert "reference" not in mine.reference["row"]["rlvr_problem"]  # the server holds the answer
        theirs = vf_problems[i]
        for completion in completions(task, problem):
            want = task.env.verify(problem, completion)
            got = imported.env.verify(mine, completion)
            assert (got.reward, got.passed, got.status) == (want.reward, want.passed, want.status), (completion, got, want)
            by_verifiers = vf_task.env.verify(theirs, completion)  # verifiers' NeMoGymTask: seed_session, then verify
            assert by_verifiers.status is Status.OK and by_verifiers.reward == want.reward, (completion, by_verifiers, want)
            assert by_verifiers.info["metrics"]["passed"] == float(want.passed)


def oversized(url: str) -> int:
    """The status answered to a /verify that declares a 2 MiB body (refused before any of it is read)."""
    import http.client

    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest("POST", "/verify")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Content-Length", str(2 << 20))
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.mark.parametrize("nemo_server", CASES[:1], indirect=True, ids=["math"])
def test_bad_requests_are_refused_and_failures_counted(nemo_server, tmp_path):
    import urllib.error
    import urllib.request

    server, task, folder = nemo_server
    row = json.loads((folder / "data" / "test.jsonl").read_text().splitlines()[0])

    def post(body: bytes, token: str | None = TOKEN) -> int:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            with urllib.request.urlopen(urllib.request.Request(f"{server.url}/verify", data=body, headers=headers), timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    response = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "Answer: 1"}]}]}
    assert post(json.dumps({**row, "response": response}).encode(), token=None) == 401
    assert oversized(server.url) == 413
    assert post(json.dumps({"responses_create_params": {}, "response": response}).encode()) == 400  # no rlvr_problem
    assert post(json.dumps({**row, "response": {"output": "junk"}}).encode()) == 400
    assert post(json.dumps({**row, "response": response}).encode()) == 200
    # a row edited to name another problem, or served by a server whose task differs, is refused
    moved = {**row, "rlvr_problem": {**row["rlvr_problem"], "index": row["rlvr_problem"]["index"] + 1}}
    assert post(json.dumps({**moved, "response": response}).encode()) == 400

    # an unauthenticated client, a dead server and a junk server are counted verdicts naming the URL
    no_token = tasks.make(f"nemo-gym:{folder / 'data' / 'test.jsonl'}", url=server.url, token="")
    verdict = no_token.env.verify(no_token.get("test", 0), "Answer: 1")
    assert verdict.status is Status.ERROR and "401" in verdict.info["error"]
    dead = tasks.make(f"nemo-gym:{folder / 'data' / 'test.jsonl'}", url="http://127.0.0.1:9", timeout_s=5)
    verdict = dead.env.verify(dead.get("test", 0), "Answer: 1")
    assert verdict.status is Status.ERROR and "unreachable" in verdict.info["error"]

    class Junk(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"{}" if self.path == "/seed_session" else b'{"reward": "lots"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    junk = ThreadingHTTPServer(("127.0.0.1", 0), Junk)
    threading.Thread(target=junk.serve_forever, daemon=True).start()
    try:
        bad = tasks.make(f"nemo-gym:{folder / 'data' / 'test.jsonl'}", url=f"http://127.0.0.1:{junk.server_address[1]}")
        verdict = bad.env.verify(bad.get("test", 0), "Answer: 1")
        assert verdict.status is Status.ERROR and "numeric reward" in verdict.info["error"]
    finally:
        junk.shutdown()
        junk.server_close()


def test_multi_turn_is_refused_and_bad_task_configs_are_named(tmp_path):
    task = tasks.make("tool-products-v1")
    with pytest.raises(HubError, match="cannot express multi-turn"):
        export("nemo-gym", "math-code-v1", task, tmp_path / "x")
    with pytest.raises(ValueError, match="multi-turn"):
        make_env_server(task.env, Guards(TOKEN), task=task, dialect="nemo-gym")
    with pytest.raises(tasks.TaskError, match="url"):
        tasks.make(f"nemo-gym:{tmp_path / 'rows.jsonl'}")
    (tmp_path / "rows.jsonl").write_text('{"responses_create_params": {"input": "hi"}}\nnot json\n')
    with pytest.raises(tasks.TaskError, match="line 2 is not JSON"):
        tasks.make(f"nemo-gym:{tmp_path / 'rows.jsonl'}", url="http://127.0.0.1:9").size("test")
    (tmp_path / "c.yaml").write_text("agent:\n  responses_api_agents:\n    simple_agent:\n      datasets: []\n")
    with pytest.raises(tasks.TaskError, match="names no datasets"):
        tasks.make(f"nemo-gym:{tmp_path / 'c.yaml'}", url="http://127.0.0.1:9")
