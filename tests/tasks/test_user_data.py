"""Your own rows as a task (`tasks.from_dataset`, ``file:PATH`` ids): real `datasets` loads of
in-memory datasets and of files built in tmp_path, column mapping, splits carved by a hash of each
row, the checks a run makes before it trains, and `rlvr tasks show`/`list`."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import datasets
import pytest

import envs
import tasks
from rlvr import UserError
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.train import TrainConfig
from rlvr.train.task_checks import open_training_task
from tasks.leakage import check_leakage

ROWS = [{"q": f"What is {i} plus {i + 3}?", "a": str(2 * i + 3), "level": i % 3} for i in range(300)]


@pytest.fixture
def unregister():
    ids: list[str] = []
    yield ids.append
    for id in ids:
        tasks.TASKS.unregister(id)
        envs.ENVS.unregister(id)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def questions(task, split: str) -> set[str]:
    return {p.prompt for p in task.problems(split)}


def test_in_memory_dataset_maps_columns_and_carves_a_validation_split():
    task = tasks.from_dataset(datasets.Dataset.from_list(ROWS), question="q", answer="a", keep=["level"])
    assert task.splits == ("train", "validation") and task.heldout_splits == ("validation",)
    assert task.env_id == "math-v1"
    train, validation = questions(task, "train"), questions(task, "validation")
    assert not train & validation and len(train) + len(validation) == 300
    assert 10 <= len(validation) <= 60  # about a tenth
    first = task.get("train", 0)
    assert first.reference == str(2 * int(first.prompt.split()[2]) + 3) and first.metadata == {"level": int(first.prompt.split()[2]) % 3}
    assert check_leakage(task).clean


def test_carved_splits_are_fixed_by_each_row_not_by_the_order_or_the_other_rows():
    split_of = {}
    task = tasks.from_dataset(datasets.Dataset.from_list(ROWS), question="q", answer="a", test_fraction=0.2, validation_fraction=0.1)
    assert set(task.splits) == {"train", "validation", "test"} and set(task.heldout_splits) == {"validation", "test"}
    for split in task.splits:
        split_of.update({q: split for q in questions(task, split)})
    assert len(split_of) == 300  # disjoint and complete
    assert 30 <= sum(s == "test" for s in split_of.values()) <= 90
    shuffled = ROWS[:]
    random.Random(1).shuffle(shuffled)
    more = shuffled[:200] + [{"q": f"What is {i} times 7?", "a": str(7 * i), "level": 0} for i in range(50)]
    again = tasks.from_dataset(datasets.Dataset.from_list(more), question="q", answer="a", test_fraction=0.2, validation_fraction=0.1)
    for split in again.splits:
        for q in questions(again, split):
            assert split_of.get(q, split) == split, q  # a row kept its split; the new rows do not move the old ones


def test_a_dataset_dict_keeps_its_splits_and_a_callable_maps_a_column():
    source = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:200]), "dev": datasets.Dataset.from_list(ROWS[200:250]),
                                   "test": datasets.Dataset.from_list(ROWS[250:])})
    task = tasks.from_dataset(source, question=lambda row: row["q"] + " Answer with a number.", answer="a", rename={"dev": "validation"})
    assert {s: task.size(s) for s in task.splits} == {"train": 200, "validation": 50, "test": 50}
    assert set(task.heldout_splits) == {"validation", "test"}
    assert task.get("test", 0).prompt == ROWS[250]["q"] + " Answer with a number."
    with pytest.raises(tasks.TaskError, match="the source has its own test split"):
        tasks.from_dataset(source, question="q", answer="a", test_fraction=0.1)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_file_of_each_format_loads_through_datasets(tmp_path, fmt):
    path = tmp_path / f"rows.{fmt}"
    frame = datasets.Dataset.from_list(ROWS)
    {"jsonl": lambda: write_jsonl(path, ROWS), "csv": lambda: frame.to_csv(str(path)), "parquet": lambda: frame.to_parquet(str(path))}[fmt]()
    task = tasks.from_dataset(path, question="q", answer="a")
    assert task.size("train") + task.size("validation") == 300
    assert task.get("train", 0).reference in {r["a"] for r in ROWS}  # as written, in every format (csv too)


def test_a_folder_gives_its_splits_by_file_name(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", ROWS[:250])
    write_jsonl(tmp_path / "test.jsonl", ROWS[250:])
    task = tasks.from_dataset(tmp_path, question="q", answer="a")
    assert {s: task.size(s) for s in task.splits}["test"] == 50 and set(task.heldout_splits) == {"test", "validation"}
    assert task.size("train") + task.size("validation") == 250 and questions(task, "test") == {r["q"] for r in ROWS[250:]}


def test_bad_mappings_fractions_and_rows_are_named(tmp_path):
    ds = datasets.Dataset.from_list(ROWS)
    with pytest.raises(tasks.TaskError, match="question='question': a datasets.Dataset .* has no such column; its columns: a, level, q"):
        tasks.from_dataset(ds)
    with pytest.raises(tasks.TaskError, match="test_fraction \\+ validation_fraction must leave rows"):
        tasks.from_dataset(ds, question="q", answer="a", test_fraction=0.5, validation_fraction=0.5)
    with pytest.raises(tasks.TaskError, match="validation_fraction=0.1 of 2 train rows carved none"):
        tasks.from_dataset(ROWS[:2], question="q", answer="a")
    with pytest.raises(tasks.TaskError, match="no such file or folder"):
        tasks.from_dataset(tmp_path / "missing.jsonl")
    rows = ROWS[:100] + [{"q": "", "a": "1", "level": 0}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = tasks.from_dataset(rows, question="q", answer="a", validation_fraction=0)
    assert task.size("train") == 100 and any("1 of 101 rows skipped (first: train row 100: no question)" in str(w.message) for w in caught)
    with pytest.raises(tasks.TaskError, match="more than 5%"):
        tasks.from_dataset(ROWS[:10] + [{"q": "x", "a": None, "level": 0}], question="q", answer="a", validation_fraction=0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(tasks.TaskError, match="bad.jsonl: 1 malformed line\\(s\\), first .*bad.jsonl:2"):
        tasks.from_dataset(bad, question="q", answer="a")


def test_a_registered_task_and_a_function_reward_are_named_by_a_config(unregister):
    unregister("test/sums-v1")
    unregister("test/exact-v1")
    envs.from_function(lambda p, c: c.strip() == p.reference, id="test/exact-v1")
    task = tasks.from_dataset(datasets.Dataset.from_list(ROWS), question="q", answer="a", env="test/exact-v1", id="test/sums-v1")
    cfg = load_config(TrainConfig, "quickstart", ["task.id=test/sums-v1"])
    made = cfg.task.make()
    assert made.id == task.id == "test/sums-v1" and made.env.verify(made.get("train", 0), made.get("train", 0).reference).passed
    assert tasks.TASKS.spec("test/sums-v1").source == "python"
    with pytest.raises(tasks.TaskError, match="'arithmetic-v1' is already registered"):
        tasks.from_dataset(ROWS, question="q", answer="a", id="arithmetic-v1")
    direct = tasks.from_dataset(ROWS, question="q", answer="a", env=envs.from_function(lambda p, c: 0.25))  # an unregistered env object
    assert direct.env.verify(direct.get("train", 0), "x").reward == 0.25


def test_own_jsonl_without_splits_trains_with_validation_from_train_never_test(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    said: list[str] = []
    cfg = load_config(TrainConfig, "quickstart", [f"task.id=file:{path}", "task.config={question: q, answer: a}", "eval.every=5"])
    assert cfg.eval.split == "validation"
    task = open_training_task(cfg, evaluates=True, prompts_needed=100, say=said.append)
    assert task.splits == ("train", "validation") and "test" not in task.splits
    assert not questions(task, "train") & questions(task, "validation") and not said
    for split in ("validation", "test"):
        with pytest.raises(UserError, match=f"task.split='{split}' is a held-out split"):
            open_training_task(load_config(TrainConfig, "quickstart", [f"task.id=file:{path}", "task.config={question: q, answer: a, test_fraction: 0.2}",
                                                                        f"task.split={split}"]), evaluates=False, prompts_needed=1, say=said.append)
    no_validation = load_config(TrainConfig, "quickstart", [f"task.id=file:{path}", "task.config={question: q, answer: a, validation_fraction: 0, test_fraction: 0.2}",
                                                            "eval.every=5"])
    with pytest.raises(UserError) as e:
        open_training_task(no_validation, evaluates=True, prompts_needed=1, say=said.append)
    message = str(e.value)
    assert "eval.split='validation': task file:" in message and "never test" in message and "validation_fraction" in message
    open_training_task(load_config(TrainConfig, "quickstart", [f"task.id=file:{path}", "task.config={question: q, answer: a, test_fraction: 0.2}",
                                                               "eval.every=5", "eval.split=test"]), evaluates=True, prompts_needed=1, say=said.append)
    assert any("eval.split=test" in s and "selects the model on the test split" in s for s in said)


def test_a_run_that_repeats_a_small_training_split_is_warned(tmp_path):
    path = write_jsonl(tmp_path / "few.jsonl", ROWS[:40])
    cfg = load_config(TrainConfig, "quickstart", [f"task.id=file:{path}", "task.config={question: q, answer: a, validation_fraction: 0.25}"])
    size = cfg.task.make().size("train")
    said: list[str] = []
    open_training_task(cfg, evaluates=False, prompts_needed=size * 3, say=said.append)
    assert not any("may draw" in s for s in said)
    open_training_task(cfg, evaluates=False, prompts_needed=size * 50, say=said.append)
    assert any(f"the {size} problems of 'train', each about 50 times" in s for s in said)


def test_tasks_show_and_list(tmp_path, capsys):
    path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    assert main(["tasks", "show", f"file:{path}", "--task-config", "{question: q, answer: a, test_fraction: 0.2}"]) == 0
    out = capsys.readouterr().out
    task = tasks.make(f"file:{path}", question="q", answer="a", test_fraction=0.2)
    assert f"data         {path} (test 0.2 of train by question hash; validation 0.1 of train by question hash)" in out
    for split in ("train", "validation", "test"):
        role = "training" if split == "train" else "held out"
        assert f"  {split:<12} {role:<9} {task.size(split)} problems" in out
    assert "environment  math-v1  (rlvr: " in out and f"  prompt     {task.get('train', 0).prompt}" in out
    assert main(["tasks", "show", "arithmetic-v1"]) == 0
    out = capsys.readouterr().out
    assert "task         arithmetic-v1  (registered by rlvr)" in out and "unbounded (procedural)" in out and "200 problems" in out
    assert main(["tasks", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "SOURCE", "ENV", "DESCRIPTION"]
    assert any(r.split()[:3] == ["arithmetic-v1", "rlvr", "math-v1"] for r in rows)


def test_csv_answers_are_read_as_written(tmp_path):
    cells = ["007", "12345678901234567891", "NA", "None", "2.50", "nan", "-0", "True"]
    path = tmp_path / "edge.csv"
    path.write_text("question,answer\n" + "".join(f"Q{i} what?,{c}\n" for i, c in enumerate(cells))
                    + "".join(f"Q{i} filler?,{i}\n" for i in range(len(cells), 60)))
    task = tasks.from_dataset(str(path), validation_fraction=0)
    answers = {task.get("train", i).prompt: task.get("train", i).reference for i in range(task.size("train"))}
    assert [answers[f"Q{i} what?"] for i in range(len(cells))] == cells
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.csv").write_text(path.read_text())
    (folder / "test.csv").write_text("question,answer\nQ9 x?,007\n")
    loaded = tasks.from_dataset(str(folder), validation_fraction=0)
    assert loaded.get("test", 0).reference == "007" and loaded.get("train", 0).reference == "007"


def test_near_copies_of_a_question_share_a_split_and_conflicting_answers_are_warned():
    rows = [{"question": f"What is {a} plus {b}?", "answer": str(a + b)} for a in range(30) for b in range(10)]
    copies = [{"question": r["question"].replace("?", " ?").upper().replace("WHAT", "what  "), "answer": r["answer"]} for r in rows]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same answers: nothing to warn about
        task = tasks.from_dataset(rows + copies, validation_fraction=0.2, test_fraction=0.2)
    where = {}
    for split in task.splits:
        for i in range(task.size(split)):
            key = " ".join(task.get(split, i).prompt.lower().replace(" ?", "?").split())
            where.setdefault(key, set()).add(split)
    assert len(where) == 300 and all(len(splits) == 1 for splits in where.values())
    with pytest.warns(RuntimeWarning, match=r"1 repeated question\(s\) with a different answer \(first: train row 0 and train row 300 ask 'what is 0 plus 0\?' with answers \"0\" and \"1\""):
        tasks.from_dataset(rows + [{"question": "What is 0 plus 0 ?", "answer": "1"}], validation_fraction=0.2)


def test_a_misspelled_task_config_key_lists_the_valid_ones(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, ROWS)
    with pytest.raises(tasks.TaskError, match=r"file:.*rows.jsonl: unknown config key\(s\) \['questoin'\]; known: \['answer', .*'question'"):
        tasks.make(f"file:{path}", questoin="q", answer="a")
    with pytest.raises(tasks.TaskError, match=r"task gsm8k-v1: unknown config key\(s\) \['foo'\]; known: none \(it takes no config\)"):
        tasks.make("gsm8k-v1", foo=1)
