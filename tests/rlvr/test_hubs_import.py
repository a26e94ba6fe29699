"""Other hubs' environments as rlvr tasks: a Harbor task folder written by hand after Harbor's
documented layout (``harbor:DIR``), run the way the format prescribes (the agent's commands in
/app, then the task's tests/test.sh writing /logs/verifier/reward.txt), passes `rlvr envs check`;
an rlvr export read back the same way keeps rlvr's rewards."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import tasks
from envs.checks import check_environment
from envs.types import Status
from rlvr.hubs import export


def hello_task(root: Path) -> Path:
    """A Harbor task in the shape of Harbor's documented hello-world example, written here."""
    task = root / "hello-world"
    files = {
        "instruction.md": "Create a file /app/hello.txt whose only line is: Hello, world!\n",
        "task.toml": 'version = "1.0"\n\n[metadata]\ndifficulty = "easy"\n\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 120.0\n',
        "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
        "solution/solve.sh": "#!/bin/bash\necho 'Hello, world!' > /app/hello.txt\n",
        "tests/test.sh": textwrap.dedent("""\
            #!/bin/bash
            mkdir -p /logs/verifier
            if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
              echo 1 > /logs/verifier/reward.txt
            else
              echo 0 > /logs/verifier/reward.txt
            fi
            """),
    }
    for rel, text in files.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return root


def test_a_hand_written_harbor_task_imports_and_passes_the_self_check(tmp_path):
    task = tasks.make(f"harbor:{hello_task(tmp_path)}")
    assert task.id.startswith("harbor:") and task.size("test") == 1
    problem = task.get("test", 0)
    env = task.env
    assert env.verify(problem, "```bash\necho 'Hello, world!' > /app/hello.txt\n```").passed
    assert not env.verify(problem, "```bash\necho 'Hello, world' > /app/hello.txt\n```").passed
    empty = env.verify(problem, "")  # no commands: the task's own test.sh judges /app as the agent left it
    assert empty.status is Status.OK and empty.reward == 0.0 and "test.sh" in env.reward_semantics()
    report = check_environment(env, task.problems("test"), timeout_s=60)
    assert report.passed, [(r.name, r.detail) for r in report.results]


def test_missing_tests_or_folders_are_named(tmp_path):
    with pytest.raises(tasks.TaskError, match="no such folder"):
        tasks.make(f"harbor:{tmp_path / 'nope'}")
    (tmp_path / "t" / "x").mkdir(parents=True)
    (tmp_path / "t" / "x" / "instruction.md").write_text("do it")
    with pytest.raises(tasks.TaskError, match="no tests/test.sh"):
        tasks.make(f"harbor:{tmp_path / 't'}")


@pytest.mark.parametrize("env_id,task_id", [("math-v1", "arithmetic-v1"), ("code-v1", "program-synthesis-v1")])
def test_an_rlvr_export_runs_as_harbor_tasks_with_rlvr_rewards(tmp_path, env_id, task_id):
    source = tasks.make(task_id)
    export("harbor", env_id, source, tmp_path / "out", splits=["test"], limit=2)
    imported = tasks.make(f"harbor:{tmp_path / 'out'}")
    assert imported.size("test") == 2
    for i, problem in enumerate(source.problems("test", limit=2)):
        harbor_problem = imported.get("test", i)
        assert problem.prompt.strip() in harbor_problem.prompt
        for completion in (source.env.gold_completion(problem), *source.env.wrong_completions(problem)[:1]):
            want = source.env.verify(problem, completion)
            write = f"```bash\ncat > /app/response.txt <<'EOF_RESPONSE'\n{completion}\nEOF_RESPONSE\n```"
            got = imported.env.verify(harbor_problem, write)
            assert got.reward == want.reward, (completion, got, want)


# -- SkyRL-Gym: the package's own environments on SkyRL dataset rows ----------------------------


def skyrl_rows(folder: Path, env_class: str, answer_key: str = "reward_spec", n: int = 12) -> dict[str, str]:
    """SkyRL dataset rows (prompt as chat messages, env_class, the ground truth under ``answer_key``,
    extra_info), in the shape SkyRL's dataset scripts write them, for arithmetic-v1's problems."""
    source = tasks.make("arithmetic-v1")
    files = {}
    for split in ("train", "test"):
        path = folder / f"{split}.jsonl"
        rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": p.prompt}], "env_class": env_class,
                 answer_key: {"method": "rule", "ground_truth": str(p.reference)}, "extra_info": {"split": split, "index": i}}
                for i, p in enumerate(source.problems(split, limit=n))]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        files[split] = str(path)
    return files


@pytest.mark.parametrize("env_class,answer_key,gold", [("gsm8k", "reward_spec", "#### {ground_truth}"),
                                                       ("aime", "reward_model", "Answer: {ground_truth}")])
