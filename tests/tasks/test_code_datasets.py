"""HumanEval and MBPP as code tasks (data from $RLVR_DATA_DIR, as CI provides it): every problem
gradable, every reference solution passing, every ``return None`` failing."""

import json
import os
import sys

import pytest

import envs
import tasks
from tasks.code_datasets import MBPP_SPLITS, code_suite, mbpp_entry_point
from tasks.leakage import check_leakage

# the HumanEval problems whose tests are programs (loops, randomness, computed expected values)
HUMANEVAL_PROGRAMS = {"HumanEval/32", "HumanEval/33", "HumanEval/38", "HumanEval/44", "HumanEval/50", "HumanEval/53", "HumanEval/151"}


def needs_data(folder: str):
    """Skip (with the reason) where the benchmark data is not next to the checkout: the hub is offline in tests."""
    root = os.environ.get("RLVR_DATA_DIR", "")
    return pytest.mark.skipif(not os.path.isdir(os.path.join(root, folder)), reason=f"needs $RLVR_DATA_DIR/{folder} (scripts/test.sh sets ../shared/data)")


def return_none(problem) -> str:
    return f"def {problem.reference['entry_point']}(*args, **kwargs):\n    return None\n"


def failures(task, problems, solutions, should_pass: bool) -> list[str]:
    # a generous wall limit: this checks verdicts, not speed (a few references take seconds on a busy machine)
    verdicts = envs.make(task.env_id, wall_s=60.0).verify_many(problems, solutions)
    return [f"{p.id}: {v.status.value} {v.info.get('error') or v.info.get('tests', [])[:2]}" for p, v in zip(problems, verdicts)
            if v.passed != should_pass or v.status.value != "ok"]


@needs_data("humaneval")
def test_humaneval_every_problem_is_gradable_with_hidden_tests():
    t = tasks.make("humaneval-v1")
    probs = t.problems("test")
    report = t.load_report("test")
    assert len(probs) == 164 and report.rows == 164 and not report.bad_rows
    by_kind = {kind: {p.id for p in probs if p.reference["kind"] == kind} for kind in ("function", "program")}
    assert by_kind["program"] == HUMANEVAL_PROGRAMS and len(by_kind["function"]) == 157
    p = probs[0]
    assert p.id == "HumanEval/0" and "def has_close_elements" in p.prompt
    # expected values live in reference data, not in code sent to the sandbox (the program suites' tests go to the tester only)
    assert not any("assert" in str(q.reference["tests"]) for q in probs if q.id in by_kind["function"])
    assert not failures(t, probs, [t.solution(q) for q in probs], should_pass=True)
    assert not failures(t, probs, [return_none(q) for q in probs], should_pass=False)
    assert not t.env.verify(p, "    pass\n").passed  # the prompt alone (an empty body) fails


@needs_data("mbpp")
def test_mbpp_official_splits_and_gold_solutions():
    t = tasks.make("mbpp-v1")
    ids = {s: {p.metadata["task_id"] for p in t.problems(s)} for s in ("train", "validation", "test", "prompt")}
    for split, (lo, hi) in MBPP_SPLITS.items():
        assert ids[split] == set(range(lo, hi + 1)), split  # every problem of every split, none skipped
    assert check_leakage(t, "train").clean
    test = t.problems("test")
    # a sample, with the one test problem whose arguments are objects of the solution's classes (task 367, built by test_setup_code)
    sample = test[:40] + [p for p in test if p.id == "mbpp/367"]
    assert sample[-1].reference["test_setup"] and sample[-1].reference["tests"][0]["evaluated"]
    assert not failures(t, sample, [t.solution(p) for p in sample], should_pass=True)
    assert not failures(t, sample, [return_none(p) for p in sample], should_pass=False)
    assert "Your code should pass this test:\nassert " in sample[0].prompt
    assert mbpp_entry_point("assert set(similar((3, 4), (5, 4))) == set((4,))") == "similar"
    assert [p.reference["kind"] for p in t.problems("validation") if p.id == "mbpp/596"] == ["program"]  # sys.getsizeof(...) expected


