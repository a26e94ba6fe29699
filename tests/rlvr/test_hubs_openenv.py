"""OpenEnv both ways, with OpenEnv's own package (openenv-core, in .venv-openenv: it cannot share an
environment with rlvr's pins; scripts/test_openenv.sh runs these, elsewhere they skip):

- rlvr's exports (math, sandboxed code, a multi-turn tool episode) served by OpenEnv's server
  (``create_app``) and played by OpenEnv's ``EnvClient`` over its WebSocket sessions; the server
  forwards each episode to rlvr's environment server, and every reward equals rlvr's local verdict.
- OpenEnv's own template environment (``openenv init``, an echo environment rewarding 0.1 per
  character) imported as ``openenv:URL``: its rewards, rlvr's self-check catching that an echo of the
  prompt earns them, and a few GRPO steps and ``rlvr eval`` on it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tasks
from envs.checks import check_environment
from envs.types import Status
from rlvr.hubs import export
from rlvr.hubs.session import hub_prompt
from rlvr.serve import Guards, VerifySettings, make_env_server

pytestmark = pytest.mark.openenv

HERE = Path(__file__).parent
TOKEN = "openenv-token-0123456789"
CASES = [("math-v1", "arithmetic-v1"), ("code-v1", "program-synthesis-v1"), ("math-code-v1", "tool-products-v1")]

CLIENT = '''
import json, sys
from client import RlvrEnv
from models import RlvrAction

episodes = json.loads(sys.stdin.read())
with RlvrEnv(base_url=sys.argv[1]).sync() as env:
    for episode in episodes:
        result = env.reset(split=episode.get("split", "test"), index=episode["index"])
        seen = {"index": episode["index"], "prompt": result.observation.prompt, "observations": [], "reset_done": result.done,
                "verdict": result.observation.verdict}
        if not result.done:
            for turn in episode["turns"]:
                result = env.step(RlvrAction(message=turn))
                if result.done:
                    break
                seen["observations"].append(result.observation.observation)
            seen.update(reward=result.reward, done=result.done, verdict=result.observation.verdict)
        print(json.dumps(seen), flush=True)
'''


@pytest.fixture(scope="module")
def openenv_python() -> str:
    python = os.environ.get("RLVR_OPENENV_PYTHON")
    if not python:
        pytest.skip("needs OpenEnv's package in its own environment: scripts/test_openenv.sh sets it up and runs these")
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], cwd: Path, port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a server and wait until it answers ``GET /health``."""
    import urllib.request

    log = open(cwd / f"server-{port}.log", "w")
    proc = subprocess.Popen(args, cwd=cwd, env={**os.environ, "PYTHONPATH": "", **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {(cwd / f'server-{port}.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"server did not start: {(cwd / f'server-{port}.log').read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def play(python: str, folder: Path, url: str, episodes: list[dict]) -> list[dict]:
    (folder / "play.py").write_text(CLIENT)
    proc = subprocess.run([python, "play.py", url], cwd=folder, input=json.dumps(episodes), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("env_id,task_id", CASES, ids=["math", "code", "tool"])
def test_openenv_plays_rlvr_exports_with_rlvr_rewards(openenv_python, tmp_path, env_id, task_id):
    sys.path.insert(0, str(HERE))
    from test_hubs_export import completions_for, local_verdict

    task = tasks.make(task_id)
    folder = tmp_path / "export"
    export("openenv", env_id, task, folder, splits=["test"], limit=2)
    assert "app: server.app:app" in (folder / "openenv.yaml").read_text()
    server, service = make_env_server(task.env, Guards(TOKEN), task=task, verify=VerifySettings(workers=2, kind="thread", timeout_s=30))
    server.serve_in_thread()
    port = free_port()
    proc = start([openenv_python, "-m", "server.app", "--port", str(port)], folder, port,
                 {"RLVR_ENV_URL": server.url, "RLVR_ENV_TOKEN": TOKEN})
    try:
        problems = task.problems("test", limit=2)
        episodes, wanted = [], []
        for i, problem in enumerate(problems):
            for turns in completions_for(task, problem):
                episodes.append({"index": i, "turns": turns})
                wanted.append(local_verdict(task, problem, turns))
        seen = play(openenv_python, folder, f"http://127.0.0.1:{port}", episodes)
        assert len(seen) == len(episodes)
        for episode, got, want in zip(episodes, seen, wanted):
            assert got["done"] and got["reward"] == want.reward, (episode, got, want)
            assert got["verdict"]["status"] == want.status.value and got["verdict"]["passed"] == want.passed
        if env_id == "math-code-v1":  # the gold episode called the tool: its output came back as an observation
            assert seen[0]["observations"] and seen[0]["observations"][0]
        assert seen[0]["prompt"] == hub_prompt(task.env, problems[0])  # with the answer format
    finally:
        stop(proc)
        server.shutdown()
        server.server_close()
        service.close()

    # rlvr's server gone: the episode ends at once with an error verdict that says why, no crash
    port = free_port()
    proc = start([openenv_python, "-m", "server.app", "--port", str(port)], folder, port,
                 {"RLVR_ENV_URL": f"http://127.0.0.1:{free_port()}", "RLVR_ENV_TOKEN": TOKEN})
    try:
        [got] = play(openenv_python, folder, f"http://127.0.0.1:{port}", [{"index": 0, "turns": ["Answer: 1"]}])
        assert got["reset_done"] and got["verdict"]["status"] == "error" and "failed" in got["verdict"]["info"]["error"]
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def echo_server(openenv_python, tmp_path_factory):
    """OpenEnv's own template environment, made by its CLI (``openenv init``) and served by uvicorn."""
    root = tmp_path_factory.mktemp("openenv-init")
    cli = Path(openenv_python).parent / "openenv"
    made = subprocess.run([str(cli), "init", "echo_demo"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ""})
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    port = free_port()
    proc = start([openenv_python, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port)], root / "echo_demo", port)
    yield f"http://127.0.0.1:{port}"
    stop(proc)


def test_openenv_template_environment_imports_with_its_own_rewards(echo_server):
    task = tasks.make(f"openenv:{echo_server}", size={"train": 4, "test": 2})
    assert task.env_kwargs["action_field"] == "message"  # from the server's /schema
    problem = task.get("test", 0)
    assert problem.prompt == "Echo Demo environment ready!"
    for text in ("hi", "a longer reply of forty characters......", ""):
        verdict = task.env.verify(problem, text)
        assert verdict.status is Status.OK and verdict.reward == pytest.approx(0.1 * len(text)), verdict  # its own reward
    report = check_environment(task.env, task.problems("test"), timeout_s=30)
    by_name = {r.name: r for r in report.results}
    # the template rewards length, so an echo of the prompt earns a pass: rlvr's self-check says so
    assert not by_name["echo of the prompt fails"].passed and by_name["verifier works"].passed
    dead = tasks.TaskError
    with pytest.raises(dead, match="cannot read the server's /schema"):
        tasks.make(f"openenv:http://127.0.0.1:{free_port()}", timeout_s=3)
    with pytest.raises(dead, match="no text field 'nope'"):
        tasks.make(f"openenv:{echo_server}", action_field="nope")


@pytest.mark.slow
def test_openenv_template_environment_trains_and_evaluates(echo_server, tmp_path, rl_overrides):
    """A few GRPO steps on the template environment from a fresh embedded model (its reward is the
    reply's length, so sampled replies differ in reward), then ``rlvr eval`` on its test resets."""
    from rlvr.cli import main
    from rlvr.config import load_config
    from rlvr.models.tiny import TinyModelConfig, build_tiny_model
    from rlvr.train import TrainConfig, train

    base = build_tiny_model(TinyModelConfig(hidden_size=64, layers=2, heads=2, intermediate_size=128), tmp_path / "base")
    config = {"size": {"train": 16, "test": 4}}
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(
        tmp_path, base, f"task.id=openenv:{echo_server}", f"task.config={json.dumps(config)}", "update.steps=2",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=24", "eval.every=0", "eval.at_start=false",
        "log.tensorboard=false", "log.checkpoint_every=0", "log.plot=false"))
    result = train(cfg)
    assert result.status == "completed" and result.steps == 2
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines() if "reward/mean" in line]
    assert len(rows) == 2 and all(r["verify/errors"] + r["verify/timeouts"] == 0 for r in rows)
    assert all(r["reward/mean"] > 0 for r in rows), rows  # 0.1 per character the model wrote
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(result.run_dir / "final"), "--task", f"openenv:{echo_server}", "--task-config", json.dumps(config),
                 "--max-new-tokens", "24", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["problems"] == 4 and report["task"]["env"] == "hubs/openenv-v1"
