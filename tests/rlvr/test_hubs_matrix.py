"""Every built-in task exported to every hub, loaded the way that hub loads it, and scored: the gold
and a wrong completion of the first problem get rlvr's own rewards (verifiers: the exported package
through verifiers' own taskset loader and ``Task.score``; SkyRL-Gym: ``skyrl_gym.make`` / ``step``;
OpenEnv: the export's episode code against rlvr's server, as its OpenEnv server runs it (OpenEnv's
package itself runs in scripts/test_openenv.sh); NeMo Gym: the exported row and a Responses object
posted to rlvr's server in its NeMo Gym dialect; Harbor: the task folder's ``tests/test.sh`` in a
sandbox). Then each format's data is tampered with and must be refused, naming the file.

Kept cheap: one problem per task; a task whose data is not on this machine is skipped with why."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import tasks
from rlvr.hubs import HUBS, HubError, export
from tests.rlvr.hub_state import fresh_exports

TOKEN = "matrix-token-0123456789"


def builtin_tasks() -> list[str]:
    from rlvr.commands.envs import _env_of

    return [t.id for t in tasks.TASKS.specs() if t.source == "rlvr" and _env_of(t)]


def first_problem(task_id: str):
    """(task, its environment id, the split exported, its first problem), or a skip saying why."""
    from rlvr.commands.envs import _env_of
    from tasks.dataset import DataUnavailable

    try:
        task = tasks.make(task_id)
        split = next((s for s in task.splits if s not in task.heldout_splits), task.splits[0])
        problem = task.problems(split, limit=1)[0]
    except (DataUnavailable, ImportError) as e:
        pytest.skip(f"{task_id}: its data or package is not available here: {str(e).splitlines()[0]}")
    return task, _env_of(tasks.TASKS.spec(task_id)), split, problem


def episodes(env, problem) -> list[list[str]]:
    """The gold episode and a wrong one (lists of model turns)."""
    gold = env.scripted_turns(problem) if hasattr(env, "scripted_turns") else [env.gold_completion(problem)]
    wrong = env.wrong_completions(problem)[:1] or ["no answer"]
    return [gold, [wrong[0]]]


def says_format(task, problem, prompt) -> bool:
    """Whether ``prompt`` (text or chat messages) tells the model the environment's answer format."""
    text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
    return task.env.answer_instruction(problem) in text


def local_reward(task, problem, turns: list[str]) -> float:
    from envs.episode import MultiTurnEnvironment, play

    env = task.env
    if isinstance(env, MultiTurnEnvironment):
        def model(seen):
            n = sum(t.role.value == "model" for t in seen)
            return turns[n] if n < len(turns) else ""
        return env.verify_episode(problem, play(env, problem, model)).reward
    return env.verify(problem, turns[0]).reward


@pytest.fixture
def served(request):
    """rlvr's server (NeMo Gym dialect too) for a task, in this process; its URL."""
    from rlvr.serve import Guards, VerifySettings, make_env_server

    servers = []

    def start(task):
        server, service = make_env_server(task.env, Guards(TOKEN, max_request_bytes=1 << 22), task=task,
                                          dialect=None if _multi(task) else "nemo-gym",
                                          verify=VerifySettings(workers=1, kind="thread", timeout_s=60))
        server.serve_in_thread()
        servers.append((server, service))
        return server.url

    yield start
    for server, service in servers:
        server.shutdown()
        server.server_close()
        service.close()


def _multi(task) -> bool:
    from envs.episode import MultiTurnEnvironment

    return isinstance(task.env, MultiTurnEnvironment)


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {"error": e.read().decode()}


@pytest.fixture(autouse=True)
def _fresh_imports():
    """Each test loads its exported packages from its own folder."""
    with fresh_exports():
        yield


def export_one(hub: str, task, env_id: str, split: str, out: Path):
    if _multi(task) and not HUBS[hub].multi_turn:
        with pytest.raises(HubError, match="cannot express multi-turn"):
            export(hub, env_id, task, out, splits=[split], limit=1)
        return None
    return export(hub, env_id, task, out, splits=[split], limit=1)


# -- each hub's way of loading and scoring the export ------------------------------------------


