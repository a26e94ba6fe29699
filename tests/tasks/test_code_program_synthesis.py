import random

import pytest

import tasks
from tasks.leakage import check_leakage
from tasks.program_synthesis import PREFIX, TEMPLATES


def test_items_are_pure_and_gold_passes_hidden_inputs():
    t1, t2 = tasks.make("program-synthesis-v1"), tasks.make("program-synthesis-v1")
    assert [t1.get("train", i) for i in range(30)] == [t2.get("train", i) for i in range(30)]
    probs = t1.problems("test")
    assert len(probs) == 200 and t1.checksum("test").startswith("sha256:")
    p = probs[0]
    assert p.prompt.endswith(PREFIX) and len(p.prompt) < 80 and len(t1.solution(p)) <= 12  # small enough for a char-level model
    shown = p.prompt.count("f(")
    assert len(p.reference["tests"]) == shown - 1 + 5  # the shown inputs plus five hidden ones ("def f(" is not an example)
    verdicts = t1.env.verify_many(probs[:50], [t1.solution(q) for q in probs[:50]])
    assert all(v.passed for v in verdicts)


def test_copying_the_examples_fails_on_hidden_inputs():
    t = tasks.make("program-synthesis-v1")
    p = t.get("train", 3)
    pairs = [tuple(int(v) for v in ex[2:].split(")=")) for ex in p.prompt.split("\n")[0].split()]
    table = "{" + ", ".join(f"{x}: {y}" for x, y in pairs) + "}" + ".get(x, 0)"
    v = t.env.verify(p, table)
    assert not v.passed and 0 < v.info["fraction"] < 1


def test_held_out_functions_never_appear_in_training():
    t = tasks.make("program-synthesis-v1")
    assert check_leakage(t, train_limit=5000).clean
    # same function, different spelling, is the same question
    a = t.canonical_question(t.get("test", 0))
    assert a.startswith("f:")


def test_templates_compute_what_they_say():
    rng = random.Random(0)
    for template, (fn, ranges) in TEMPLATES.items():
        consts = [rng.choice(r) for r in ranges]
        expr = template.format(*consts)
        for x in range(-5, 15):
            assert eval(expr, {"x": x, "abs": abs, "max": max, "min": min}) == fn(x, *consts), expr


def test_config_is_validated():
    with pytest.raises(ValueError, match="templates"):
        tasks.make("program-synthesis-v1", templates=["x**x"])
    with pytest.raises(tasks.TaskError, match="unknown config"):
        tasks.make("program-synthesis-v1", digits=3)


EASY = {"templates": ["x+{0}", "x-{0}", "x*{0}"], "x_range": [0, 2], "const_max": 999}


def test_const_max_widens_constants_and_leaves_default_items_unchanged():
    t = tasks.make("program-synthesis-v1", **EASY)
    consts = [abs(t.get("train", i).reference["tests"][1]["expected"]) for i in range(200)]  # f(1) = 1+c, 1-c or c
    assert max(consts) > 100 and all(c <= 1000 for c in consts)
    assert all(t.get("train", i).prompt.startswith("f(0)=") for i in range(20))  # x_range [0, 2]: f(0), f(1), f(2) shown
    # const_max was added after v1 was frozen: at its default the items (and their seeds) are as before
    assert tasks.make("program-synthesis-v1").get("train", 0).metadata["solution"] == "x*12-14"


def test_too_few_functions_for_the_heldout_splits_is_refused():
    with pytest.raises(tasks.TaskError, match="at most 109 distinct functions.*raise const_max"):
        tasks.make("program-synthesis-v1", templates=["x+{0}", "x-{0}", "x*{0}"])
    with pytest.raises(ValueError, match="const_max"):
        tasks.make("program-synthesis-v1", const_max=1)


def test_table_demonstrations_pass_shown_tests_only_and_do_not_change_items():
    plain, mixed = tasks.make("program-synthesis-v1", **EASY), tasks.make("program-synthesis-v1", **EASY, table_frac=0.7)
    problems = [mixed.get("train", i) for i in range(60)]
    assert problems == [plain.get("train", i) for i in range(60)] and mixed.checksum("validation") == plain.checksum("validation")
    demos = [mixed.solution(p) for p in problems]
    tables = [d for d in demos if d.startswith("{")]
    assert 0.5 < len(tables) / len(demos) < 0.9 and tables[0].endswith("}[x]")
    verdicts = mixed.env.verify_many(problems, demos)
    for d, v in zip(demos, verdicts):
        assert v.passed != d.startswith("{")
        if d.startswith("{"):
            assert v.info["passed_tests"] == 3 and v.info["total_tests"] == 8  # the shown examples, none of the hidden ones
