"""Every built-in config works with every task that has a training split: started from any of them
with ``task.id=T``, a run opens its task, finds the split it evaluates on (a task whose data has no
validation split gets one, carved from train) and passes its split checks, before any model loads."""

from __future__ import annotations

import os

import pytest

import tasks
from rlvr.config import CONFIG_DIR
from rlvr.train.recipes import load_run_config
from rlvr.train.task_checks import open_training_task

CONFIGS = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
DATA = os.path.isdir(os.path.join(os.environ.get("RLVR_DATA_DIR", ""), "gsm8k"))


def _trainable_tasks() -> list[str]:
    ids = []
    for task_id in tasks.TASKS.ids():
        try:
            task = tasks.make(task_id)
        except Exception:  # noqa: BLE001 - an optional dependency (reasoning-gym) missing here: not this test's business
            continue
        if "train" in task.splits:
            ids.append(task_id)
    return ids


@pytest.mark.skipif(not DATA, reason="needs $RLVR_DATA_DIR with the benchmark data")
@pytest.mark.parametrize("config", CONFIGS)
def test_every_builtin_config_opens_every_task_with_a_training_split(config):
    trainable = _trainable_tasks()
    assert {"gsm8k-v1", "hendrycks-math-v1", "arithmetic-v1", "mbpp-v1"} <= set(trainable)
    for task_id in trainable:
        cfg = load_run_config(config, [f"task.id={task_id}", "task.leakage=off", "task.heldout=[]"])
        task = open_training_task(cfg, evaluates=True, prompts_needed=1, say=lambda message: None)
        assert cfg.eval.split in task.splits and cfg.eval.split in task.heldout_splits, (config, task_id, task.splits)