def score_verifiers(folder: Path, task, split, problem, turns, monkeypatch) -> float:
    from rlvr.hubs.session import Session, judge_for

    name = next(p.name for p in folder.iterdir() if (p / "taskset.py").is_file())
    monkeypatch.syspath_prepend(str(folder))
    package = importlib.import_module(name)
    if _multi(task):  # what the exported Env does with each model turn (vf-eval runs it: test_hubs_export)
        assert any(n.endswith("Env") for n in package.__all__)
        session = Session(judge_for(task.env_id, dict(task.env_kwargs), timeout_s=30.0), problem)
        reply = None
        for turn in turns:
            reply = session.act(turn)
            if reply.done:
                break
        if not reply.done:
            reply = session._finish(session._recorder.episode())
        return reply.verdict.reward
    imported = tasks.make(f"verifiers:{name}", splits={split: {"split": split}})  # verifiers' own loader and Task.score
    mine = imported.get(split, 0)
    assert says_format(task, problem, mine.prompt)
    return imported.env.verify(mine, turns[0]).reward


def score_skyrl(folder: Path, task, split, problem, turns, monkeypatch) -> float:
    import pyarrow.parquet as pq
    import skyrl_gym

    name = next(p.name for p in folder.iterdir() if p.is_dir())
    monkeypatch.syspath_prepend(str(folder))
    importlib.import_module(name)
    row = pq.read_table(folder / name / "data" / f"{split}.parquet").to_pylist()[0]
    env = skyrl_gym.make(name, extras=row)
    prompt, _ = env.init(row["prompt"])
    assert task.env.answer_instruction(problem) in prompt[-1]["content"]
    out = None
    for turn in turns:
        out = env.step(turn)
        if out["done"]:
            break
    assert out["done"]
    return out["reward"]


def episodes_module(folder: Path):
    spec = importlib.util.spec_from_file_location("server.rlvr_episodes_matrix", folder / "server" / "rlvr_episodes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def score_openenv(folder: Path, task, split, problem, turns, monkeypatch, url: str) -> float:
    for source in folder.rglob("*.py"):  # the OpenEnv side (models, client, app) is valid Python
        compile(source.read_text(), str(source), "exec")
    monkeypatch.setenv("RLVR_ENV_URL", url)
    monkeypatch.setenv("RLVR_ENV_TOKEN", TOKEN)
    episodes = episodes_module(folder).Episodes()
    held = split in task.heldout_splits  # a seed below 1,000,000 plays the training split; a held-out one is named
    started = episodes.start(split=split, index=0) if held else episodes.start(seed=0)
    assert started["split"] == split and not started["done"], started
    assert says_format(task, problem, started["prompt"])
    answer = started
    for turn in turns:
        answer = episodes.act(turn)
        if answer["done"]:
            break
    assert answer["done"] and answer["verdict"]["status"] == "ok", answer
    return answer["reward"]


def score_nemo(folder: Path, task, split, problem, turns, monkeypatch, url: str) -> float:
    row = json.loads((folder / "data" / f"{split}.jsonl").read_text().splitlines()[0])
    assert "reference" not in row["rlvr_problem"]
    assert task.env.answer_instruction(problem) in row["responses_create_params"]["input"][-1]["content"]
    response = {"output": [{"type": "message", "content": [{"type": "output_text", "text": turns[0]}]}]}
    assert post(f"{url}/seed_session", row)[0] == 200
    status, answer = post(f"{url}/verify", {**row, "response": response})
    assert status == 200, answer
    return answer["reward"]


def score_harbor(folder: Path, task, split, problem, turns, monkeypatch) -> float:
    imported = tasks.make(f"harbor:{folder}")
    write = f"```bash\ncat > /app/response.txt <<'EOF_RESPONSE'\n{turns[0]}\nEOF_RESPONSE\n```"
    verdict = imported.env.verify(imported.get("test", 0), write)
    assert verdict.status.value == "ok", verdict
    return verdict.reward


SCORERS = {"verifiers": score_verifiers, "skyrl-gym": score_skyrl, "openenv": score_openenv, "nemo-gym": score_nemo, "harbor": score_harbor}


@pytest.mark.parametrize("hub", sorted(HUBS))
@pytest.mark.parametrize("task_id", builtin_tasks())
def test_every_builtin_task_exports_loads_and_scores_on_every_hub(tmp_path, monkeypatch, served, task_id, hub):
    task, env_id, split, problem = first_problem(task_id)
    out = tmp_path / "out"
    if export_one(hub, task, env_id, split, out) is None:
        return  # refused, naming multi-turn, as the format cannot say it
    extra = {"url": served(task)} if hub in ("openenv", "nemo-gym") else {}
    for turns in episodes(task.env, problem):
        got = SCORERS[hub](out, task, split, problem, turns, monkeypatch, **extra)
        assert got == local_reward(task, problem, turns), (hub, task_id, turns)
