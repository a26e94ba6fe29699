"""rlvr from Python (`rlvr.api`): `rlvr.train`, `rlvr.evaluate`, `rlvr.compare` with typed results, the
CLI's validation without ``sys.exit``, nothing left registered between two calls, and signatures
kept stable."""

from __future__ import annotations

import re
import inspect
import random
from pathlib import Path

import pytest

import envs
import rlvr
import tasks
from rlvr.api import Comparison, EvalReport, TrainRun, overrides_of

# The documented signatures: a change here is a change of the public API (docs/python-api.md).
SIGNATURES = {
    "train": "(config: 'str | os.PathLike' = 'quickstart', overrides: 'Sequence[str]' = (), *, task: 'Any' = None, "
             "env: 'Any' = None, resume: 'bool' = False, **settings: 'Any') -> 'TrainRun'",
    "compare": "(reports: 'Sequence[EvalReport | str | os.PathLike]', labels: 'Sequence[str] | None' = None) -> 'Comparison'",
}
EVALUATE_PARAMETERS = ["model", "task", "split", "n", "greedy", "temperature", "top_p", "max_new_tokens", "seed", "limit",
                       "task_config", "env", "env_kwargs", "verify_workers", "verify_kind", "verify_timeout_s", "out", "engine",
                       "rollout", "device", "dtype", "threads", "prompt", "progress", "options"]


def test_the_public_signatures_stay_as_documented():
    import rlvr.api

    for name, signature in SIGNATURES.items():
        assert str(inspect.signature(getattr(rlvr.api, name))) == signature, name
    assert list(inspect.signature(rlvr.api.evaluate).parameters) == EVALUATE_PARAMETERS
    assert callable(rlvr.train) and callable(rlvr.evaluate) and callable(rlvr.compare)
    from rlvr.train import TrainConfig  # the package stays a package

    assert TrainConfig.__name__ == "TrainConfig"


def test_settings_become_the_clis_overrides():
    assert overrides_of({"update": {"steps": 2}, "optim.lr": 5e-5, "task": {"config": {"max_digits": 2}}}, ["seed=3"]) == [
        "update.steps=2", "optim.lr=5.0e-05", "task.config={max_digits: 2}", "seed=3"]
    with pytest.raises(rlvr.UserError, match="key=value"):
        overrides_of({}, ["nonsense"])


def test_a_bad_config_raises_a_user_error_instead_of_exiting():
    from rlvr.config import ConfigError

    with pytest.raises(ConfigError, match="update.steps"):
        rlvr.train("quickstart", update={"steps": "many"})
    with pytest.raises(rlvr.UserError):
        rlvr.train("quickstart", nonsense={"key": 1})
    with pytest.raises(rlvr.UserError, match="task must be"):
        rlvr.train("quickstart", task=3.5)
    with pytest.raises(rlvr.UserError, match="--threads must be in 0..4096"):
        rlvr.evaluate("tiny", "arithmetic-v1", threads=-1)
    # unknown ids and splits are UserErrors too (a registry's LookupError and a task's TaskError were not)
    for override, message in (("task.id=nosuch-v1", "task.id: unknown task 'nosuch-v1'"),
                              ("task.env=nosuch-v1", "task.env: unknown environment 'nosuch-v1'"),
                              ("task.heldout=[nosuch-v1]", "task.heldout: unknown task 'nosuch-v1'"),
                              ("task.heldout=[gsm8k-v1:nosplit]", "task.heldout: task 'gsm8k-v1' has no split 'nosplit'")):
        with pytest.raises(rlvr.UserError, match=re.escape(message)):
            rlvr.train("quickstart", [override], update={"steps": 1})