def test_skyrl_gym_environments_import_with_their_own_rewards(tmp_path, capsys, env_class, answer_key, gold):
    import skyrl_gym

    data = skyrl_rows(tmp_path, env_class, answer_key)
    task = tasks.make(f"skyrl-gym:{env_class}", data=data, gold=gold)
    # no validation file: one carved from the train rows, disjoint from them, so built-in configs work
    assert task.splits == ("train", "test", "validation") and task.heldout_splits == ("test", "validation")
    train, validation = task.problems("train"), task.problems("validation")
    assert validation and not {json.dumps(p.reference, sort_keys=True) for p in train} & {json.dumps(p.reference, sort_keys=True) for p in validation}
    problem = task.get("test", 0)
    row = json.loads(Path(data["test"]).read_text().splitlines()[0])
    assert problem.prompt == row["prompt"][0]["content"]
    rewards = {}
    for completion in (gold.format(ground_truth=row[answer_key]["ground_truth"]), "Answer: 0", "#### 0", problem.prompt, "", "  \n"):
        hub = skyrl_gym.make(env_class, extras=row)  # the hub's own environment, as SkyRL's generator builds it
        hub.init(row["prompt"])
        want = hub.step(completion)["reward"]
        got = task.env.verify(problem, completion)
        assert got.reward == want and got.passed == (want >= 1.0), (completion, got, want)
        rewards[completion] = got.reward
    # the hub's semantics kept: an empty reply never outranks a wrong one (SkyRL's AIME: -1 for both)
    assert rewards[""] <= min(rewards["Answer: 0"], rewards["#### 0"])
    assert "skyrl-gym's own rewards" in task.env.reward_semantics() and "empty" in task.env.reward_semantics()
    from rlvr.cli import main

    main(["envs", "check", "hubs/skyrl-gym-v1", "--task", f"skyrl-gym:{env_class}", "--task-config", json.dumps({"data": data, "gold": gold}),
          "-n", "2"])
    assert f"[info] rewards: {task.env.reward_semantics()}" in capsys.readouterr().out  # the self-check says whose rewards these are
    report = check_environment(task.env, task.problems("test", limit=4), timeout_s=30)
    assert report.passed, [(r.name, r.detail) for r in report.results]


@pytest.mark.parametrize("env_class,answer_key,gold", [("aime", "reward_spec", "Answer: {}"), ("gsm8k", "reward_model", "#### {}")])
def test_skyrl_rows_give_the_ground_truth_under_either_name(tmp_path, env_class, answer_key, gold):
    """SkyRL's environments read ``reward_spec`` or ``reward_model`` (aime the latter): rows with either
    work with every environment, as docs/hubs.md says."""
    data = skyrl_rows(tmp_path, env_class, answer_key, n=2)
    task = tasks.make(f"skyrl-gym:{env_class}", data=data)
    problem = task.get("test", 0)
    truth = problem.reference["row"][answer_key]["ground_truth"]
    verdict = task.env.verify(problem, gold.format(truth))
    assert verdict.reward == 1.0 and verdict.passed, verdict
    assert task.env.verify(problem, gold.format(truth + "1")).reward < 1.0


def test_skyrl_gym_bad_input_is_named(tmp_path):
    with pytest.raises(tasks.TaskError, match="give the dataset rows"):
        tasks.make("skyrl-gym:gsm8k")
    data = skyrl_rows(tmp_path, "aime", "reward_model", n=2)
    with pytest.raises(tasks.TaskError, match="is for environment 'aime'; use task id skyrl-gym:aime"):
        tasks.make("skyrl-gym:gsm8k", data=data).get("test", 0)
    with pytest.raises(ValueError, match="skyrl-gym has no environment 'nope'"):
        tasks.make("skyrl-gym:nope", data=data).env
    with pytest.raises(tasks.TaskError, match=r"skyrl-gym:aime: unknown config key\(s\) \['colour'\]; known: \["):
        tasks.make("skyrl-gym:aime", data=data, colour="blue")
    same = tasks.make("skyrl-gym:aime", data={"train": data["test"], "test": data["test"]})
    with pytest.raises(tasks.TaskError, match="would leak"):
        tasks.assert_disjoint((same, "train"), [(same, "test")])


# -- verifiers: a taskset's tasks and its own reward functions ----------------------------------

TASKSET = '''"""A verifiers v1 taskset in the shape of verifiers' reverse-text example, written here: reverse a
word; the reward is 1 when the reply's <reversed> tag holds the reversal."""

import re

import verifiers.v1 as vf


class WordData(vf.TaskData):
    answer: str


class WordTask(vf.Task[WordData]):
    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        found = re.search(r"<reversed>(.*?)</reversed>", trace.last_reply or "", re.S)
        return float(bool(found) and found.group(1).strip() == self.data.answer)

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or ""))


class WordsConfig(vf.TasksetConfig):
    words: list[str] = ["kite", "lemon", "river", "stone", "cloud", "maple", "tiger", "amber", "delta", "orbit"]


class WordsTaskset(vf.Taskset[WordTask, WordsConfig]):
    def load(self):
        for word in self.config.words:
            yield WordTask(WordData(prompt=f"Reverse the word {word}.", system_prompt="Answer in <reversed></reversed> tags.",
                                    answer=word[::-1]), self.config.task)


class DrivenEnv(vf.SingleAgentEnv):
    async def run(self, task, agents):  # an environment that plays its own turns
        return None


__all__ = ["WordsTaskset"]
'''


