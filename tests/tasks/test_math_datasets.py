import os

import pytest

import tasks
from tasks.base import TaskError
from tasks.dataset import DataSource
from tasks.math_datasets import GSM8K, last_boxed

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(os.environ.get("RLVR_DATA_DIR", ""), "gsm8k")), reason="needs $RLVR_DATA_DIR with the benchmark data")

SIZES = {
    # train: the official 7,473 less the 500 carved out as validation
    ("gsm8k-v1", "train"): 6973, ("gsm8k-v1", "validation"): 500, ("gsm8k-v1", "test"): 1319, ("hendrycks-math-v1", "test"): 5000,
    ("hendrycks-math-v1", "validation"): 500,
    ("hendrycks-math-v1", "test_rest"): 4500, ("math500-v1", "test"): 500, ("aime24-v1", "test"): 30,
    ("aime25-v1", "test"): 30, ("amc23-v1", "test"): 40,
}


@pytest.mark.parametrize("task_id,split", sorted(SIZES))
def test_official_splits_load_from_local_files(task_id, split):
    task = tasks.make(task_id)
    problems = task.problems(split)
    assert len(problems) == SIZES[task_id, split]
    assert task.env_id == "math-v1" and "test" in task.heldout_splits
    assert all(p.reference for p in problems)
    assert "\\boxed{}" in problems[0].prompt
    assert task.load_report(split).origin.endswith(".jsonl")


@pytest.mark.parametrize("task_id", ["gsm8k-v1", "hendrycks-math-v1"])
def test_a_task_without_a_validation_split_gets_a_fixed_disjoint_slice_of_train(task_id):
    """Validation is 500 of the data's train problems, chosen by a hash of (task id, problem id):
    the same on every load, spread over the file, held out from training and from leakage."""
    from tasks.leakage import check_leakage

    task = tasks.make(task_id)
    train, validation = task.problems("train"), task.problems("validation")
    assert "validation" in task.heldout_splits and len(validation) == 500
    assert not {p.id for p in train} & {p.id for p in validation}
    assert all(p.id.startswith("train/") for p in validation)  # the data's own ids, not renumbered
    again = tasks.make(task_id)
    assert [p.id for p in again.problems("validation")] == [p.id for p in validation]
    numbers = sorted(int(p.id.split("/")[1]) for p in validation) if task_id == "gsm8k-v1" else []
    assert not numbers or (numbers[0] < 500 and numbers[-1] > 6500)  # spread over the file, not its first rows
    assert check_leakage(task, "train").clean
    from rlvr import UserError
    from rlvr.train.config import RunConfig, TaskConfig
    from rlvr.train.task_checks import open_training_task

    config = RunConfig(task=TaskConfig(id=task_id, leakage="off"))
    assert open_training_task(config, evaluates=True, prompts_needed=1, say=print).id == task_id  # eval.split=validation exists now
    config.task.split = "validation"
    with pytest.raises(UserError, match="task.split='validation' is a held-out split"):
        open_training_task(config, evaluates=True, prompts_needed=1, say=print)


def test_references_are_what_the_checker_expects():
    assert tasks.make("gsm8k-v1").get("test", 0).reference == "18"
    assert tasks.make("amc23-v1").get("test", 0).reference == "27"  # from the float 27.0
    m500 = tasks.make("math500-v1").get("test", 0)
    assert m500.id == "test/precalculus/807.json" and m500.reference.startswith("\\left( 3")


def test_gold_solutions_pass_the_checker():
    for task_id, split in (("gsm8k-v1", "test"), ("math500-v1", "test"), ("aime24-v1", "test"), ("amc23-v1", "test")):
        task = tasks.make(task_id)
        for p in task.problems(split, limit=60):
            v = task.env.verify(p, task.env.gold_completion(p))
            assert v.passed, (task_id, p.id, p.reference, v.info)


def test_math_train_shares_no_question_with_test():
    from tasks.leakage import check_leakage

    report = check_leakage(tasks.make("hendrycks-math-v1"), "train")
    assert report.clean, report.summary()


def test_math500_is_disjoint_from_test_rest_and_contained_in_test():
    math, m500 = tasks.make("hendrycks-math-v1"), tasks.make("math500-v1")
    rest = {p.id for p in math.problems("test_rest")}
    held = {p.id for p in m500.problems("test")}
    assert not rest & held and held <= {p.id for p in math.problems("test")}


def test_training_on_math_test_with_math500_held_out_is_refused():
    with pytest.raises(TaskError, match="math500-v1:test.*hendrycks-math/test-math500"):
        tasks.assert_disjoint(train=("hendrycks-math-v1", "test"), heldout=[("math500-v1", "test")])
    with pytest.raises(TaskError, match="gsm8k-v1:test"):
        tasks.assert_disjoint(train=(tasks.make("gsm8k-v1"), "test"), heldout=[("gsm8k-v1", "test")])
    tasks.assert_disjoint(train=("hendrycks-math-v1", "train"), heldout=[("math500-v1", "test"), ("hendrycks-math-v1", "test"), ("aime24-v1", "test")])
    tasks.assert_disjoint(train=("hendrycks-math-v1", "test_rest"), heldout=[("math500-v1", "test")])
    with pytest.raises(TaskError, match="no split 'dev'"):
        tasks.assert_disjoint(train=("gsm8k-v1", "dev"), heldout=[])
    with pytest.raises(TaskError, match="pair"):
        tasks.assert_disjoint(train="gsm8k-v1", heldout=[])  # type: ignore[arg-type]


def test_malformed_rows_are_counted_with_their_location(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = '{"question": "q", "answer": "work\\n#### 5"}'
    path.write_text("\n".join([good] * 60 + ['{"question": "q", "answer": "no marker"}', "not json"]) + "\n")

    class Small(GSM8K):
        sources = {"test": DataSource(local=str(path))}

    task = Small()
    task.id = "small-v1"
    with pytest.warns(RuntimeWarning, match="2 malformed rows"):
        assert len(task.problems("test")) == 60
    assert any("bad.jsonl" in loc for loc, _ in task.load_report("test").bad_rows)


def test_last_boxed_matches_braces():
    assert last_boxed("so $\\boxed{\\frac{1}{2}}$ and then \\boxed{\\{1,2\\}}") == "\\{1,2\\}"
    assert last_boxed("no box") is None