def rlvr_way(base, pairs):
    """TRL's documented GRPO quickstart (a dataset, a reward function, a trainer, train), the rlvr way; the
    lines are the ones docs/python-api.md shows (there the model is a name and the settings are defaults)."""
    import datasets, envs, rlvr, tasks  # noqa: E401, F811

    def reward(problem, completion):
        return envs.rewards.math_answer(completion, problem.reference)

    rows = datasets.Dataset.from_dict({"question": [f"Compute {a}+{b}." for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})
    sums = tasks.from_dataset(rows, env=envs.from_function(reward))
    run = rlvr.train("quickstart", task=sums, model={"name_or_path": str(base)}, update={"steps": 2},
                     rollout={"prompts_per_step": 8, "group_size": 4}, eval={"limit": 8}, log={"progress": False, "tensorboard": False})
    return run, sums


@pytest.mark.slow
def test_trls_grpo_quickstart_the_rlvr_way_in_python(sft_base, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(0)
    pairs = sorted({(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(120)})
    run, sums = rlvr_way(sft_base, pairs)
    assert isinstance(run, TrainRun) and run.completed and run.steps == 2 and run.final_model.is_dir()
    assert run.run_dir.resolve().is_relative_to(tmp_path.resolve())
    assert [r["step"] for r in run.history if "reward/mean" in r] == [1, 2] and "reward/mean" in run.metrics
    assert run.config.task.id.startswith("inline-task")
    left = [i for i in [*tasks.TASKS.registered_ids(), *envs.ENVS.registered_ids()] if i.startswith("inline-")]
    assert not left  # the task and reward objects were registered for the call only

    before = rlvr.evaluate(sft_base, sums, split="validation", out=tmp_path / "eval" / "before", progress=False)
    after = rlvr.evaluate(run.final_model, sums, split="validation", out=tmp_path / "eval" / "after", progress=False)
    assert isinstance(after, EvalReport) and 0.0 <= after.accuracy <= 1.0 and after.report["split"] == "validation"
    assert (after.folder / "report.md").is_file() and "accuracy" in after.markdown
    comparison = rlvr.compare([before, after], labels=["before", "after"])
    assert isinstance(comparison, Comparison) and comparison.problems == sums.size("validation")
    assert set(comparison.accuracy) == {"before", "after"} and "after" in comparison.table


def test_the_trl_comparison_counts_lines():
    """The rlvr way above is at most TRL's ten lines (docs/python-api.md puts them side by side)."""
    body = inspect.getsource(rlvr_way).split('"""', 2)[2]
    lines = [line for line in body.splitlines() if line.strip() and not line.strip().startswith("return")]
    assert len(lines) <= 10, lines


def _always(problem, completion):
    return True


def _never(problem, completion):
    return False


def _sum_rows():
    return [{"question": f"Compute {a}+{b}.", "answer": str(a + b)} for a in range(10, 40) for b in range(10, 14)]


def test_an_environment_given_for_one_call_does_not_stick_to_the_users_task():
    from rlvr.api import _eval_task, _inline, load

    task = tasks.from_dataset(_sum_rows())
    before = (task.id, task.env_id, dict(task.env_kwargs))
    problem = task.get("validation", 0)
    first = _eval_task(tasks, task, {}, "validation", envs.from_function(_always), {})
    second = _eval_task(tasks, task, {}, "validation", envs.from_function(_never), {})
    assert first.env.verify(problem, "x").passed and not second.env.verify(problem, "x").passed
    assert _eval_task(tasks, task, {}, "validation", None, {}).env_id == before[1]
    assert _eval_task(tasks, task, {}, "validation", envs.from_function(lambda p, c: True), {}).env.verify(problem, "x").passed
    for env in (_always, _never):
        with _inline(task, envs.from_function(env)) as named:
            made = load("quickstart", named).task.make()
            assert made.env.verify(problem, "x").passed is (env is _always)
    assert (task.id, task.env_id, dict(task.env_kwargs)) == before
    env = envs.from_function(_always)
    with _inline(task, env) as named:
        load("quickstart", named).task.make().env  # noqa: B018
    assert not env.id


def test_a_lambda_reward_with_process_workers_is_refused_before_the_model_loads(tmp_path):
    lam = envs.from_function(lambda problem, completion: 1.0)
    task = tasks.from_dataset(_sum_rows())
    missing = str(tmp_path / "no-such-model")  # reached only if the check let it through
    with pytest.raises(rlvr.UserError) as caught:
        rlvr.train("quickstart", task=task, env=lam, verify={"kind": "process"}, model={"name_or_path": missing}, output_dir=str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message and message.startswith("verify.kind=process: reward function ") and "<lambda> is a lambda" in message
    assert "top level of a module" in message and "verify.kind=thread" in message
    with pytest.raises(rlvr.UserError, match=r"verify.kind=process: reward function \S*<lambda> is a lambda"):
        rlvr.evaluate(missing, tasks.from_dataset(_sum_rows(), env=lam), split="validation", verify_kind="process")
    with pytest.raises(rlvr.UserError, match="no-such-model"):  # a top-level def goes on to the next check
        rlvr.evaluate(missing, task, env=envs.from_function(_always), split="validation", verify_kind="process")


def test_a_run_on_a_task_object_resumes_when_the_object_is_given_again(sft_base, tmp_path, capsys):
    from rlvr.cli import main

    task = tasks.from_dataset(_sum_rows())
    small = dict(output_dir=str(tmp_path), name="res", model={"name_or_path": str(sft_base)}, update={"steps": 1}, threads=1,
                 rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 16}, eval={"every": 0, "at_start": False},
                 log={"tensorboard": False, "plot": False, "progress": False, "checkpoint_every": 1})
    first = rlvr.train("quickstart", task=task, env=envs.from_function(_always), **small)
    assert first.completed and first.steps == 1
    with pytest.raises(rlvr.UserError, match=r"task.id=inline-task\d+-v1: this run was started from Python with a task object"):
        rlvr.train(str(first.run_dir), resume=True, update={"steps": 2})
    capsys.readouterr()
    assert main(["train", str(first.run_dir), "--resume", "update.steps=2"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "started from Python with a task object, which must be given again" in err
    resumed = rlvr.train(str(first.run_dir), resume=True, task=task, env=envs.from_function(_always), update={"steps": 2})
    assert resumed.completed and resumed.steps == 2 and resumed.metrics["reward/mean"] == 1.0
