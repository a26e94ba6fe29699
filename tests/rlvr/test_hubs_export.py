"""Exports run by the hubs' own packages: SkyRL-Gym builds and steps the exported environment
(``skyrl_gym.make``), verifiers evaluates the exported taskset with its own ``vf-eval`` against a
scripted model; every reward equals rlvr's verdict on the same completion. Formats that cannot say
something are refused naming it."""

from __future__ import annotations

import importlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import tasks
from rlvr.hubs import HubError, export, require
from rlvr.hubs.session import hub_prompt
from tests.rlvr.hub_state import fresh_exports

HERE = Path(__file__).parent
PYTHON_BIN = Path(sys.executable).parent

CASES = [  # (environment, task): math, code in the sandbox, and a multi-turn tool episode
    ("math-v1", "arithmetic-v1"),
    ("code-v1", "program-synthesis-v1"),
    ("math-code-v1", "tool-products-v1"),
]


def completions_for(task, problem) -> list[list[str]]:
    """Scripted episodes (lists of model turns): the gold one, wrong ones, an empty one, an echo."""
    env = task.env
    gold = env.scripted_turns(problem) if hasattr(env, "scripted_turns") else [env.gold_completion(problem)]
    return [gold, *([w] for w in env.wrong_completions(problem)[:2]), [""], [problem.prompt if isinstance(problem.prompt, str) else ""]]


def local_verdict(task, problem, turns: list[str]):
    """rlvr's own verdict on the scripted turns (an episode for a multi-turn environment)."""
    from envs.episode import MultiTurnEnvironment, play

    env = task.env
    if isinstance(env, MultiTurnEnvironment):
        episode = play(env, problem, lambda seen: turns[sum(t.role.value == "model" for t in seen)] if
                       sum(t.role.value == "model" for t in seen) < len(turns) else "")
        return env.verify_episode(problem, episode)
    return env.verify(problem, turns[0])


@pytest.fixture(autouse=True)
def _fresh_imports():
    """Each test loads its exported packages from its own folder."""
    with fresh_exports():
        yield


@pytest.mark.parametrize("env_id,task_id", CASES)
def test_skyrl_gym_steps_the_export_with_rlvr_rewards(tmp_path, env_id, task_id, monkeypatch):
    import pyarrow.parquet as pq
    import skyrl_gym

    task = tasks.make(task_id)
    result = export("skyrl-gym", env_id, task, tmp_path / "out", splits=["train", "test"], limit=4)
    name = next(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    monkeypatch.syspath_prepend(str(tmp_path / "out"))
    package = importlib.import_module(name)
    rows = pq.read_table(tmp_path / "out" / name / "data" / "test.parquet").to_pylist()
    assert len(rows) == 4 and rows[0]["env_class"] == name and any(str(f).endswith("train.parquet") for f in result.files)
    manifest = json.loads((tmp_path / "out" / name / "data" / "rlvr_export.json").read_text())
    assert manifest["splits"]["test"]["heldout"] and not manifest["splits"]["train"]["heldout"]
    assert package.rows("test")[0]["extra_info"]["rlvr_problem"] == json.loads(rows[0]["extra_info"]["rlvr_problem"])
    for row, problem in zip(rows, task.problems("test", limit=4)):
        for turns in completions_for(task, problem):
            env = skyrl_gym.make(name, extras=row)  # what SkyRL's generator does per sample
            prompt, _ = env.init(row["prompt"])
            assert prompt == row["prompt"] or task.env.format_prompt(problem) != problem.prompt
            out = None
            for turn in turns:
                out = env.step(turn)
                if out["done"]:
                    break
                assert out["observations"][0]["role"] == "user"
            want = local_verdict(task, problem, turns)
            assert out["done"] and out["reward"] == want.reward, (turns, out, want)
            assert out["metadata"]["rlvr_verdict"]["status"] == want.status.value


def run_vf_eval(tmp_path: Path, env_id: str, task, script: dict[str, list[str]], n: int) -> list[dict]:
    """Export ``env_id`` on ``task`` to verifiers and evaluate its test split with verifiers' own
    ``vf-eval`` (null harness, subprocess runtime) against the scripted model; the traces."""
    sys.path.insert(0, str(HERE))
    from scripted_chat import ScriptedChat

    result = export("verifiers", env_id, task, tmp_path / "pkg", splits=["test"], limit=n)
    # the command line the export prints, with the scripted model for MODEL and URL
    printed = shlex.split(next(line for line in result.run if line.startswith("vf-eval") and "--model" in line))
    printed[printed.index("-n") + 1] = str(n)
    printed = [{"MODEL": "scripted"}.get(a, a) for a in printed]
    chat = ScriptedChat(script)
    printed[printed.index("URL")] = chat.base_url
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), os.environ.get("PYTHONPATH", "")]),
               "SCRIPTED_KEY": "unused", "PATH": f"{PYTHON_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        proc = subprocess.run([str(PYTHON_BIN / "vf-eval"), *printed[1:], "--client.api-key-var", "SCRIPTED_KEY", "-o", str(tmp_path / "runs")],
                              env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    finally:
        chat.close()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    episodes = [json.loads(line) for f in (tmp_path / "runs").rglob("traces.jsonl") for line in f.read_text().splitlines()]
    assert len(episodes) == n and all(len(e["traces"]) == 1 for e in episodes), proc.stdout[-2000:]
    return [e["traces"][0] for e in episodes]  # one agent per episode


