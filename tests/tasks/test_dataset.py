"""Static datasets: a malformed row is skipped, counted and reported, never silently lost."""

import json
import warnings

import pytest

from envs.types import Problem
from tasks.base import TaskError
from tasks.dataset import DataSource, DatasetTask


class QA(DatasetTask):
    env_id = "math-v1"
    required_fields = ("question", "answer")

    def __init__(self, path):
        self.sources = {"train": DataSource(local=str(path))}

    def row_to_problem(self, row, split, index):
        return Problem(f"{split}/{index}", row["question"], str(row["answer"]))


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_broken_json_line_and_missing_field_are_counted(tmp_path):
    good = [json.dumps({"question": f"q{i}", "answer": i}) for i in range(40)]
    path = write(tmp_path / "qa.jsonl", good[:10] + ['{"question": "cut off'] + good[10:30] + ['{"answer": 3}'] + good[30:])
    task = QA(path)
    task.id = "qa-v1"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert task.size("train") == 40
    report = task.load_report("train")
    assert report.rows == 42 and len(report.bad_rows) == 2
    assert report.bad_rows[0][0].endswith("qa.jsonl:11") and "invalid JSON" in report.bad_rows[0][1]
    assert "KeyError" in report.bad_rows[1][1] and "'question'" in report.bad_rows[1][1]
    assert any("2 malformed rows skipped" in str(w.message) for w in caught)


def test_mostly_broken_file_is_an_error_naming_the_file(tmp_path):
    path = write(tmp_path / "bad.jsonl", ["not json"] * 5 + [json.dumps({"question": "q", "answer": 1})])
    task = QA(path)
    task.id = "qa-v1"
    with pytest.raises(TaskError, match=r"bad.jsonl.*more than 5% of rows are malformed"):
        task.size("train")


def test_missing_file_says_where_it_looked(tmp_path):
    task = QA(tmp_path / "absent.jsonl")
    with pytest.raises(TaskError, match="not found"):
        task.size("train")


BUILTIN_DATASETS = ["gsm8k-v1", "hendrycks-math-v1", "math500-v1", "aime24-v1", "aime25-v1", "amc23-v1", "humaneval-v1", "mbpp-v1"]


@pytest.mark.parametrize("task_id", BUILTIN_DATASETS)
def test_the_published_sizes_the_task_reference_shows_are_what_loads(task_id):
    import tasks
    from tasks.dataset import DataUnavailable

    task = tasks.make(task_id)
    assert set(task.published_sizes) == set(task.splits), "published_sizes names every split (docs/reference/tasks.md shows them)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a data set's own malformed rows are reported elsewhere
            loaded = {split: task.size(split) for split in task.splits}
    except DataUnavailable as e:
        pytest.skip(f"the data is not on this machine: {e}")
    assert loaded == task.published_sizes


def test_every_builtin_dataset_task_is_checked_above():
    import tasks

    builtin = {s.id for s in tasks.TASKS.specs() if s.source == "rlvr" and isinstance(tasks.make(s.id), DatasetTask)}
    assert builtin == set(BUILTIN_DATASETS)
