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