@pytest.mark.slow
@pytest.mark.parametrize("env_id,task_id", CASES)
def test_vf_eval_runs_the_export_with_rlvr_rewards(tmp_path, env_id, task_id):
    task = tasks.make(task_id)
    problems = task.problems("test", limit=3)
    episodes = [completions_for(task, p) for p in problems]
    chosen = [episodes[0][0], episodes[1][1], episodes[2][0]]  # gold, wrong, gold
    prompts = [hub_prompt(task.env, p) for p in problems]  # what the export shows: the question and its answer format
    script = {p[-1]["content"]: turns for p, turns in zip(prompts, chosen)}
    traces = run_vf_eval(tmp_path, env_id, task, script, 3)
    by_id = {t["task"]["data"]["rlvr_problem"]["id"]: t for t in traces}
    for problem, turns in zip(problems, chosen):
        trace = by_id[problem.id]
        want = local_verdict(task, problem, turns)
        assert trace["rewards"]["rlvr"]["score"] == want.reward, (problem.id, trace["rewards"], want)
        assert trace["metrics"]["rlvr_passed"] == float(want.passed) and trace["metrics"]["rlvr_verify_failed"] == 0.0
    assert [by_id[p.id]["rewards"]["rlvr"]["score"] for p in problems] == [1.0, 0.0, 1.0]


def test_formats_without_turns_refuse_multi_turn_and_missing_packages_name_the_extra(tmp_path):
    task = tasks.make("tool-products-v1")
    with pytest.raises(HubError, match="cannot express multi-turn episodes"):
        export("harbor", "math-code-v1", task, tmp_path / "harbor")
    with pytest.raises(HubError, match=r"pip install 'rlvr\[hubs\]'"):
        require("verifiers_not_installed_here", "verifiers")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(HubError, match="not an empty folder"):
        export("skyrl-gym", "math-v1", tasks.make("arithmetic-v1"), tmp_path / "full")