@pytest.fixture
def word_taskset(tmp_path, monkeypatch):
    (tmp_path / "rlvr_test_words").mkdir()
    (tmp_path / "rlvr_test_words" / "__init__.py").write_text(TASKSET)
    driven = TASKSET.replace('__all__ = ["WordsTaskset"]', '__all__ = ["WordsTaskset", "DrivenEnv"]')
    (tmp_path / "rlvr_test_driven").mkdir()
    (tmp_path / "rlvr_test_driven" / "__init__.py").write_text(driven)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "rlvr_test_words"
    for name in [m for m in sys.modules if m.startswith("rlvr_test_")]:
        del sys.modules[name]


def test_a_verifiers_taskset_imports_scored_by_its_own_rewards(word_taskset):
    task = tasks.make(f"verifiers:{word_taskset}", gold="<reversed>{answer}</reversed>")
    train, test = task.problems("train"), task.problems("test")
    assert len(train) + len(test) == 10 and test and train  # split by a hash of the prompt, test held out
    assert not {p.prompt[-1]["content"] for p in train} & {p.prompt[-1]["content"] for p in test}
    problem = test[0]
    assert problem.prompt[0] == {"role": "system", "content": "Answer in <reversed></reversed> tags."}
    answer = problem.reference["data"]["answer"]
    good = task.env.verify(problem, f"Sure: <reversed>{answer}</reversed>")
    assert good.passed and good.reward == 1.0 and good.info["rewards"] == {"exact": 1.0} and good.info["metrics"]["reply_chars"] > 0
    assert not task.env.verify(problem, f"<reversed>{answer[::-1]}</reversed>").passed
    report = check_environment(task.env, test, timeout_s=30)
    assert report.passed, [(r.name, r.detail) for r in report.results]
    explicit = tasks.make(f"verifiers:{word_taskset}", splits={"train": {"words": ["kite", "lemon"]}, "test": {"words": ["river"]}})
    assert explicit.size("train") == 2 and explicit.size("test") == 1


def test_verifiers_tasksets_rlvr_cannot_run_are_refused_naming_why(word_taskset):
    with pytest.raises(ValueError, match="drives its own multi-turn episode"):
        tasks.make("verifiers:rlvr_test_driven").env
    with pytest.raises(tasks.TaskError, match="not installed"):
        tasks.make("verifiers:rlvr_no_such_taskset").size("test")
    with pytest.raises(tasks.TaskError, match="bad config"):
        tasks.make(f"verifiers:{word_taskset}", taskset={"words": "not a list"}).size("test")
    with pytest.raises(tasks.TaskError, match="test_fraction"):
        tasks.make(f"verifiers:{word_taskset}", test_fraction=1.5)


# -- Harbor: a hand-written task evaluated by rlvr eval -----------------------------------------


def memorise(model_dir: Path, prompt: str, completion: str, steps: int = 200) -> Path:
    """Teach the embedded model one completion of one prompt (teacher forcing, a few seconds), so
    that `rlvr eval` has a model whose reply is known."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    prompt_ids = tokenizer(prompt)["input_ids"]
    ids = torch.tensor([prompt_ids + tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]])
    labels = ids.clone()
    labels[0, :len(prompt_ids)] = -100
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(model_dir)
    return model_dir


@pytest.mark.parametrize("reply,reward", [("```bash\necho 'Hello, world!' > /app/hello.txt\n```", 1.0),
                                          ("```bash\necho 'Hello, moon!' > /app/hello.txt\n```", 0.0)], ids=["solves", "fails"])
def test_rlvr_eval_runs_a_hand_written_harbor_task(tmp_path, reply, reward):
    """`rlvr eval` on a Harbor task folder written by hand: the model's reply runs as the agent's
    commands in /app, then the task's own tests/test.sh writes the reward. The embedded model is
    taught one reply first, so the outcome is known: the right file passes, a wrong one does not."""
    from rlvr.cli import main
    from rlvr.models.tiny import TinyModelConfig, build_tiny_model

    root = hello_task(tmp_path / "tasks")
    prompt = (root / "hello-world" / "instruction.md").read_text()
    model = build_tiny_model(TinyModelConfig(hidden_size=64, layers=2, heads=2, intermediate_size=128), tmp_path / "model")
    memorise(model, prompt, reply)
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(model), "--task", f"harbor:{root}", "--max-new-tokens", "64", "--threads", "1",
                 "--verify-timeout", "60", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 1, rows
    row = rows[0]
    text = json.dumps(row)
    assert reply.split("\n")[1] in text, row  # the model wrote the taught commands
    assert '"status": "ok"' in text and f'"reward": {reward}' in text, row
    assert report["task"]["id"] == f"harbor:{root}"
