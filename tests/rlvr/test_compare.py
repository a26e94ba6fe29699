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


# -- several seeds per arm ------------------------------------------------------------------------------

def test_the_t_interval_and_quantiles_match_the_tables():
    from rlvr.eval.metrics import mean_t_interval, t_quantile_975

    mean, lo, hi = mean_t_interval([0.2, 0.25, 0.3])
    assert mean == pytest.approx(0.25) and hi - mean == pytest.approx(4.303 * 0.05 / 3 ** 0.5)
    assert mean_t_interval([0.4]) == (0.4, None, None)
    for df, exact in ((31, 2.0395), (40, 2.0211), (60, 2.0003), (120, 1.9799), (1000, 1.9623)):
        assert t_quantile_975(df) == pytest.approx(exact, abs=1e-3)


def test_the_two_level_bootstrap_carries_the_noise_between_seeds():
    from rlvr.eval.metrics import two_level_bootstrap

    rng = random.Random(1)
    noise = [rng.random() < 0.5 for _ in range(400)]
    agree = [[float(x) * 0.2 for x in noise] for _ in range(4)]  # every seed +0.1 on average, on the same problems
    spread = [[float(x) * v for x in noise] for v in (0.8, -0.4, 0.4, 0.0)]  # the same mean, seeds that disagree
    m1, lo1, hi1 = two_level_bootstrap(agree)
    m2, lo2, hi2 = two_level_bootstrap(spread)
    assert m1 == pytest.approx(m2) and lo1 <= m1 <= hi1 and lo2 <= m2 <= hi2
    assert hi2 - lo2 > 3 * (hi1 - lo1)  # the spread between seeds is in the interval
    assert lo1 > 0 and lo2 < 0 < hi2
    assert two_level_bootstrap(agree) == (m1, lo1, hi1)  # seeded: the same numbers every time


def test_compare_aggregates_seeds_per_arm_and_pairs_within_each_seed(tmp_path, capsys):
    ref, better, same = [], [], []
    for seed, right in enumerate((40, 50, 60)):  # reference seeds at 0.20, 0.25, 0.30 of 200 problems
        ref.append(write_eval(tmp_path / f"grpo-s{seed}", "arithmetic-v1", [i < right for i in range(200)]))
        better.append(write_eval(tmp_path / f"dapo-s{seed}", "arithmetic-v1", [i < right + 20 for i in range(200)]))  # +0.10 on every seed
        same.append(write_eval(tmp_path / f"gspo-s{seed}", "arithmetic-v1", [(i < right) != (i in (0, 199)) for i in range(200)]))
    arms = [f"grpo={','.join(map(str, ref))}", f"dapo={','.join(map(str, better))}", f"gspo={','.join(map(str, same))}"]
    assert main(["compare", *(x for a in arms for x in ("--arm", a)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == 200
    grpo = next(a for a in out["arms"] if a["label"] == "grpo")
    assert grpo["seeds"] == 3 and grpo["mean"] == pytest.approx(0.25) and grpo["accuracies"] == pytest.approx([0.2, 0.25, 0.3])
    assert grpo["hi"] - grpo["mean"] == pytest.approx(4.303 * 0.05 / 3 ** 0.5)
    dapo = next(d for d in out["differences"] if d["arm"] == "dapo")
    assert dapo["reference"] == "grpo" and dapo["diff"] == pytest.approx(0.1) and dapo["per_seed"] == pytest.approx([0.1] * 3)
    assert dapo["excludes_zero"] and dapo["lo"] < 0.1 < dapo["hi"]
    gspo = next(d for d in out["differences"] if d["arm"] == "gspo")
    assert gspo["per_seed"] == pytest.approx([0.0] * 3) and not gspo["excludes_zero"]
    # another reference, and the table
    assert main(["compare", *(x for a in arms for x in ("--arm", a)), "--reference", "dapo"]) == 0
    text = capsys.readouterr().out
    assert "| grpo | 3 | 0.250 |" in text and "| grpo − dapo | -0.100 |" in text and "| gspo − dapo |" in text


def test_compare_arms_refuse_what_cannot_be_paired(tmp_path, capsys):
    a = [write_eval(tmp_path / f"a{i}", "arithmetic-v1", [True, False]) for i in range(2)]
    b = write_eval(tmp_path / "b0", "arithmetic-v1", [True, True])
    assert main(["compare", "--arm", f"x={a[0]},{a[1]}", "--arm", f"y={b}"]) != 0
    assert "paired by seed" in capsys.readouterr().err
    assert main(["compare", "--arm", f"x={a[0]}", "--arm", f"y={b}", "--reference", "z"]) != 0
    assert "--reference 'z' is not an arm" in capsys.readouterr().err
    assert main(["compare", "--arm", "x"]) != 0
    assert "expected NAME=DIR,DIR" in capsys.readouterr().err
    assert main(["compare", str(a[0]), "--arm", f"y={b}"]) != 0
    assert "not both" in capsys.readouterr().err
    assert main(["compare"]) != 0
    assert main(["compare", "--arm", f"x={a[0]}"]) == 0  # one arm, one seed: its accuracy, no interval, no difference
    assert "— (one seed)" in capsys.readouterr().out
    low = [write_eval(tmp_path / f"low{i}", "arithmetic-v1", [i == 0, False]) for i in range(2)]  # 0.5 and 0.0: a wide interval
    assert main(["compare", "--arm", f"low={low[0]},{low[1]}", "--json"]) == 0
    arm = json.loads(capsys.readouterr().out)["arms"][0]
    assert arm["mean"] == 0.25 and arm["lo"] == 0.0 and arm["hi"] == 1.0  # clipped to what an accuracy can be


def write_content_eval(folder, questions, passed, checksum):
    from rlvr.eval.compare import problem_sha

    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"task": {"id": "inline-task1-v1"}, "split": "validation", "data_checksum": checksum}))
    with (folder / "predictions.jsonl").open("w") as f:
        for i, (question, ok) in enumerate(zip(questions, passed)):
            f.write(json.dumps({"id": f"validation/{i}", "problem_sha": problem_sha(question, "1"),
                                "greedy": [{"text": "x", "reward": float(ok), "passed": ok, "status": "ok", "extracted": "1"}]}) + "\n")
    return folder


def test_compare_pairs_the_same_questions_not_the_same_positions(tmp_path, capsys):
    import rlvr

    sums = [f"Compute {i}+1." for i in range(6)]
    a = write_content_eval(tmp_path / "a", sums, [True, True, True, False, False, False], "sha256:a")
    shuffled = write_content_eval(tmp_path / "b", sums[::-1], [True, True, True, False, False, False], "sha256:b")
    products = write_content_eval(tmp_path / "c", [f"Compute {i}*2." for i in range(6)], [True] * 6, "sha256:c")
    # the same questions in another order: paired by question (b got the other half right)
    assert main(["compare", str(a), str(shuffled), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == 6 and out["differences"][0]["only_first"] == 3 and out["differences"][0]["only_second"] == 3
    # the same ids over other questions: refused, in one line
    assert main(["compare", str(a), str(products)]) != 0
    err = capsys.readouterr().err
    assert "not the questions under them" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(UserError, match="not the questions"):
        rlvr.compare([a, products])
    with pytest.raises(UserError, match=r"labels repeat \(x\)"):
        rlvr.compare([a, shuffled], labels=["x", "x"])
    assert main(["compare", str(a), str(shuffled), "--labels", "x,x"]) != 0
    assert "labels repeat" in capsys.readouterr().err
