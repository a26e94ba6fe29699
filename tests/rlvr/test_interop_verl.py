"""verl interop: `rlvr tasks export` writes verl's parquet rows, they read back with `datasets`,
and the reward function file, loaded the way verl loads it, scores gold 1 and wrong 0 for a math
and a code task, and bounds a verifier that raises or hangs."""

from __future__ import annotations

import importlib.util
import re

import pytest

import envs
import sandboxes
import tasks
from envs.testing import FaultyEnv
from rlvr.cli import main

COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]


def export(capsys, tmp_path, task_id: str, split: str, limit: int, *extra: str):
    """Run the export command; return the rows read back with `datasets` and verl's reward function."""
    from datasets import load_dataset

    out = tmp_path / f"{task_id.replace('/', '_')}-{split}.parquet"
    assert main(["tasks", "export", task_id, "--split", split, "--format", "parquet", "--out", str(out), "--limit", str(limit), *extra]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {limit} rows" in printed
    path = re.search(r"custom_reward_function\.path=(\S+)", printed).group(1)
    # as verl's load_extern_object does: a module from a file path, then the named function
    spec = importlib.util.spec_from_file_location("custom_module_rlvr", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return load_dataset("parquet", data_files=str(out), split="train"), module.compute_score, module


def score(compute_score, row, solution: str, **reward_kwargs) -> dict:
    # verl's naive reward manager: keyword arguments, extra_info with fields of its own added
    extra_info = {**row["extra_info"], "num_turns": None, "rollout_reward_scores": {}}
    return compute_score(data_source=row["data_source"], solution_str=solution, ground_truth=row["reward_model"]["ground_truth"],
                         extra_info=extra_info, **reward_kwargs)


def test_math_rows_round_trip_and_score_gold_1_wrong_0(capsys, tmp_path):
    rows, compute_score, _ = export(capsys, tmp_path, "arithmetic-v1", "test", 6)
    assert rows.column_names == COLUMNS and len(rows) == 6
    task = tasks.make("arithmetic-v1")
    for i, (row, p) in enumerate(zip(rows, task.problems("test", limit=6))):
        assert row["data_source"] == "arithmetic-v1" and row["ability"] == "math"
        assert row["prompt"] == [{"role": "user", "content": task.env.format_prompt(p)}]
        assert row["reward_model"] == {"style": "rule", "ground_truth": p.reference}
        assert (row["extra_info"]["split"], row["extra_info"]["index"], row["extra_info"]["env"]) == ("test", i, "math-v1")
    row, gold = rows[0], rows[0]["reward_model"]["ground_truth"]
    assert score(compute_score, row, f"work...\nAnswer: {gold}") == {"score": 1.0, "acc": 1.0, "verify_error": 0.0, "verify_timeout": 0.0}
    assert score(compute_score, row, f"Answer: {int(gold) + 1}")["score"] == 0.0
    assert score(compute_score, row, "no idea")["score"] == 0.0


def test_code_rows_round_trip_and_score_gold_1_wrong_0(capsys, tmp_path):
    try:
        sandboxes.default_backend()
    except sandboxes.SandboxError as e:
        pytest.skip(f"no sandbox backend here: {e}")
    rows, compute_score, module = export(capsys, tmp_path, "program-synthesis-v1", "test", 4)
    task = tasks.make("program-synthesis-v1")
    problems = task.problems("test", limit=4)
    row = rows[0]
    assert row["ability"] == "code" and row["extra_info"]["reference_format"] == "json"
    assert module.problem_of(row["reward_model"]["ground_truth"], row["extra_info"]) == problems[0]  # tests survive the trip
    gold = task.env.gold_completion(problems[0])
    assert score(compute_score, row, gold)["score"] == 1.0
    assert score(compute_score, row, "0") == {"score": 0.0, "acc": 0.0, "verify_error": 0.0, "verify_timeout": 0.0}  # f(x)=0: runs, fails the tests
    # verl's batch reward manager: math and code rows in one call, each verified by its own environment
    math_rows, _, _ = export(capsys, tmp_path, "arithmetic-v1", "test", 2)
    batch = [rows[1], math_rows[0]]
    golds = [task.env.gold_completion(problems[1]), f"Answer: {math_rows[0]['reward_model']['ground_truth']}"]
    out = module.compute_score_batch(data_sources=[r["data_source"] for r in batch], solution_strs=golds,
                                     ground_truths=[r["reward_model"]["ground_truth"] for r in batch],
                                     extra_infos=[r["extra_info"] for r in batch])
    assert [s["score"] for s in out] == [1.0, 1.0]


@pytest.fixture
def faulty_env():
    envs.register("test/faulty-v1", FaultyEnv, override=True)
    yield
    envs.ENVS.unregister("test/faulty-v1")


def test_a_raising_or_hanging_verifier_is_bounded_and_flagged(capsys, tmp_path, faulty_env):
    rows, compute_score, _ = export(capsys, tmp_path, "arithmetic-v1", "test", 1)
    row = {**rows[0], "extra_info": {**rows[0]["extra_info"], "env": "test/faulty-v1", "env_kwargs": '{"hang_s": 120}'}}
    with pytest.warns(RuntimeWarning, match="1 verifier error"):
        assert score(compute_score, row, "boom") == {"score": 0.0, "acc": 0.0, "verify_error": 1.0, "verify_timeout": 0.0}
    with pytest.warns(RuntimeWarning, match="1 timeout"):
        assert score(compute_score, row, "hang", timeout_s=2.0) == {"score": 0.0, "acc": 0.0, "verify_error": 0.0, "verify_timeout": 1.0}
    assert score(compute_score, row, "ok", timeout_s=2.0)["score"] == 1.0  # the hung worker was replaced


def test_export_errors_are_one_line(capsys, tmp_path):
    assert main(["tasks", "export", "arithmetic-v1", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "unbounded" in capsys.readouterr().err
    assert main(["tasks", "export", "arithmetic-v1", "--split", "test", "--task-config", "[1]", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "--task-config must be a mapping" in capsys.readouterr().err
    assert main(["tasks", "export", "arithmetic-v1", "--split", "test", "--task-config", "{max_digits: 1}", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "min_digits <= max_digits" in capsys.readouterr().err  # the task's own one-line error