def test_cli_export_names_what_it_wrote(tmp_path, capsys):
    from rlvr.cli import main

    assert main(["envs", "export", "math-v1", "--task", "arithmetic-v1", "--to", "verifiers", "--split", "test", "--limit", "2",
                 "--out", str(tmp_path / "vf")]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "vf-eval rlvr_vf_math_arithmetic_v1" in out and "--env.agent.runtime.type subprocess" in out and "--no-push" in out
    assert main(["envs", "export", "math-code-v1", "--task", "tool-products-v1", "--to", "harbor", "--out", str(tmp_path / "h")]) == 2
    assert "multi-turn" in capsys.readouterr().err


def test_printed_vf_eval_line_names_the_flags_its_run_needs(tmp_path, capsys):
    """The command `rlvr envs export` prints. That vf-eval has every flag in it is proven by
    test_vf_eval_runs_the_export_with_rlvr_rewards, which runs vf-eval with the printed line: vf-eval
    refuses a flag it does not have ("Extra inputs are not permitted"), so no `vf-eval --help` is
    started here to look for them."""
    from rlvr.cli import main

    assert main(["envs", "export", "math-v1", "--task", "arithmetic-v1", "--to", "verifiers", "--limit", "2", "--out", str(tmp_path / "vf")]) == 0
    line = next(ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("vf-eval") and "--model" in ln)
    flags = [word for word in line.split() if word.startswith("--")]
    assert {"--env.agent.runtime.type", "--no-push", "--env.taskset.split"} <= set(flags) and "train" in line.split()
    task = tasks.make("arithmetic-v1")
    printed = next(ln for ln in export("verifiers", "math-v1", task, tmp_path / "vf2", limit=2).run if ln.startswith("vf-eval") and "--model" in ln)
    assert printed.split()[2:] == line.split()[2:]  # the line the run test passes to vf-eval (the package's name aside)


def test_unknown_hub_names_and_ambiguous_defaults_are_one_line_errors(tmp_path, capsys):
    from rlvr.cli import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": [{"role": "user", "content": "1+1?"}], "reward_spec": {"ground_truth": "2"}}) + "\n")
    for argv in (["envs", "check", "hubs/verifiers-v1", "--task", "verifiers:no_such_taskset"],
                 ["envs", "check", "hubs/verifiers-v1", "--task", "verifiers:json"],  # a module that is not a taskset
                 ["envs", "check", "hubs/skyrl-gym-v1", "--task", "skyrl-gym:no_such_env", "--task-config", json.dumps({"data": {"test": str(rows)}})],
                 ["envs", "export", "math-v1", "--to", "verifiers", "--out", str(tmp_path / "x")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "no_such" not in err and "--task" in err and "arithmetic-v1" in err  # several own tasks: --task names them


def test_export_without_task_uses_the_environments_own_task(tmp_path, capsys):
    from rlvr.cli import main

    assert main(["envs", "export", "math-code-v1", "--to", "skyrl-gym", "--limit", "1", "--out", str(tmp_path / "s")]) == 0
    manifest = json.loads(next((tmp_path / "s").rglob("rlvr_export.json")).read_text())
    assert manifest["task"] == "tool-products-v1"


def test_names_carry_the_hub_and_sessions_default_to_train(tmp_path, monkeypatch):
    task = tasks.make("arithmetic-v1")
    export("verifiers", "math-v1", task, tmp_path / "vf", limit=2)
    export("skyrl-gym", "math-v1", task, tmp_path / "sk", limit=2)
    names = {next(p.name for p in (tmp_path / h).iterdir() if p.is_dir()) for h in ("vf", "sk")}
    assert len(names) == 2 and all("_vf_" in n or "_skyrl_" in n for n in names)
    pyprojects = {(tmp_path / h / "pyproject.toml").read_text().split('name = "')[1].split('"')[0] for h in ("vf", "sk")}
    assert len(pyprojects) == 2  # installing one does not remove the other
    vf_name = next(n for n in names if "_vf_" in n)
    monkeypatch.syspath_prepend(str(tmp_path / "vf"))
    taskset = importlib.import_module(f"{vf_name}.taskset")
    config = next(getattr(taskset, n) for n in dir(taskset) if n.endswith("Config") and not n.endswith("TaskConfig") and n.startswith("Rlvr") and n != "RlvrTasksetConfig")
    assert config().split == "train"
    manifest = json.loads((tmp_path / "vf" / vf_name / "data" / "rlvr_export.json").read_text())
    assert {s: v["heldout"] for s, v in manifest["splits"].items()} == {"train": False, "test": True, "validation": True}


@pytest.mark.parametrize("name", ["rlvr", "envs", "verifiers", "os", "json", "torch", "class"])
def test_a_name_that_would_shadow_a_module_is_refused_in_one_line(tmp_path, capsys, name):
    from rlvr.cli import main

    assert main(["envs", "export", "math-v1", "--task", "arithmetic-v1", "--to", "verifiers", "--limit", "1", "--name", name,
                 "--out", str(tmp_path / "vf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and (f"--name {name!r}" in err or "identifier" in err), err
    assert not (tmp_path / "vf").exists() or not any((tmp_path / "vf").iterdir())


def test_an_earlier_export_may_be_exported_again_under_its_name(tmp_path, monkeypatch):
    task = tasks.make("arithmetic-v1")
    export("verifiers", "math-v1", task, tmp_path / "one", limit=1, name="my_arith_pkg")
    monkeypatch.syspath_prepend(str(tmp_path / "one"))
    export("verifiers", "math-v1", task, tmp_path / "two", limit=1, name="my_arith_pkg")
    assert (tmp_path / "two" / "my_arith_pkg" / "taskset.py").is_file()
