"""`rlvr compare`: accuracies of greedy evaluations on the same problems and the paired 95%
interval of their differences (Newcombe's hybrid score method), as the real-model report uses for
before / after / format-only control."""

from __future__ import annotations

import json
import random

import pytest

from rlvr import UserError
from rlvr.cli import main
from rlvr.eval.metrics import paired_difference_interval, wilson_interval


def test_the_paired_interval_covers_the_true_difference_about_95_percent_of_the_time():
    rng = random.Random(0)
    # two correlated models: b is right wherever a is, plus on 10% more problems
    covered, trials, n = 0, 2000, 200
    for _ in range(trials):
        a, b = [], []
        for _ in range(n):
            u = rng.random()
            a.append(u < 0.2)
            b.append(u < 0.3)
        d, lo, hi = paired_difference_interval(a, b)
        assert lo <= d <= hi
        covered += lo <= 0.1 <= hi
    assert 0.93 <= covered / trials <= 0.975


def test_pairing_narrows_the_interval_and_swapping_negates_it():
    a = [True] * 27 + [False] * 173
    b = [True] * 47 + [False] * 153  # right on every problem a gets, and 20 more
    d, lo, hi = paired_difference_interval(a, b)
    assert d == pytest.approx(0.1) and lo > 0
    (l1, u1), (l2, u2) = wilson_interval(27, 200), wilson_interval(47, 200)
    unpaired = (d - ((0.235 - l2) ** 2 + (u1 - 0.135) ** 2) ** 0.5, d + ((u2 - 0.235) ** 2 + (0.135 - l1) ** 2) ** 0.5)
    assert hi - lo < unpaired[1] - unpaired[0]
    nd, nlo, nhi = paired_difference_interval(b, a)
    assert (nd, nlo, nhi) == pytest.approx((-d, -hi, -lo))
    with pytest.raises(ValueError, match="same problems"):
        paired_difference_interval(a, b[:-1])


def write_eval(folder, task, passed, split="test"):
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"task": {"id": task}, "split": split}))
    with (folder / "predictions.jsonl").open("w") as f:
        for i, ok in enumerate(passed):
            f.write(json.dumps({"id": f"{split}/{i}", "greedy": [{"text": "x", "reward": float(ok), "passed": ok,
                                                                   "status": "ok", "extracted": "1"}]}) + "\n")
    return folder


def test_compare_prints_each_difference_with_its_interval(tmp_path, capsys):
    before = write_eval(tmp_path / "before", "arithmetic-v1", [i < 27 for i in range(200)])
    control = write_eval(tmp_path / "control", "arithmetic-v1", [i < 30 for i in range(200)])
    after = write_eval(tmp_path / "after", "arithmetic-v1", [i < 47 for i in range(200)])
    assert main(["compare", str(before), str(control), str(after), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == 200 and out["accuracy"] == {"before": 0.135, "control": 0.15, "after": 0.235}
    beyond = next(d for d in out["differences"] if (d["first"], d["second"]) == ("control", "after"))
    assert beyond["diff"] == pytest.approx(0.085) and beyond["excludes_zero"] and beyond["only_second"] == 17
    assert main(["compare", str(before), str(after), "--labels", "base,trained"]) == 0
    text = capsys.readouterr().out
    assert "| trained − base | +0.100 |" in text


def test_compare_refuses_different_tasks_and_names_a_missing_file(tmp_path, capsys):
    a = write_eval(tmp_path / "a", "arithmetic-v1", [True, False])
    b = write_eval(tmp_path / "b", "gsm8k-v1", [True, False])
    assert main(["compare", str(a), str(b)]) != 0
    assert "different tasks" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "nosuch")]) != 0
    assert "nosuch/report.json: not found" in capsys.readouterr().err
