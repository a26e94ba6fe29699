import random
import re

import pytest

import tasks
from tasks.arithmetic import ArithmeticTask, worked_solution
from tasks.base import TaskError
from tasks.leakage import check_leakage


def _true_equality(line: str) -> bool:
    m = re.fullmatch(r"(\d+)([-+*])(\d+)(?:([-+])(\d+))?=(\d+)", line)
    assert m, f"not a scratchpad equality: {line!r}"
    x, op1, y, op2, z, rhs = m.groups()
    apply = {"+": lambda p, q: p + q, "-": lambda p, q: p - q, "*": lambda p, q: p * q}
    value = apply[op1](int(x), int(y))
    if op2:
        value = apply[op2](value, int(z))
    return value == int(rhs)


def test_worked_solution_matches_python():
    rng = random.Random(0)
    for _ in range(2000):
        a, b, op = rng.randint(0, 9999), rng.randint(0, 999), rng.choice("+-*")
        if op == "-" and b > a:
            a, b = b, a
        lines, result = worked_solution(a, op, b)
        assert result == {"+": a + b, "-": a - b, "*": a * b}[op], (a, op, b, lines)
        assert all(_true_equality(line) for line in lines), lines  # every step is a true equality
    assert worked_solution(47, "*", 8) == (["7*8=56", "4*8+5=37"], 376)
    assert worked_solution(405, "-", 98) == (["15-8=7", "10-9-1=0", "4-0-1=3"], 307)
    with pytest.raises(ValueError):
        worked_solution(3, "-", 5)


def test_frozen_test_split_is_checked_and_regenerates_identically(tmp_path, monkeypatch):
    t = tasks.make("arithmetic-v1")
    frozen = t.problems("test")
    assert len(frozen) == 500 and t.checksum("test") == t.frozen["test"]
    # the generator still produces exactly the frozen file: items are pure functions of their seed
    assert [t._generate_fresh("test", i) for i in range(500)] == frozen
    # a modified frozen file is refused, naming the file
    import tasks.procedural as procedural

    copy = tmp_path / "arithmetic-v1" / "test.jsonl"
    copy.parent.mkdir()
    copy.write_text(t.frozen_path("test").read_text().replace('"71"', '"72"', 1))
    monkeypatch.setattr(procedural, "DATA_DIR", tmp_path)
    with pytest.raises(TaskError, match="checksum"):
        tasks.make("arithmetic-v1").problems("test")


def test_demonstration_style_mixes_without_changing_items():
    plain, mixed = tasks.make("arithmetic-v1"), tasks.make("arithmetic-v1", direct_frac=0.5)
    assert plain.problems("validation") == mixed.problems("validation")  # same items, same frozen test
    assert mixed.checksum("test") == plain.checksum("test")
    demos = [mixed.solution(p) for p in mixed.problems("validation")]
    direct = sum(d.startswith("Answer:") for d in demos)
    assert 70 < direct < 130  # about half of 200
    assert all(plain.solution(p) == p.metadata["solution"] for p in plain.problems("validation"))


def test_items_are_pure_functions_of_id_config_split_index():
    t1, t2 = tasks.make("arithmetic-v1"), tasks.make("arithmetic-v1")
    assert [t1.get("train", i) for i in range(50)] == [t2.get("train", i) for i in range(50)]
    other = tasks.make("arithmetic-v1", max_digits=3)
    assert [p.prompt for p in other.problems("validation", limit=20)] != [p.prompt for p in t1.problems("validation", limit=20)]
    # adjacent indices are unrelated draws, not a shifted stream
    firsts = [t1.get("train", i).prompt for i in range(200)]
    assert len(set(firsts)) > 190


def test_no_leakage_between_train_and_heldout():
    report = check_leakage(tasks.make("arithmetic-v1"), train_limit=20_000)
    assert report.clean, report.summary()
    assert report.heldout_sizes == {"test": 500, "validation": 200}


def test_leakage_check_detects_overlap():
    class Leaky(ArithmeticTask):
        def _avoid_hashes(self, split):  # a broken generator that forgets to skip held-out items
            return frozenset()

    small = Leaky(min_digits=1, max_digits=1, ops="+")  # 100 questions: train must hit the held-out ones
    small.id = "leaky-v1"
    assert not check_leakage(small, train_limit=2000).clean


def test_gold_solutions_pass_and_config_is_validated():
    t = tasks.make("arithmetic-v1")
    for p in t.problems("test", limit=50):
        assert t.env.verify(p, t.solution(p)).passed
    with pytest.raises(TaskError, match="unknown config key"):
        tasks.make("arithmetic-v1", digits=3)
    with pytest.raises(TaskError, match="no split 'dev'"):
        t.problems("dev")


def test_stream_positions_are_stable_for_resume():
    t = tasks.make("arithmetic-v1")
    it = t.stream("train")
    first = [next(it).id for _ in range(10)]
    resumed = t.stream("train", start=5)
    assert [next(resumed).id for _ in range(5)] == first[5:]
