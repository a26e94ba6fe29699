"""Training's ``task.env_kwargs`` act as `rlvr eval --env-kwargs` do (one shared `Task.set_env`): merged
over the task's own environment settings when ``task.env`` is unset, and a bad value refused at start,
naming ``task.env_kwargs``, before the model loads (they used to be ignored without ``task.env``)."""

import pytest

from rlvr.cli import main
from rlvr.train.config import TaskConfig
from tasks import TaskError


def test_env_kwargs_without_env_change_the_tasks_own_environment():
    task = TaskConfig(id="arithmetic-v1", env_kwargs={"extraction": "lenient"}).make()
    assert task.env_id == "math-v1" and task.env_kwargs["extraction"] == "lenient"


def test_env_kwargs_with_env_replace_the_environment_settings():
    task = TaskConfig(id="arithmetic-v1", env="math-v1", env_kwargs={"extraction": "lenient"}).make()
    assert (task.env_id, task.env_kwargs) == ("math-v1", {"extraction": "lenient"})


def test_a_bad_env_kwarg_value_is_refused_naming_the_setting():
    with pytest.raises(TaskError, match=r"^task.env_kwargs: environment 'math-v1' refused its settings: extraction must be one of"):
        TaskConfig(id="arithmetic-v1", env_kwargs={"extraction": "lenientt"}).make()
    with pytest.raises(TaskError, match=r"^task.env_kwargs: environment 'math-v1' does not accept \{'nope': 1\}"):
        TaskConfig(id="arithmetic-v1", env_kwargs={"nope": 1}).make()


def test_train_refuses_a_bad_env_kwarg_before_the_model_loads(tmp_path, capsys):
    # the model does not exist: a setting checked only after loading would report that instead
    argv = ["train", "quickstart", f"model.name_or_path={tmp_path / 'no-model'}", f"output_dir={tmp_path}",
            "task.env_kwargs={extraction: lenientt}", "update.steps=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: command-line override task.env_kwargs={extraction: lenientt}: task.env_kwargs: environment 'math-v1' "
                          "refused its settings: extraction must be one of strict, lenient, got 'lenientt'")
    assert len(err.splitlines()) == 1 and not list(tmp_path.iterdir())
