"""The `rlvr` command as a user runs it: listing, bad input, evaluation reports."""

from __future__ import annotations

import json

import pytest

import tasks
from rlvr.cli import main


def test_envs_list_and_check(capsys):
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "math-v1" in out and "arithmetic-v1" in out
    assert main(["envs", "check", "math-v1", "--task", "arithmetic-v1", "-n", "10"]) == 0
    out = capsys.readouterr().out
    assert "[PASS] gold passes: 10/10 ok" in out and "no train/test leakage" in out


def test_algos_list_prints_every_preset_and_its_settings(capsys):
    assert main(["algos", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["grpo", "dapo", "dr_grpo", "gspo", "prime", "rloo", "reinforce_pp", "gpg"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line and not line.startswith(" ")}
    assert rows["clip_high"][:4] == ["0.2", "0.28", "0.2", "0.0004"]
    assert rows["dynamic_sampling"][1] == "yes" and rows["implicit_prm"][4] == "yes"
    assert main(["algos", "list", "--preset", "gspo"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["gspo"]


@pytest.mark.parametrize("argv,message", [
    (["algos", "list", "--preset", "ppo2"], "unknown preset ppo2"),
    (["train", "quickstart", "task.id=hendrycks-math-v1", "task.config={}", "task.split=test", "task.heldout=[math500-v1]"],
     "training on hendrycks-math-v1:test would leak into held-out math500-v1:test"),
    (["train", "quickstart", "algo.preset=dapo", "algo.sampling_budget=0"], "algo.sampling_budget"),
    (["train", "quickstart", "optim.lrr=1"], "unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
    (["train", "quickstart", "update.steps=many"], "'update.steps' must be int"),
    (["train", "no-such-config"], "neither a file nor a built-in config"),
    (["envs", "check", "mth-v1"], "unknown environment 'mth-v1'. Did you mean: math-v1"),
    (["eval", "--model", "/nonexistent/model", "--task", "arithmetic-v1"], "not found"),
    (["eval", "--model", "x", "--task", "arithmetic-v9"], "registered versions of 'arithmetic': arithmetic-v1"),
])
def test_bad_input_gives_a_clear_error_and_exit_code_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unknown_environment_in_a_training_config_is_named(tmp_path, capsys):
    code = main(["train", "quickstart", f"output_dir={tmp_path}", "task.env=nope-v1", "model.name_or_path=/nonexistent"])
    assert code == 2
    assert "not found" in capsys.readouterr().err  # the model is checked first; now fix it and see the env error


def test_show_config_lists_every_key(capsys):
    assert main(["train", "--show-config"]) == 0
    out = capsys.readouterr().out
    assert "algo.preset" in out and "verify.on_failure" in out


@pytest.mark.slow
def test_eval_writes_reproducible_reports(sft_base, tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["eval", "--model", str(sft_base), "--task", "arithmetic-v1", "--limit", "40", "--n", "4",
            "--max-new-tokens", "64", "--out", str(out), "--seed", "3"]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["problems"] == 40 and report["split_size"] == 500 and report["split"] == "test"
    assert report["data_checksum"] == tasks.make("arithmetic-v1").checksum("test")
    assert report["settings"]["seed"] == 3 and report["task"]["id"] == "arithmetic-v1"
    s = report["sampled"]
    assert set(s["pass@k"]) == {"1", "2", "4"} and s["pass@k"]["1"] == pytest.approx(s["mean@4"])
    assert s["pass@k"]["1"] <= s["pass@k"]["2"] <= s["pass@k"]["4"]
    assert 0 <= report["greedy"]["accuracy"] <= 1 and report["greedy"]["ci95"][0] <= report["greedy"]["accuracy"]
    assert "| greedy accuracy |" in (out / "report.md").read_text()
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 40
    # the same seed reproduces the same sampled numbers
    assert main(argv) == 0
    assert json.loads((out / "report.json").read_text())["sampled"] == s