@pytest.mark.slow
@needs_data("mbpp")
def test_mbpp_every_problem_passes_its_reference_and_fails_return_none():
    t = tasks.make("mbpp-v1")
    probs = [p for split in ("test", "validation", "train", "prompt") for p in t.problems(split)]
    assert len(probs) == 974 and len(t.problems("test")) == 500
    assert not failures(t, probs, [t.solution(p) for p in probs], should_pass=True)
    assert not failures(t, probs, [return_none(p) for p in probs], should_pass=False)


@pytest.mark.slow
@needs_data("humaneval")
@needs_data("mbpp")
def test_every_reference_solution_also_passes_through_the_tester():
    """``tests="program"``: the datasets' own test code, as written, run by the isolated tester."""
    for task_id, splits in (("humaneval-v1", ("test",)), ("mbpp-v1", ("test", "validation", "train", "prompt"))):
        t = tasks.make(task_id, tests="program")
        probs = [p for s in splits for p in t.problems(s)]
        pairs = {p.id for p in probs if p.reference["kind"] == "function"}
        assert pairs == ({"mbpp/367", "mbpp/533", "mbpp/601", "mbpp/927"} if task_id == "mbpp-v1" else set())  # objects as arguments
        assert not failures(t, probs, [t.solution(p) for p in probs], should_pass=True)


def mbpp_row(task_id: int) -> dict:
    return {"task_id": task_id, "text": f"Write f{task_id}.", "code": f"def f{task_id}(x):\n    return x + {task_id}\n",
            "test_list": [f"assert f{task_id}(1) == {task_id + 1}"], "test_setup_code": "", "challenge_test_list": []}


@pytest.mark.parametrize("bad_json", [False, True], ids=["datasets-loader", "line-by-line-fallback"])
def test_a_malformed_row_is_reported_at_its_line_in_the_file(tmp_path, monkeypatch, bad_json):
    rows = [mbpp_row(i) for i in range(1, 61)]
    rows[24]["test_list"] = ["print(25)"]  # task 25 (the 25th record, the 15th row of the test split) tests nothing
    lines = [json.dumps(r) for r in rows]
    lines.insert(10, "")  # a blank line: records and lines part ways
    if bad_json:
        lines.insert(3, "{not json")  # makes `datasets` refuse the file: rows are then read line by line
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "mbpp.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path))
    t = tasks.make("mbpp-v1")
    with pytest.warns(RuntimeWarning, match="malformed"):
        probs = t.problems("test")
    assert len(probs) == 49
    where = [w for w, reason in t.load_report("test").bad_rows if "no assert" in reason]
    line = lines.index(json.dumps(rows[24])) + 1
    assert where == [f"{tmp_path / 'mbpp' / 'mbpp.jsonl'}:{line}"] and line == 26 + bad_json


def test_program_mode_keeps_pairs_where_only_pairs_can_hold_the_arguments():
    objects = code_suite("assert f(Box(1)) == 1", "f", "program", evaluated_args=True)
    assert objects.kind == "function" and objects.tests[0].evaluated
    assert code_suite("assert f(1) == 2", "f", "program").kind == "program"
    assert code_suite("assert f(1) == 2", "f").kind == "function"
    with pytest.raises(ValueError, match="tests must be one of"):
        tasks.make("mbpp-v1", tests="sometimes")


def test_missing_data_names_the_file_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # `datasets` and the hub client read those once, at import: an earlier test that loaded data had them read
    # as unset, and the hub was then retried for about 20 s before the error
    for module in ("datasets.config", "huggingface_hub.constants"):
        if module in sys.modules:
            for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
                if hasattr(sys.modules[module], flag):
                    monkeypatch.setattr(sys.modules[module], flag, True)
    with pytest.raises(tasks.TaskError, match="mbpp/mbpp.jsonl.*RLVR_DATA_DIR"):
        tasks.make("mbpp-v1").problems("test")
